//! infr-engine
