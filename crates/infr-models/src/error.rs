use infr_gguf::GgufError;

/// Why a model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// `general.architecture` names something we do not run.
    #[error("unknown architecture '{arch}' (supported: {supported})")]
    UnknownArchitecture { arch: String, supported: String },
    /// A tensor the architecture needs is absent.
    #[error("missing tensor '{0}'")]
    MissingTensor(String),
    /// A tensor has another shape than the hyper-parameters imply.
    #[error("tensor '{name}' has shape {got:?}, expected {expected:?}")]
    WrongShape { name: String, got: Vec<usize>, expected: Vec<usize> },
    /// Hyper-parameters that are missing, inconsistent or out of range.
    #[error("invalid hyper-parameter: {0}")]
    BadHparam(String),
    /// The metadata itself could not be read.
    #[error(transparent)]
    Metadata(#[from] GgufError),
}
