//! Turning a [`ModelRef`] into local file paths: the cache first, the Hub when needed (unless offline).

use std::path::{Path, PathBuf};

use crate::api::{HubApi, RepoFile};
use crate::cache::HfCache;
use crate::download::Target;
use crate::error::{HubError, Result};
use crate::model_ref::{parse_ref, HubRef, ModelRef};
use crate::options::HubOptions;
use crate::progress::Progress;
use crate::select::{select_files, split_info};

/// The local files a reference resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedModel {
    /// All files of the model in shard order; the first is the one to open.
    pub paths: Vec<PathBuf>,
    /// `org/repo` for Hub references, `None` for local paths.
    pub repo: Option<String>,
    /// The commit the files belong to, for Hub references.
    pub commit: Option<String>,
    /// Paths inside the repo (same order as `paths`); empty for local paths.
    pub files: Vec<String>,
}

/// A hub client: HTTP, cache and progress bars together.
#[derive(Debug, Clone)]
pub struct Hub {
    api: HubApi,
    progress: Progress,
}

impl Hub {
    /// Builds a client from options (see [`HubOptions::from_env`]).
    pub fn new(opts: HubOptions) -> Result<Self> {
        let progress = Progress::new(opts.progress);
        Ok(Hub { api: HubApi::new(opts)?, progress })
    }

    /// The options in use.
    pub fn options(&self) -> &HubOptions {
        self.api.options()
    }

    /// The cache in use.
    pub fn cache(&self) -> &HfCache {
        &self.api.options().cache
    }

    /// The raw Hub API (listing, metadata).
    pub fn api(&self) -> &HubApi {
        &self.api
    }

    /// Parses and resolves a reference string (see [`parse_ref`]).
    pub async fn resolve_str(&self, input: &str) -> Result<ResolvedModel> {
        self.resolve(&parse_ref(input)?).await
    }

    /// Resolves a reference to local files, downloading what the cache lacks (unless offline).
    ///
    /// When the Hub cannot be reached (transport errors, 5xx after retries) a complete cached copy is used
    /// instead, with a warning; 401/403/404 are never papered over.
    pub async fn resolve(&self, r: &ModelRef) -> Result<ResolvedModel> {
        match r {
            ModelRef::Local(p) => resolve_local(p),
            ModelRef::Hub(h) if self.options().offline => self.resolve_offline(h),
            ModelRef::Hub(h) => self.resolve_online(h).await,
        }
    }

    /// Resolves a Hub reference from the cache alone; [`HubError::NotCached`] names what is missing.
    pub fn resolve_offline(&self, h: &HubRef) -> Result<ResolvedModel> {
        let cache = self.cache();
        let not_cached = |what: String| HubError::NotCached { what, cache: cache.root().to_path_buf() };
        let commit = cache.read_ref(&h.repo, &h.revision).ok_or_else(|| {
            not_cached(format!("{h} (no {}/refs/{})", HfCache::repo_folder_name(&h.repo), h.revision))
        })?;
        let files = cache.snapshot_files(&h.repo, &commit);
        let selected = select_files(&h.repo, &files, &h.selector).map_err(|e| not_cached(format!("{h} ({e})")))?;
        let paths = selected.iter().map(|f| cache.pointer_path(&h.repo, &commit, f)).collect();
        Ok(ResolvedModel { paths, repo: Some(h.repo.clone()), commit: Some(commit), files: selected })
    }

    async fn resolve_online(&self, h: &HubRef) -> Result<ResolvedModel> {
        let info = match self.api.repo_info(&h.repo, &h.revision).await {
            Ok(info) => info,
            Err(e) if e.is_transient() => match self.resolve_offline(h) {
                Ok(r) => {
                    tracing::warn!("{e}; using the cached copy of {h}");
                    return Ok(r);
                }
                Err(_) => return Err(e),
            },
            Err(e) => return Err(e),
        };
        let names: Vec<&str> = info.files.iter().map(|f| f.path.as_str()).collect();
        let selected = select_files(&h.repo, &names, &h.selector)?;
        self.cache().write_ref(&h.repo, &h.revision, &info.commit)?;
        let mut paths = Vec::with_capacity(selected.len());
        for f in &selected {
            let listed = info.files.iter().find(|x| &x.path == f);
            paths.push(self.fetch_at_commit(&h.repo, &info.commit, f, listed).await?);
        }
        Ok(ResolvedModel { paths, repo: Some(h.repo.clone()), commit: Some(info.commit), files: selected })
    }

    /// Fetches any single file of a repo (e.g. `config.json`) into the cache and returns its snapshot path;
    /// offline, or when the Hub is unreachable, the cached copy is returned.
    pub async fn download_file(&self, repo: &str, revision: &str, file: &str) -> Result<PathBuf> {
        crate::model_ref::validate_repo_id(repo)
            .map_err(|reason| HubError::InvalidRef { input: repo.to_string(), reason })?;
        crate::model_ref::validate_repo_path(file)
            .map_err(|reason| HubError::InvalidRef { input: file.to_string(), reason })?;
        let cache = self.cache();
        let cached = || {
            cache.cached_file(repo, revision, file).ok_or_else(|| HubError::NotCached {
                what: format!("{repo}@{revision}/{file}"),
                cache: cache.root().to_path_buf(),
            })
        };
        if self.options().offline {
            return cached();
        }
        let meta = match self.api.file_meta(repo, revision, file).await {
            Ok(m) => m,
            Err(e) if e.is_transient() => return cached().map_err(|_| e),
            Err(e) => return Err(e),
        };
        let commit =
            meta.commit.clone().or_else(|| crate::model_ref::is_commit_hash(revision).then(|| revision.into()));
        let commit = commit.ok_or_else(|| HubError::Protocol {
            url: self.api.resolve_url(repo, revision, file),
            reason: "no X-Repo-Commit header".into(),
        })?;
        cache.write_ref(repo, revision, &commit)?;
        let pointer = cache.pointer_path(repo, &commit, file);
        if pointer.is_file() {
            return Ok(pointer);
        }
        self.download_with_meta(repo, &commit, file, meta, None).await
    }

    /// Makes `snapshots/<commit>/<file>` present: reuses the pointer or a blob already in the cache, or
    /// downloads the blob.
    async fn fetch_at_commit(
        &self,
        repo: &str,
        commit: &str,
        file: &str,
        listed: Option<&RepoFile>,
    ) -> Result<PathBuf> {
        let cache = self.cache();
        let pointer = cache.pointer_path(repo, commit, file);
        if pointer.is_file() {
            tracing::debug!("{file}: already in the cache");
            return Ok(pointer);
        }
        if let Some(oid) = listed.and_then(|l| l.oid.as_deref()) {
            if cache.blob_path(repo, oid).is_file() {
                return cache.link_blob(repo, commit, file, oid);
            }
        }
        let mut meta = self.api.file_meta(repo, commit, file).await?;
        if meta.size.is_none() {
            meta.size = listed.and_then(|l| l.size);
        }
        self.download_with_meta(repo, commit, file, meta, listed.and_then(|l| l.oid.as_deref())).await
    }

    async fn download_with_meta(
        &self,
        repo: &str,
        commit: &str,
        file: &str,
        meta: crate::api::FileMeta,
        oid: Option<&str>,
    ) -> Result<PathBuf> {
        let bar = self.progress.bar(file, meta.size);
        let target = Target { repo, commit, file };
        match self.api.ensure_blob(&target, &meta, oid, &bar).await {
            Ok(_) => {
                bar.finish();
                self.cache().link_blob(repo, commit, file, &meta.etag)
            }
            Err(e) => {
                bar.abandon();
                Err(e)
            }
        }
    }
}

/// A local file; a first split shard brings its siblings along (all must exist).
fn resolve_local(path: &Path) -> Result<ResolvedModel> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut paths = vec![path.to_path_buf()];
    if let Some(info) = split_info(&name).filter(|s| s.count > 1 && s.index == 1) {
        let dir = path.parent().unwrap_or(Path::new(""));
        let mut missing = Vec::new();
        for i in 2..=info.count {
            let p = dir.join(format!("{}-{i:05}-of-{:05}.gguf", info.prefix, info.count));
            if p.is_file() {
                paths.push(p);
            } else {
                missing.push(p.display().to_string());
            }
        }
        if !missing.is_empty() {
            return Err(HubError::MissingShards { repo: dir.display().to_string(), first: name, missing });
        }
    }
    Ok(ResolvedModel { paths, repo: None, commit: None, files: Vec::new() })
}

/// Parses and resolves `input` with `opts` (async; see [`Hub::resolve`]).
pub async fn resolve(input: &str, opts: HubOptions) -> Result<ResolvedModel> {
    Hub::new(opts)?.resolve_str(input).await
}

/// Blocking [`resolve`]: runs its own runtime (on a helper thread if called from inside one).
pub fn resolve_blocking(input: &str, opts: HubOptions) -> Result<ResolvedModel> {
    let run = move || -> Result<ResolvedModel> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| HubError::Setup(format!("tokio runtime: {e}")))?;
        rt.block_on(resolve(input, opts))
    };
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| s.spawn(run).join().unwrap_or_else(|_| Err(HubError::Setup("resolver panicked".into()))))
    } else {
        run()
    }
}
