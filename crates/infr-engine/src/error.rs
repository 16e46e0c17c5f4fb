use infr_core::BackendError;
use infr_models::ModelError;

/// Errors while running a model.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The prompt plus generation does not fit the context.
    #[error("the sequence needs {needed} tokens but the context holds {n_ctx} (raise --ctx or shorten the prompt)")]
    ContextFull { needed: usize, n_ctx: usize },
    /// The KV cache has no free pages left.
    #[error("KV cache full: no free pages for another {tokens} tokens")]
    KvFull { tokens: usize },
    /// A sequence id that does not exist.
    #[error("unknown sequence {0}")]
    UnknownSequence(u32),
    /// The weights and the KV cache of the requested context do not fit the device.
    #[error(
        "{device} has {available_mib} MiB available, but the model needs {weights_mib} MiB of weights and the KV \
         cache of {seqs} x {n_ctx} tokens another {kv_mib} MiB: lower --ctx-size (or --parallel), or use a smaller \
         KV type (--ctk)"
    )]
    DoesNotFit { device: String, available_mib: u64, weights_mib: u64, kv_mib: u64, n_ctx: usize, seqs: usize },
    /// The model needs an op the device cannot run (checked before its weights are loaded).
    #[error("{device} cannot run this model: op '{op}' ({layer}) is not supported there: {why}")]
    UnsupportedOp { device: String, op: &'static str, layer: String, why: String },
    /// Invalid arguments (empty input, bad sampling parameter…).
    #[error("{0}")]
    Invalid(String),
}
