//! infr-server
