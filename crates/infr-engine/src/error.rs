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
    /// The weights, the KV cache of the requested context and the largest step's activations
    /// do not fit the device.
    #[error(
        "{device} has {available_mib} MiB available, but the model needs {weights_mib} MiB of weights, the KV \
         cache of {seqs} x {n_ctx} tokens another {kv_mib} MiB and the activations of a {ubatch}-token step at \
         least {act_mib} MiB: lower --ctx-size (or --parallel, or --ubatch-size), or use a smaller KV type (--ctk)"
    )]
    DoesNotFit {
        device: String,
        available_mib: u64,
        weights_mib: u64,
        kv_mib: u64,
        n_ctx: usize,
        seqs: usize,
        act_mib: u64,
        ubatch: usize,
    },
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
/// counts weights, the KV cache and a lower bound of the activations; temporaries come on
/// top of them).
fn memory_hint(e: &BackendError) -> &'static str {
    match e {
        BackendError::OutOfMemory { .. } => {
            ": lower --ctx-size, --parallel or --ubatch-size, use a smaller KV type (--ctk q8_0), or let the KV \
             cache spill to host memory (kv.spill_to_host)"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Running out of device memory while running says what to change; other backend errors
    /// are passed on as they are.
    #[test]
    fn out_of_memory_says_what_to_change() {
        let oom =
            EngineError::Backend(BackendError::OutOfMemory { device: "Vulkan0".into(), what: "x".into(), bytes: 1 });
        let text = oom.to_string();
        assert!(text.contains("lower --ctx-size") && text.contains("--ubatch-size"), "{text}");
        let other =
            EngineError::Backend(BackendError::Unsupported { backend: "Vulkan0".into(), what: "y".into() }).to_string();
        assert!(!other.contains("lower --ctx-size"), "{other}");
    }
}
