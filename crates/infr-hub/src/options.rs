//! Settings of the hub client and how they are read from the environment.

use std::path::PathBuf;
use std::time::Duration;

use crate::cache::HfCache;

/// The public Hugging Face endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// When to draw progress bars.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProgressMode {
    /// Draw on stderr only when it is a terminal.
    #[default]
    Auto,
    /// Always draw (still through indicatif's stderr target).
    Always,
    /// Never draw.
    Never,
}

/// Everything the hub client needs; [`HubOptions::from_env`] fills it like `huggingface_hub` would.
#[derive(Debug, Clone)]
pub struct HubOptions {
    /// Hub base URL without trailing slash (`HF_ENDPOINT`, a mirror, or a test server).
    pub endpoint: String,
    /// Bearer token (`HF_TOKEN`), sent to the endpoint's host only.
    pub token: Option<String>,
    /// The cache to read and fill.
    pub cache: HfCache,
    /// Resolve from the cache only (`--offline`, `HF_HUB_OFFLINE=1`).
    pub offline: bool,
    /// Progress bar policy.
    pub progress: ProgressMode,
    /// Parallel range requests for one large file.
    pub connections: usize,
    /// Files at least this large (bytes) are fetched with parallel ranges.
    pub parallel_min_size: u64,
    /// Size of one range request in a parallel download (bytes).
    pub chunk_size: u64,
    /// Retries after a transient failure (connection error, timeout, 5xx/429) that made no progress.
    pub max_retries: u32,
    /// First backoff delay; doubled after each failed attempt, capped at 30 s.
    pub retry_base_delay: Duration,
    /// TCP/TLS connect timeout.
    pub connect_timeout: Duration,
    /// Longest wait for the next bytes of a response before the attempt counts as failed.
    pub read_timeout: Duration,
    /// A download slower than `min_speed` bytes/s over `speed_window` counts as failed, so a
    /// server that trickles bytes (each within `read_timeout`) cannot hold a pull forever
    /// (curl's `--speed-limit` / `--speed-time`). Such failures are retried without the reset
    /// progress earns.
    pub min_speed: u64,
    pub speed_window: Duration,
    /// `User-Agent` header.
    pub user_agent: String,
}

impl Default for HubOptions {
    fn default() -> Self {
        HubOptions {
            endpoint: DEFAULT_ENDPOINT.to_string(),
            token: None,
            cache: HfCache::from_env(),
            offline: false,
            progress: ProgressMode::Auto,
            connections: 4,
            parallel_min_size: 64 << 20,
            chunk_size: 16 << 20,
            max_retries: 5,
            retry_base_delay: Duration::from_millis(500),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            min_speed: 1024,
            speed_window: Duration::from_secs(60),
            user_agent: format!("infr/{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// `huggingface_hub`'s truthy values for boolean variables.
pub fn env_truthy(v: &str) -> bool {
    matches!(v.trim().to_ascii_uppercase().as_str(), "1" | "ON" | "YES" | "TRUE")
}

impl HubOptions {
    /// Options from the process environment (see [`HubOptions::from_env_with`]).
    pub fn from_env() -> Self {
        Self::from_env_with(|k| std::env::var(k).ok())
    }

    /// Options from an environment lookup, so tests can inject one:
    /// - `HF_ENDPOINT` (else llama.cpp's `MODEL_ENDPOINT`) for the endpoint;
    /// - `HF_TOKEN` (else `HUGGING_FACE_HUB_TOKEN`, else the token file at `$HF_TOKEN_PATH` or `$HF_HOME/token`);
    /// - `HF_HUB_OFFLINE` for offline mode;
    /// - the cache root as in [`HfCache::from_env_with`].
    pub fn from_env_with(get: impl Fn(&str) -> Option<String>) -> Self {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let endpoint = get("HF_ENDPOINT")
            .or_else(|| get("MODEL_ENDPOINT"))
            .map(|e| e.trim().trim_end_matches('/').to_string())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let token = get("HF_TOKEN").or_else(|| get("HUGGING_FACE_HUB_TOKEN")).or_else(|| {
            let path = get("HF_TOKEN_PATH").map(PathBuf::from).or_else(|| {
                let home = get("HF_HOME").map(PathBuf::from).or_else(|| {
                    get("XDG_CACHE_HOME")
                        .map(PathBuf::from)
                        .or_else(|| get("HOME").map(|h| PathBuf::from(h).join(".cache")))
                        .map(|c| c.join("huggingface"))
                });
                home.map(|h| h.join("token"))
            })?;
            std::fs::read_to_string(path).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty())
        });
        HubOptions {
            endpoint,
            token: token.map(|t| t.trim().to_string()),
            cache: HfCache::from_env_with(get),
            offline: get("HF_HUB_OFFLINE").is_some_and(|v| env_truthy(&v)),
            ..Default::default()
        }
    }

    /// Sets the endpoint (a mirror or a test server), trimming a trailing slash.
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = endpoint.into().trim_end_matches('/').to_string();
        self
    }

    /// Sets the cache root.
    pub fn with_cache(mut self, root: impl Into<PathBuf>) -> Self {
        self.cache = HfCache::new(root);
        self
    }

    /// Sets offline mode.
    pub fn with_offline(mut self, offline: bool) -> Self {
        self.offline = offline;
        self
    }

    /// Sets the bearer token.
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }
}
