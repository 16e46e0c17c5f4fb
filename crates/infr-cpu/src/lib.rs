//! infr-cpu
