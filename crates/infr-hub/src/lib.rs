//! infr-hub
