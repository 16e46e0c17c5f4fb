//! Parsing of model references in llama.cpp's `-hf` syntax.
//!
//! Accepted forms (a local path that exists always wins):
//! - `org/repo` — default quant (`Q4_K_M`, then `Q8_0`, then the first model file, as llama.cpp does);
//! - `org/repo:Q5_K_S` — a quantization tag, case-insensitive;
//! - `org/repo:path/in/repo/file.gguf` — an exact file;
//! - `org/repo@revision[:...]` or `org/repo:Q8_0@revision` — a branch, tag or commit;
//! - any of the above behind `hf:`, `hf://`, `hf.co/`, `huggingface.co/` or `https://huggingface.co/`.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::HubError;

/// The quantization llama.cpp picks when a reference names none.
pub const DEFAULT_QUANT: &str = "Q4_K_M";

/// The revision used when a reference names none.
pub const DEFAULT_REVISION: &str = "main";

/// What the user asked for: a file on disk, or a file in a Hub repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelRef {
    /// A path that exists on disk; used as is.
    Local(PathBuf),
    /// A repository on the Hub plus which file(s) of it.
    Hub(HubRef),
}

/// A reference into a Hub model repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubRef {
    /// `org/repo`.
    pub repo: String,
    /// Branch, tag or commit (`main` unless given).
    pub revision: String,
    /// Which file(s) of the repo.
    pub selector: Selector,
}

/// How the model file is chosen inside a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// Nothing given: llama.cpp's default (`Q4_K_M`, then `Q8_0`, then the first model file).
    Default,
    /// A quantization tag such as `Q4_K_M` or `F16`, matched case-insensitively against file names.
    Quant(String),
    /// An exact path inside the repo, e.g. `Q8_0/model-Q8_0-00001-of-00002.gguf`.
    File(String),
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelRef::Local(p) => write!(f, "{}", p.display()),
            ModelRef::Hub(h) => write!(f, "{h}"),
        }
    }
}

impl fmt::Display for HubRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.repo)?;
        if self.revision != DEFAULT_REVISION {
            write!(f, "@{}", self.revision)?;
        }
        match &self.selector {
            Selector::Default => Ok(()),
            Selector::Quant(q) => write!(f, ":{q}"),
            Selector::File(p) => write!(f, ":{p}"),
        }
    }
}

/// Parses a model reference; a string naming an existing local path is always [`ModelRef::Local`].
///
/// Errors with [`HubError::InvalidRef`] when the string is neither an existing path nor a valid Hub reference
/// (the message says which part is wrong, and hints at a missing local file when the input looks like a path).
pub fn parse_ref(input: &str) -> Result<ModelRef, HubError> {
    let trimmed = input.trim();
    if trimmed.is_empty() {
        return Err(invalid(input, "empty reference"));
    }
    if Path::new(trimmed).exists() {
        return Ok(ModelRef::Local(PathBuf::from(trimmed)));
    }
    parse_hub_ref(input).map(ModelRef::Hub)
}

/// Parses a Hub reference without looking at the filesystem.
pub fn parse_hub_ref(input: &str) -> Result<HubRef, HubError> {
    let mut s = input.trim();
    for prefix in ["https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf://", "hf:", "hf.co/"] {
        if let Some(rest) = s.strip_prefix(prefix) {
            s = rest;
            break;
        }
    }
    let looks_like_path = s.starts_with('/') || s.starts_with("./") || s.starts_with("../") || s.starts_with('~');
    if looks_like_path || (s.to_ascii_lowercase().ends_with(".gguf") && !s.contains(':')) {
        return Err(invalid(input, "no such local file, and not an org/repo[:quant] reference"));
    }

    // Split `org/repo[@rev]` from the `:selector[@rev]` part.
    let (repo_part, selector_part) = match s.find(':') {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let (repo, mut revision) = match repo_part.split_once('@') {
        Some((r, rev)) => (r, Some(rev.to_string())),
        None => (repo_part, None),
    };
    validate_repo_id(repo).map_err(|reason| invalid(input, &reason))?;

    let selector = match selector_part {
        None => Selector::Default,
        Some(sel) => {
            let mut sel = sel.trim();
            // `org/repo:Q8_0@rev` (a tag never contains '@'; a file name may, so only split tags).
            if !sel.to_ascii_lowercase().ends_with(".gguf") {
                if let Some((tag, rev)) = sel.split_once('@') {
                    if revision.is_some() {
                        return Err(invalid(input, "revision given twice"));
                    }
                    revision = Some(rev.to_string());
                    sel = tag;
                }
            }
            if sel.is_empty() {
                return Err(invalid(input, "empty quant or file after ':'"));
            }
            if sel.to_ascii_lowercase().ends_with(".gguf") {
                validate_repo_path(sel).map_err(|reason| invalid(input, &reason))?;
                Selector::File(sel.to_string())
            } else if sel.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) {
                Selector::Quant(sel.to_string())
            } else {
                return Err(invalid(input, &format!("{sel:?} is neither a quant tag (e.g. Q4_K_M) nor a .gguf file")));
            }
        }
    };
    let revision = match revision {
        Some(r) if r.is_empty() => return Err(invalid(input, "empty revision after '@'")),
        Some(r) => {
            validate_revision(&r).map_err(|reason| invalid(input, &reason))?;
            r
        }
        None => DEFAULT_REVISION.to_string(),
    };
    Ok(HubRef { repo: repo.to_string(), revision, selector })
}

fn invalid(input: &str, reason: &str) -> HubError {
    HubError::InvalidRef { input: input.to_string(), reason: reason.to_string() }
}

/// Checks a repo id the way llama.cpp does: `[A-Za-z0-9_]` runs joined by single `/`, `.` or `-`, exactly one `/`.
pub fn validate_repo_id(repo: &str) -> Result<(), String> {
    if repo.is_empty() || repo.len() > 256 {
        return Err("repository must be org/repo".into());
    }
    let mut slashes = 0;
    let mut after_special = true;
    for c in repo.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            after_special = false;
        } else if matches!(c, '/' | '.' | '-') {
            if after_special {
                return Err(format!("repository {repo:?}: '{c}' must sit between letters or digits"));
            }
            if c == '/' {
                slashes += 1;
            }
            after_special = true;
        } else {
            return Err(format!("repository {repo:?} contains {c:?}"));
        }
    }
    if after_special {
        return Err(format!("repository {repo:?} must not end with a separator"));
    }
    if slashes != 1 {
        return Err(format!("repository {repo:?} must be org/repo"));
    }
    Ok(())
}

/// Checks that a path inside a repo is relative and stays inside it (no `..`, no absolute part, no backslash).
pub fn validate_repo_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path.starts_with('/') || path.contains('\\') || path.contains('\0') {
        return Err(format!("file {path:?} must be a relative path inside the repo"));
    }
    if path.split('/').any(|part| part.is_empty() || part == "." || part == "..") {
        return Err(format!("file {path:?} must not contain empty, '.' or '..' components"));
    }
    Ok(())
}

/// Checks a revision name: a branch/tag (possibly `refs/pr/1`) or a commit, with no path escapes.
pub fn validate_revision(rev: &str) -> Result<(), String> {
    if rev.len() > 256 || rev.contains("..") || rev.starts_with('/') || rev.contains('\\') || rev.contains('\0') {
        return Err(format!("invalid revision {rev:?}"));
    }
    if rev.chars().any(|c| c.is_whitespace() || c.is_control() || matches!(c, ':' | '?' | '#' | '%')) {
        return Err(format!("invalid revision {rev:?}"));
    }
    Ok(())
}

/// True for a full 40-hex-digit git commit id.
pub fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}
