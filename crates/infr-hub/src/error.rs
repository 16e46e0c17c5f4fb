//! Typed errors of the hub client.

use std::path::PathBuf;

/// Everything that can go wrong while parsing a model reference, reading the cache or talking to the Hub.
///
/// Each variant carries enough context (repo, file, URL, path) for the message alone to tell a user what to do.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The reference string is not a local path and not `org/repo[:quant|:file.gguf][@rev]`.
    #[error("invalid model reference {input:?}: {reason}")]
    InvalidRef {
        /// What the user typed.
        input: String,
        /// Why it was rejected.
        reason: String,
    },

    /// The server answered 401: the repo is private or gated (or does not exist) and no usable token was sent.
    #[error(
        "{url}: 401 Unauthorized: {repo} is private or gated (or does not exist); it needs HF_TOKEN{}",
        if *token_sent { " (the token that was sent was rejected)" } else { " (no token was sent)" }
    )]
    Unauthorized {
        /// Repository concerned.
        repo: String,
        /// URL that answered 401.
        url: String,
        /// Whether an `Authorization` header was sent.
        token_sent: bool,
    },

    /// The server answered 403: the token has no access (e.g. a gated repo whose terms were not accepted).
    #[error("{url}: 403 Forbidden: no access to {repo} with this HF_TOKEN (gated repo? accept its terms on the Hub)")]
    Forbidden {
        /// Repository concerned.
        repo: String,
        /// URL that answered 403.
        url: String,
    },

    /// The repository (or the revision) does not exist on the endpoint.
    #[error("no such repo or revision: {repo}@{revision} ({url}: 404 Not Found)")]
    RepoNotFound {
        /// Repository concerned.
        repo: String,
        /// Revision that was asked for.
        revision: String,
        /// URL that answered 404.
        url: String,
    },

    /// The repository exists but has no such file.
    #[error("no such file {file:?} in {repo}{}", available_suffix(available))]
    FileNotFound {
        /// Repository concerned.
        repo: String,
        /// File that was asked for.
        file: String,
        /// GGUF files that do exist, to help the user pick one.
        available: Vec<String>,
    },

    /// No GGUF file in the repo matches the requested quantization tag.
    #[error(
        "no GGUF file for quant {quant:?} in {repo}; available quants: {}{}",
        if quants.is_empty() { "(none)".to_string() } else { quants.join(", ") },
        available_suffix(files)
    )]
    QuantNotFound {
        /// Repository concerned.
        repo: String,
        /// Tag that was asked for (`Q4_K_M` when none was given).
        quant: String,
        /// Quantization tags found in the repo's model files.
        quants: Vec<String>,
        /// GGUF files in the repo.
        files: Vec<String>,
    },

    /// A split model is missing one of its `-0000i-of-0000N.gguf` shards.
    #[error("{repo}: split model {first} is missing shard(s): {}", missing.join(", "))]
    MissingShards {
        /// Repository concerned.
        repo: String,
        /// First shard of the model.
        first: String,
        /// Names of the shards that are not in the listing.
        missing: Vec<String>,
    },

    /// Offline mode (flag or `HF_HUB_OFFLINE=1`) and the cache cannot satisfy the request.
    #[error("offline mode: {what} is not in the cache {}", cache.display())]
    NotCached {
        /// What is missing, e.g. `models--org--repo/refs/main` or a file name.
        what: String,
        /// Cache root that was searched.
        cache: PathBuf,
    },

    /// The downloaded bytes do not hash to the value the server announced.
    #[error("checksum mismatch for {file}: expected {algo} {expected}, got {got}; the download was discarded")]
    Checksum {
        /// File in the repo.
        file: String,
        /// `sha256` or `git-sha1`.
        algo: &'static str,
        /// Hash announced by the server (ETag / LFS oid).
        expected: String,
        /// Hash of what was received.
        got: String,
    },

    /// The download does not have the announced size.
    #[error("size mismatch for {file}: expected {expected} bytes, got {got}")]
    SizeMismatch {
        /// File in the repo.
        file: String,
        /// Announced size.
        expected: u64,
        /// Received size.
        got: u64,
    },

    /// Any other HTTP status.
    #[error("{url}: HTTP {status}{}", if body.is_empty() { String::new() } else { format!(": {body}") })]
    Http {
        /// Status code.
        status: u16,
        /// URL that answered.
        url: String,
        /// Short error text from the body (HF sends `{"error": "..."}`).
        body: String,
    },

    /// Connection-level failure (refused, reset, timeout) that persisted through all retries.
    #[error("{url}: {message} (after {attempts} attempt(s))")]
    Network {
        /// URL being fetched.
        url: String,
        /// What the transport reported.
        message: String,
        /// How many attempts were made.
        attempts: u32,
    },

    /// The server's answer could not be understood.
    #[error("{url}: unexpected response: {reason}")]
    Protocol {
        /// URL that answered.
        url: String,
        /// What was wrong with it.
        reason: String,
    },

    /// A filesystem operation on the cache failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// Path being read or written.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },

    /// Setting up the HTTP client or the async runtime failed.
    #[error("setup failed: {0}")]
    Setup(String),
}

fn available_suffix(files: &[String]) -> String {
    if files.is_empty() {
        String::new()
    } else {
        format!("; GGUF files: {}", files.join(", "))
    }
}

impl HubError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        HubError::Io { path: path.into(), source }
    }

    /// True for failures that a retry (or a fallback to the cache) may fix: transport errors and 5xx/429 answers.
    pub fn is_transient(&self) -> bool {
        match self {
            HubError::Network { .. } => true,
            HubError::Http { status, .. } => *status >= 500 || *status == 429 || *status == 408,
            _ => false,
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = HubError> = std::result::Result<T, E>;
