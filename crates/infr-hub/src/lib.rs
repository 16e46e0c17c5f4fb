//! infr-hub: llama.cpp-compatible model references, the shared Hugging Face hub cache, and downloads.
//!
//! - [`parse_ref`] understands `org/repo[:quant]`, `org/repo:file.gguf`, `hf:` prefixes and `@revision`, and
//!   lets an existing local path win.
//! - [`HfCache`] is the real `huggingface_hub` cache layout (`$HF_HUB_CACHE` > `$HF_HOME/hub` >
//!   `~/.cache/huggingface/hub`), so files pulled by llama.cpp or `huggingface_hub` are found and ours are
//!   found by them.
//! - [`Hub::resolve`] / [`resolve_blocking`] return the local file paths (all shards), downloading with
//!   resume, parallel ranges, retries and sha256 verification when needed, or reading the cache only when
//!   offline (`--offline`, `HF_HUB_OFFLINE=1`).
//!
//! ```no_run
//! let opts = infr_hub::HubOptions::from_env();
//! let model = infr_hub::resolve_blocking("unsloth/Qwen3-0.6B-GGUF:Q8_0", opts)?;
//! println!("{}", model.paths[0].display());
//! # Ok::<(), infr_hub::HubError>(())
//! ```

mod api;
mod cache;
mod download;
mod error;
mod model_ref;
mod options;
mod progress;
mod resolve;
mod select;

pub use api::{encode_path, normalize_etag, FileMeta, HubApi, RepoFile, RepoInfo};

/// The limits the API client applies to what endpoints send.
pub mod api_limits {
    pub use crate::api::{MAX_JSON_BYTES, MAX_TREE_PAGES};
}
pub use cache::HfCache;
pub use download::Expected;
pub use error::{HubError, Result};
pub use model_ref::{
    is_commit_hash, parse_hub_ref, parse_ref, validate_repo_id, validate_repo_path, validate_revision, HubRef,
    ModelRef, Selector, DEFAULT_QUANT, DEFAULT_REVISION,
};
pub use options::{env_truthy, HubOptions, ProgressMode, DEFAULT_ENDPOINT};
pub use progress::Progress;
pub use resolve::{resolve, resolve_blocking, Hub, ResolvedModel};
pub use select::{available_quants, gguf_files, is_model_file, select_files, shards_of, split_info, SplitInfo};
