//! infr-models
