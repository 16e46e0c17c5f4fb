use infr_core::BackendError;
use infr_models::ModelError;

/// Errors while running a model.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A backend failure; running out of device memory also says what to change.
    /// (Not a `source`: the message already carries the backend's.)
    #[error("{0}{hint}", hint = memory_hint(.0))]
    Backend(BackendError),
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

impl From<BackendError> for EngineError {
    fn from(e: BackendError) -> Self {
        EngineError::Backend(e)
    }
}

/// What to change after the device ran out of memory while running (the up-front check
/// counts weights and the KV cache; step activations come on top of them).
fn memory_hint(e: &BackendError) -> &'static str {
    match e {
        BackendError::OutOfMemory { .. } => {
            ": lower --ctx-size, --parallel or --ubatch-size, use a smaller KV type (--ctk q8_0), or let the KV \
             cache spill to host memory (kv.spill_to_host)"
        }
        _ => "",
    }
}
