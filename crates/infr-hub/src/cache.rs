//! The Hugging Face hub cache, in the exact on-disk layout `huggingface_hub` and llama.cpp use, so that a file
//! any of them downloaded is found by the others:
//!
//! ```text
//! <root>/models--org--repo/
//!     blobs/<etag>                 content, named by ETag (sha256 for LFS files, git sha1 otherwise)
//!     blobs/<etag>.incomplete      a download in progress (resumable)
//!     snapshots/<commit>/<file>    relative symlink to ../../blobs/<etag>
//!     refs/<revision>              the commit a branch or tag pointed to (no trailing newline)
//! ```

use std::path::{Path, PathBuf};

use crate::error::{HubError, Result};
use crate::model_ref::is_commit_hash;

/// A hub cache rooted at one directory (the `hub` folder, e.g. `~/.cache/huggingface/hub`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfCache {
    root: PathBuf,
}

/// Expands a leading `~/` with `home`, as `huggingface_hub` does for its path variables.
fn expand_home(path: &str, home: Option<&str>) -> PathBuf {
    match (path.strip_prefix("~/"), home) {
        (Some(rest), Some(h)) => Path::new(h).join(rest),
        _ if path == "~" && home.is_some() => PathBuf::from(home.unwrap_or_default()),
        _ => PathBuf::from(path),
    }
}

impl HfCache {
    /// A cache at an explicit root directory.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        HfCache { root: root.into() }
    }

    /// The default cache of the process environment (see [`HfCache::from_env_with`]).
    pub fn from_env() -> Self {
        Self::from_env_with(|k| std::env::var(k).ok())
    }

    /// The cache root `huggingface_hub` would use, given an environment lookup:
    /// `$HF_HUB_CACHE` > `$HUGGINGFACE_HUB_CACHE` > `$HF_HOME/hub` > `$XDG_CACHE_HOME/huggingface/hub` >
    /// `~/.cache/huggingface/hub`. Injectable so tests need not touch the process environment.
    pub fn from_env_with(get: impl Fn(&str) -> Option<String>) -> Self {
        let get = |k: &str| get(k).filter(|v| !v.is_empty());
        let home = get("HOME").or_else(|| get("USERPROFILE"));
        let home = home.as_deref();
        let root = if let Some(p) = get("HF_HUB_CACHE").or_else(|| get("HUGGINGFACE_HUB_CACHE")) {
            expand_home(&p, home)
        } else if let Some(p) = get("HF_HOME") {
            expand_home(&p, home).join("hub")
        } else if let Some(p) = get("XDG_CACHE_HOME") {
            expand_home(&p, home).join("huggingface").join("hub")
        } else {
            Path::new(home.unwrap_or(".")).join(".cache").join("huggingface").join("hub")
        };
        HfCache { root }
    }

    /// The cache root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `models--org--repo`: the folder name of a model repo.
    pub fn repo_folder_name(repo: &str) -> String {
        format!("models--{}", repo.replace('/', "--"))
    }

    /// Directory of one repo inside the cache.
    pub fn repo_dir(&self, repo: &str) -> PathBuf {
        self.root.join(Self::repo_folder_name(repo))
    }

    /// Where a complete blob lives.
    pub fn blob_path(&self, repo: &str, etag: &str) -> PathBuf {
        self.repo_dir(repo).join("blobs").join(etag)
    }

    /// Where a partial download of a blob lives (`<etag>.incomplete`, as `huggingface_hub` names it).
    pub fn incomplete_path(&self, repo: &str, etag: &str) -> PathBuf {
        self.repo_dir(repo).join("blobs").join(format!("{etag}.incomplete"))
    }

    /// Directory of one commit's snapshot.
    pub fn snapshot_dir(&self, repo: &str, commit: &str) -> PathBuf {
        self.repo_dir(repo).join("snapshots").join(commit)
    }

    /// Path of a file inside a snapshot (a symlink into `blobs/` once present).
    pub fn pointer_path(&self, repo: &str, commit: &str, file: &str) -> PathBuf {
        let mut p = self.snapshot_dir(repo, commit);
        for part in file.split('/') {
            p.push(part);
        }
        p
    }

    /// The commit a revision maps to in the cache: `refs/<revision>`, or the revision itself if it is a commit
    /// hash with a snapshot directory.
    pub fn read_ref(&self, repo: &str, revision: &str) -> Option<String> {
        let mut path = self.repo_dir(repo).join("refs");
        for part in revision.split('/') {
            path.push(part);
        }
        if let Ok(text) = std::fs::read_to_string(&path) {
            let commit = text.lines().next().unwrap_or("").trim().to_string();
            if is_commit_hash(&commit) {
                return Some(commit);
            }
            tracing::warn!("ignoring invalid commit in {}", path.display());
        }
        if is_commit_hash(revision) && self.snapshot_dir(repo, revision).is_dir() {
            return Some(revision.to_string());
        }
        None
    }

    /// Records that `revision` points at `commit` (atomically; nothing is written when they are equal).
    pub fn write_ref(&self, repo: &str, revision: &str, commit: &str) -> Result<()> {
        if revision == commit {
            return Ok(());
        }
        let mut path = self.repo_dir(repo).join("refs");
        for part in revision.split('/') {
            path.push(part);
        }
        if std::fs::read_to_string(&path).is_ok_and(|t| t.trim() == commit) {
            return Ok(());
        }
        write_atomic(&path, commit.as_bytes())
    }

    /// Relative paths (with `/`) of all files in a snapshot whose content is present.
    pub fn snapshot_files(&self, repo: &str, commit: &str) -> Vec<String> {
        let base = self.snapshot_dir(repo, commit);
        let mut out = Vec::new();
        let mut stack = vec![base.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let path = entry.path();
                // `metadata` follows symlinks: a dangling pointer (blob removed) is skipped.
                match std::fs::metadata(&path) {
                    Ok(m) if m.is_dir() => stack.push(path),
                    Ok(m) if m.is_file() => {
                        if let Ok(rel) = path.strip_prefix(&base) {
                            let parts: Vec<String> =
                                rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
                            out.push(parts.join("/"));
                        }
                    }
                    _ => {}
                }
            }
        }
        out.sort();
        out
    }

    /// The cached path of `file` at `revision`, if its content is present (like `try_to_load_from_cache`).
    pub fn cached_file(&self, repo: &str, revision: &str, file: &str) -> Option<PathBuf> {
        let commit = self.read_ref(repo, revision)?;
        let p = self.pointer_path(repo, &commit, file);
        std::fs::metadata(&p).ok().filter(|m| m.is_file()).map(|_| p)
    }

    /// Makes `snapshots/<commit>/<file>` point at `blobs/<etag>` (a relative symlink, replaced atomically).
    ///
    /// The blob must already be complete: the pointer is what makes a file visible to every reader.
    pub fn link_blob(&self, repo: &str, commit: &str, file: &str, etag: &str) -> Result<PathBuf> {
        let pointer = self.pointer_path(repo, commit, file);
        let blob = self.blob_path(repo, etag);
        let parent = pointer.parent().ok_or_else(|| HubError::io(&pointer, std::io::ErrorKind::InvalidInput.into()))?;
        std::fs::create_dir_all(parent).map_err(|e| HubError::io(parent, e))?;
        let name = pointer.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = parent.join(format!(".{name}.{}.infr-tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        #[cfg(unix)]
        {
            // snapshots/<commit>/<dirs...>/<file> -> ../../<dirs as ..>/blobs/<etag>
            let depth = 2 + file.split('/').count() - 1;
            let mut target = PathBuf::new();
            for _ in 0..depth {
                target.push("..");
            }
            target.push("blobs");
            target.push(etag);
            std::os::unix::fs::symlink(&target, &tmp).map_err(|e| HubError::io(&tmp, e))?;
        }
        #[cfg(not(unix))]
        {
            if std::fs::hard_link(&blob, &tmp).is_err() {
                std::fs::copy(&blob, &tmp).map_err(|e| HubError::io(&tmp, e))?;
            }
        }
        std::fs::rename(&tmp, &pointer).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            HubError::io(&pointer, e)
        })?;
        if !blob.is_file() {
            tracing::warn!("{} points at a missing blob {}", pointer.display(), blob.display());
        }
        Ok(pointer)
    }

    /// Writes `CACHEDIR.TAG` at the root (as `huggingface_hub` does), so backup tools skip the cache.
    pub fn tag_cache_dir(&self) {
        let tag = self.root.join("CACHEDIR.TAG");
        if !tag.exists() && std::fs::create_dir_all(&self.root).is_ok() {
            let _ = std::fs::write(
                &tag,
                "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by infr.\n",
            );
        }
    }
}

/// Writes a small file atomically (temp file in the same directory, then rename).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let parent = path.parent().ok_or_else(|| HubError::io(path, std::io::ErrorKind::InvalidInput.into()))?;
    std::fs::create_dir_all(parent).map_err(|e| HubError::io(parent, e))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = parent.join(format!(".{name}.{}.infr-tmp", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| HubError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        HubError::io(path, e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_precedence() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(a, _)| *a == k).map(|(_, v)| v.to_string())
        };
        let c = HfCache::from_env_with(env(&[("HF_HUB_CACHE", "/a"), ("HF_HOME", "/b"), ("HOME", "/h")]));
        assert_eq!(c.root(), Path::new("/a"));
        let c = HfCache::from_env_with(env(&[("HF_HOME", "~/hf"), ("HOME", "/h")]));
        assert_eq!(c.root(), Path::new("/h/hf/hub"));
        let c = HfCache::from_env_with(env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]));
        assert_eq!(c.root(), Path::new("/x/huggingface/hub"));
        let c = HfCache::from_env_with(env(&[("HOME", "/h")]));
        assert_eq!(c.root(), Path::new("/h/.cache/huggingface/hub"));
    }

    #[test]
    fn layout_names() {
        let c = HfCache::new("/c");
        assert_eq!(c.repo_dir("org/repo"), Path::new("/c/models--org--repo"));
        assert_eq!(c.pointer_path("o/r", "abc", "d/f.gguf"), Path::new("/c/models--o--r/snapshots/abc/d/f.gguf"));
        assert_eq!(c.incomplete_path("o/r", "e"), Path::new("/c/models--o--r/blobs/e.incomplete"));
    }
}
