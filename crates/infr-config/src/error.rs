//! Fatal configuration errors (unknown keys are warnings, not errors).

use std::path::PathBuf;

use crate::provenance::Source;

/// Why the configuration could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `--config PATH` (or `INFR_CONFIG`) names a file that does not exist.
    #[error("config file {} does not exist", path.display())]
    FileNotFound {
        /// The path given.
        path: PathBuf,
    },

    /// `--config PATH` names a directory, pipe or device.
    #[error("config file {} is {kind}", path.display())]
    NotAFile {
        /// The path given.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },

    /// The config file is larger than any configuration needs.
    #[error("config file {} is {bytes} bytes (at most {max})", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
        /// The limit.
        max: u64,
    },

    /// The config file exists but could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The config file is not valid TOML.
    #[error("{}: invalid TOML: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },

    /// A value has the wrong type or is out of range, e.g.
    /// `sampling.temperature: expected a float, got "hot" (from env INFR_SAMPLING_TEMPERATURE)`.
    #[error("{key}: {message} (from {origin})")]
    Type {
        /// Dotted key.
        key: String,
        /// `expected ..., got ...`.
        message: String,
        /// Where the bad value came from.
        origin: Source,
    },

    /// A `--set` argument without `=`.
    #[error("--set {arg:?}: expected key=value (e.g. --set kernels.vulkan.flash_splits=2)")]
    BadSet {
        /// The argument.
        arg: String,
    },

    /// The merged tree did not fit the typed struct (a schema bug; the message names the field).
    #[error("configuration does not match the schema: {0}")]
    Schema(String),
}
