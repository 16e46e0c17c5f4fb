//! What every handler shares: the scheduler, the tokenizer and chat template, the model's id,
//! the API key and the metrics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use infr_engine::{SamplingParams, SchedulerHandle};

use crate::metrics::Metrics;
use crate::reasoning::ReasoningFormat;
use crate::text::TextModel;

/// Settings of the server (what `infr serve` passes in).
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The model id reported by `/v1/models` and echoed in responses (the file stem). The
    /// `model` field of requests is ignored, as llama.cpp's server does: any name is served by
    /// the one loaded model.
    pub model_id: String,
    /// Path of the model file (reported by `/props`).
    pub model_path: String,
    /// When set, every route but `/health` needs `Authorization: Bearer KEY` or `x-api-key: KEY`.
    pub api_key: Option<String>,
    /// Sampling used for fields a request leaves out (llama.cpp's defaults).
    pub default_sampling: SamplingParams,
    /// How reasoning (`<think>...</think>`) in replies is reported (`--reasoning-format`).
    pub reasoning_format: ReasoningFormat,
    /// Whether `GET /metrics` is served (`--metrics`).
    pub metrics: bool,
}

impl ServerOptions {
    /// Options for `model_id` with no key, llama.cpp's default sampling, reasoning split
    /// `auto` and no metrics.
    pub fn new(model_id: impl Into<String>) -> Self {
        Self {
            model_id: model_id.into(),
            model_path: String::new(),
            api_key: None,
            default_sampling: SamplingParams::default(),
            reasoning_format: ReasoningFormat::default(),
            metrics: false,
        }
    }
}

/// State shared by all handlers.
pub struct AppState {
    /// Submits generation requests.
    pub sched: SchedulerHandle,
    /// Tokenizer and chat template.
    pub text: TextModel,
    /// Server settings.
    pub opts: ServerOptions,
    /// Unix time the server started (the `created` of `/v1/models`).
    pub started: u64,
    /// Request and token counters (served at `/metrics` with `--metrics`).
    pub metrics: Metrics,
    ids: AtomicU64,
}

/// The state as handlers receive it.
pub type SharedState = Arc<AppState>;

impl AppState {
    /// State over a running scheduler.
    pub fn new(sched: SchedulerHandle, text: TextModel, opts: ServerOptions) -> Self {
        Self { sched, text, opts, started: unix_now(), metrics: Metrics::new(), ids: AtomicU64::new(0) }
    }

    /// A fresh response id starting with `prefix` (`chatcmpl-`, `cmpl-`, `msg_`).
    pub fn new_id(&self, prefix: &str) -> String {
        use std::hash::{BuildHasher, Hasher};
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(n);
        format!("{prefix}{:016x}{n:x}", h.finish())
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Run request work that is CPU-heavy for big requests (rendering and tokenizing a prompt of
/// megabytes) on tokio's blocking pool, so it does not hold an async worker (and `/health`
/// with it) for its whole duration.
pub async fn blocking<T: Send + 'static>(
    st: &SharedState,
    work: impl FnOnce(&AppState) -> Result<T, crate::ApiError> + Send + 'static,
) -> Result<T, crate::ApiError> {
    let st = st.clone();
    tokio::task::spawn_blocking(move || work(&st))
        .await
        .map_err(|e| crate::ApiError::Internal(format!("prompt task failed: {e}")))?
}
