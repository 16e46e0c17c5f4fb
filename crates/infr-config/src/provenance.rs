//! Where each resolved value came from.

use std::fmt;
use std::path::PathBuf;

/// The layer a value came from, in increasing precedence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The built-in default.
    Default,
    /// A config file.
    File(PathBuf),
    /// An environment variable (its name).
    Env(String),
    /// A `--set key=value` argument (the whole argument).
    Set(String),
    /// A command-line flag (its name, e.g. `--ctx-size`).
    Flag(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(p) => write!(f, "file {}", p.display()),
            Source::Env(n) => write!(f, "env {n}"),
            Source::Set(a) => write!(f, "--set {a}"),
            Source::Flag(n) => write!(f, "flag {n}"),
        }
    }
}

/// A resolved leaf: its normalized value and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Normalized TOML value (sizes and seeds in canonical text form).
    pub value: toml::Value,
    /// The layer that set it.
    pub source: Source,
}
