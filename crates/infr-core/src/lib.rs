//! infr-core
