//! infr-config
