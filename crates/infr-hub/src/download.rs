//! Downloading one blob into the cache: resumable (HTTP `Range` into `blobs/<etag>.incomplete`, as
//! `huggingface_hub` does), parallel ranges for large files, retries with backoff, and hash verification
//! before an atomic rename makes the blob visible.
//!
//! Parallel downloads write into `blobs/<etag>.infr-partial` with a `.json` sidecar recording the finished
//! chunks: a sparse file must never carry the `.incomplete` name, because `huggingface_hub` resumes an
//! `.incomplete` from its length without checking the hash. A sequential `.incomplete` (ours or theirs) is
//! adopted as a finished prefix when a parallel download starts.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use indicatif::ProgressBar;
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_RANGE, RANGE};
use reqwest::StatusCode;
use sha2::Digest;
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use crate::api::{describe, FileMeta, HubApi};
use crate::error::{HubError, Result};

/// The hash a download must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// sha256 of the content (LFS files; their ETag is this hash).
    Sha256(String),
    /// git blob sha1 (`sha1("blob {len}\0" + content)`; non-LFS files' ETag).
    GitSha1(String),
    /// Nothing to check against (a mirror with opaque ETags); only the size is checked.
    Unknown,
}

impl Expected {
    /// Picks the hash from the listing's oid (preferred) or the ETag, by their length.
    pub fn from_ids(oid: Option<&str>, etag: &str) -> Self {
        let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
        for id in oid.into_iter().chain(std::iter::once(etag)) {
            if hex(id, 64) {
                return Expected::Sha256(id.to_ascii_lowercase());
            }
            if hex(id, 40) {
                return Expected::GitSha1(id.to_ascii_lowercase());
            }
        }
        Expected::Unknown
    }
}

/// Lower-case hex of a digest.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hashes a file on disk with the algorithm `expected` names (blocking; run off the async threads).
fn hash_file(path: &Path, expected: &Expected) -> std::io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let mut buf = vec![0u8; 1 << 20];
    let mut sha256 = sha2::Sha256::new();
    let mut sha1 = sha1::Sha1::new();
    let git = matches!(expected, Expected::GitSha1(_));
    if git {
        sha1.update(format!("blob {len}\0").as_bytes());
    }
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        if git {
            sha1.update(&buf[..n]);
        } else {
            sha256.update(&buf[..n]);
        }
    }
    Ok(if git { hex(&sha1.finalize()) } else { hex(&sha256.finalize()) })
}

/// How one ranged fetch ended badly.
enum FetchErr {
    /// The server answered 200 to a ranged request: ranges are not supported.
    RangeIgnored,
    /// Anything else.
    Hub(HubError),
}

impl From<HubError> for FetchErr {
    fn from(e: HubError) -> Self {
        FetchErr::Hub(e)
    }
}

/// Persisted state of a parallel download.
#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq)]
struct PartsState {
    size: u64,
    chunk_size: u64,
    done: Vec<u64>,
}

/// Where a request for `file` came from, for error messages and status mapping.
pub(crate) struct Target<'a> {
    pub repo: &'a str,
    pub commit: &'a str,
    pub file: &'a str,
}

impl HubApi {
    /// Makes sure `blobs/<etag>` exists and holds verified content, downloading what is missing.
    ///
    /// An interrupted download leaves only an `.incomplete`/`.infr-partial` file that a later call resumes; a
    /// download whose hash does not match is deleted and reported as [`HubError::Checksum`].
    pub(crate) async fn ensure_blob(
        &self,
        t: &Target<'_>,
        meta: &FileMeta,
        oid: Option<&str>,
        bar: &ProgressBar,
    ) -> Result<PathBuf> {
        let cache = &self.opts.cache;
        let blob = cache.blob_path(t.repo, &meta.etag);
        if blob.is_file() {
            return Ok(blob);
        }
        let blobs_dir = cache.repo_dir(t.repo).join("blobs");
        std::fs::create_dir_all(&blobs_dir).map_err(|e| HubError::io(&blobs_dir, e))?;
        cache.tag_cache_dir();

        // One writer per blob across processes (same lock file as huggingface_hub's filelock).
        let lock_path = cache.root().join(".locks").join(crate::HfCache::repo_folder_name(t.repo));
        std::fs::create_dir_all(&lock_path).map_err(|e| HubError::io(&lock_path, e))?;
        let lock_path = lock_path.join(format!("{}.lock", meta.etag));
        let lock_file = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
            let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path)?;
            fs4::FileExt::lock(&f)?;
            Ok(f)
        })
        .await
        .map_err(|e| HubError::Setup(format!("lock task: {e}")))?
        .map_err(|e| HubError::io(cache.root().join(".locks"), e))?;
        if blob.is_file() {
            return Ok(blob);
        }

        let expected = Expected::from_ids(oid, &meta.etag);
        let url = self.resolve_url(t.repo, t.commit, t.file);
        let mut fresh_retry_done = false;
        let result = loop {
            let (tmp, resumed, streamed_hash) = match meta.size {
                Some(size) if size >= self.opts.parallel_min_size && self.opts.connections > 1 => {
                    match self.fetch_parallel(t, &url, &meta.etag, size, bar).await {
                        Ok((tmp, resumed)) => (tmp, resumed, None),
                        Err(FetchErr::RangeIgnored) => {
                            tracing::info!("{url}: server ignores Range; downloading in one stream");
                            let partial = blobs_dir.join(format!("{}.infr-partial", meta.etag));
                            remove_quiet(&partial);
                            remove_quiet(&partial.with_extension("infr-partial.json"));
                            let tmp = cache.incomplete_path(t.repo, &meta.etag);
                            let (resumed, h) = self.fetch_sequential(t, &url, &tmp, meta.size, bar).await?;
                            (tmp, resumed, h)
                        }
                        Err(FetchErr::Hub(e)) => break Err(e),
                    }
                }
                _ => {
                    let tmp = cache.incomplete_path(t.repo, &meta.etag);
                    match self.fetch_sequential(t, &url, &tmp, meta.size, bar).await {
                        Ok((resumed, h)) => (tmp, resumed, h),
                        Err(e) => break Err(e),
                    }
                }
            };
            match self.verify(t.file, &tmp, meta.size, &expected, streamed_hash).await {
                Ok(()) => {
                    std::fs::rename(&tmp, &blob).map_err(|e| HubError::io(&blob, e))?;
                    remove_quiet(&tmp.with_extension("infr-partial.json"));
                    break Ok(blob);
                }
                Err(e) => {
                    remove_quiet(&tmp);
                    remove_quiet(&tmp.with_extension("infr-partial.json"));
                    if resumed && !fresh_retry_done {
                        // The partial file we resumed may have been bad; one clean attempt before giving up.
                        tracing::warn!("{e}; retrying {} from scratch", t.file);
                        fresh_retry_done = true;
                        bar.set_position(0);
                        continue;
                    }
                    break Err(e);
                }
            }
        };
        drop(lock_file);
        result
    }

    /// Checks size and hash of a finished temp file.
    async fn verify(
        &self,
        file: &str,
        tmp: &Path,
        size: Option<u64>,
        expected: &Expected,
        streamed_sha256: Option<String>,
    ) -> Result<()> {
        let got_len = std::fs::metadata(tmp).map_err(|e| HubError::io(tmp, e))?.len();
        if let Some(s) = size {
            if s != got_len {
                return Err(HubError::SizeMismatch { file: file.to_string(), expected: s, got: got_len });
            }
        }
        let (algo, want) = match expected {
            Expected::Sha256(h) => ("sha256", h.clone()),
            Expected::GitSha1(h) => ("git-sha1", h.clone()),
            Expected::Unknown => {
                tracing::warn!("{file}: the server gave no sha256/sha1 ETag; only the size was checked");
                return Ok(());
            }
        };
        let got = match (streamed_sha256, expected) {
            (Some(h), Expected::Sha256(_)) => h,
            _ => {
                let (p, e) = (tmp.to_path_buf(), expected.clone());
                tokio::task::spawn_blocking(move || hash_file(&p, &e))
                    .await
                    .map_err(|e| HubError::Setup(format!("hash task: {e}")))?
                    .map_err(|e| HubError::io(tmp, e))?
            }
        };
        if got != want {
            return Err(HubError::Checksum { file: file.to_string(), algo, expected: want, got });
        }
        Ok(())
    }

    /// Streams the file into `tmp`, resuming from its current length; returns whether it resumed and the
    /// sha256 of the whole content.
    async fn fetch_sequential(
        &self,
        t: &Target<'_>,
        url: &str,
        tmp: &Path,
        size: Option<u64>,
        bar: &ProgressBar,
    ) -> Result<(bool, Option<String>)> {
        let mut file = tokio::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(tmp)
            .await
            .map_err(|e| HubError::io(tmp, e))?;
        let mut pos = file.metadata().await.map_err(|e| HubError::io(tmp, e))?.len();
        if size.is_some_and(|s| pos > s) {
            pos = 0;
        }
        let resumed = pos > 0;
        if resumed {
            tracing::info!("resuming {} at byte {pos}", t.file);
        }
        let mut hasher = sha2::Sha256::new();
        if pos > 0 {
            let p = tmp.to_path_buf();
            hasher = tokio::task::spawn_blocking(move || prefix_sha256(&p, pos))
                .await
                .map_err(|e| HubError::Setup(format!("hash task: {e}")))?
                .map_err(|e| HubError::io(tmp, e))?;
        }
        file.set_len(pos).await.map_err(|e| HubError::io(tmp, e))?;
        file.seek(std::io::SeekFrom::Start(pos)).await.map_err(|e| HubError::io(tmp, e))?;
        if let Some(s) = size {
            bar.set_length(s);
        }
        bar.set_position(pos);

        let mut failures = 0u32;
        loop {
            if size == Some(pos) {
                break;
            }
            let mut headers = HeaderMap::new();
            if pos > 0 {
                headers.insert(RANGE, header_value(&format!("bytes={pos}-")));
            }
            let progressed_from = pos;
            let outcome: std::result::Result<Option<reqwest::Response>, String> = async {
                let resp = self.client.get(url).headers(self.auth_headers(url)).headers(headers).send().await;
                let resp = resp.map_err(|e| describe(&e))?;
                let status = resp.status();
                if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
                    return Err(format!("HTTP {status}"));
                }
                if status == StatusCode::RANGE_NOT_SATISFIABLE {
                    // Our partial file is not a prefix of this content: start over.
                    pos = 0;
                    hasher = sha2::Sha256::new();
                    return Err("416 Range Not Satisfiable; restarting".into());
                }
                if !status.is_success() {
                    return Ok(Some(resp));
                }
                if status == StatusCode::OK && pos > 0 {
                    tracing::info!("{url}: server ignored Range; restarting {}", t.file);
                    pos = 0;
                    hasher = sha2::Sha256::new();
                    bar.set_position(0);
                } else if status == StatusCode::PARTIAL_CONTENT && !content_range_starts_at(&resp, pos) {
                    pos = 0;
                    hasher = sha2::Sha256::new();
                    return Err("Content-Range does not match the request; restarting".into());
                }
                file.set_len(pos).await.map_err(|e| e.to_string())?;
                file.seek(std::io::SeekFrom::Start(pos)).await.map_err(|e| e.to_string())?;
                let mut resp = resp;
                let mut speed = SpeedCheck::new(self.opts.min_speed, self.opts.speed_window);
                loop {
                    match resp.chunk().await {
                        Ok(Some(bytes)) => {
                            file.write_all(&bytes).await.map_err(|e| format!("write {}: {e}", tmp.display()))?;
                            hasher.update(&bytes);
                            pos += bytes.len() as u64;
                            bar.set_position(pos);
                            speed.record(bytes.len() as u64)?;
                        }
                        Ok(None) => break,
                        Err(e) => return Err(describe(&e)),
                    }
                }
                match size {
                    Some(s) if pos < s => Err(format!("connection closed at byte {pos} of {s}")),
                    _ => Ok(None),
                }
            }
            .await;
            match outcome {
                Ok(None) => break,
                Ok(Some(resp)) => return Err(self.status_error(resp, t.repo, t.commit, Some(t.file)).await),
                Err(message) => {
                    file.flush().await.map_err(|e| HubError::io(tmp, e))?;
                    if pos > progressed_from && !message.starts_with(TOO_SLOW) {
                        failures = 0;
                    }
                    failures += 1;
                    if failures > self.opts.max_retries {
                        return Err(HubError::Network { url: url.to_string(), message, attempts: failures });
                    }
                    let delay = self.backoff(failures);
                    tracing::warn!("{}: {message}; retrying in {delay:?} from byte {pos}", t.file);
                    tokio::time::sleep(delay).await;
                }
            }
        }
        file.flush().await.map_err(|e| HubError::io(tmp, e))?;
        file.sync_all().await.map_err(|e| HubError::io(tmp, e))?;
        Ok((resumed, Some(hex(&hasher.finalize()))))
    }

    /// Downloads a large file as parallel ranges into `blobs/<etag>.infr-partial`; returns its path and whether
    /// earlier progress was reused.
    async fn fetch_parallel(
        &self,
        t: &Target<'_>,
        url: &str,
        etag: &str,
        size: u64,
        bar: &ProgressBar,
    ) -> std::result::Result<(PathBuf, bool), FetchErr> {
        let cache = &self.opts.cache;
        let partial = cache.repo_dir(t.repo).join("blobs").join(format!("{etag}.infr-partial"));
        let state_path = partial.with_extension("infr-partial.json");
        let chunk = self.opts.chunk_size.max(1);
        let n_chunks = size.div_ceil(chunk);
        let saved: Option<PartsState> = std::fs::read(&state_path).ok().and_then(|b| serde_json::from_slice(&b).ok());
        let partial_len = std::fs::metadata(&partial).map(|m| m.len()).ok();
        let mut done = vec![false; n_chunks as usize];
        match saved {
            Some(s) if s.size == size && s.chunk_size == chunk && partial_len == Some(size) => {
                for i in s.done.into_iter().filter(|i| *i < n_chunks) {
                    done[i as usize] = true;
                }
            }
            _ => {
                remove_quiet(&partial);
                // Adopt a sequential partial download as a finished prefix.
                let incomplete = cache.incomplete_path(t.repo, etag);
                if let Ok(m) = std::fs::metadata(&incomplete) {
                    if m.len() <= size && std::fs::rename(&incomplete, &partial).is_ok() {
                        for (i, d) in done.iter_mut().enumerate() {
                            *d = (i as u64 + 1) * chunk <= m.len();
                        }
                    }
                }
            }
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&partial)
            .map_err(|e| HubError::io(&partial, e))?;
        f.set_len(size).map_err(|e| HubError::io(&partial, e))?;
        drop(f);
        let resumed = done.iter().any(|d| *d);
        let state = Arc::new(Mutex::new(PartsState {
            size,
            chunk_size: chunk,
            done: (0..n_chunks).filter(|i| done[*i as usize]).collect(),
        }));
        save_state(&state_path, &state)?;
        let done_bytes: u64 = (0..n_chunks).filter(|i| done[*i as usize]).map(|i| chunk_len(i, chunk, size)).sum();
        bar.set_length(size);
        bar.set_position(done_bytes);
        if resumed {
            tracing::info!("resuming {} with {done_bytes} of {size} bytes present", t.file);
        }
        let queue: Arc<Mutex<VecDeque<u64>>> =
            Arc::new(Mutex::new((0..n_chunks).filter(|i| !done[*i as usize]).collect()));

        let mut set = tokio::task::JoinSet::new();
        for _ in 0..self.opts.connections.min(n_chunks as usize).max(1) {
            let (api, url, partial, queue, state, state_path, bar) = (
                self.clone(),
                url.to_string(),
                partial.clone(),
                queue.clone(),
                state.clone(),
                state_path.clone(),
                bar.clone(),
            );
            let (repo, commit, file) = (t.repo.to_string(), t.commit.to_string(), t.file.to_string());
            set.spawn(async move {
                loop {
                    let next = queue.lock().map(|mut q| q.pop_front()).unwrap_or(None);
                    let Some(i) = next else { return Ok(()) };
                    let start = i * chunk;
                    let len = chunk_len(i, chunk, size);
                    let target = Target { repo: &repo, commit: &commit, file: &file };
                    api.fetch_range(&target, &url, &partial, start, len, &bar).await?;
                    if let Ok(mut s) = state.lock() {
                        s.done.push(i);
                    }
                    save_state(&state_path, &state)?;
                }
            });
        }
        while let Some(joined) = set.join_next().await {
            let r = joined.map_err(|e| FetchErr::Hub(HubError::Setup(format!("download task: {e}"))))?;
            if let Err(e) = r {
                set.abort_all();
                return Err(e);
            }
        }
        let f = std::fs::OpenOptions::new().write(true).open(&partial).map_err(|e| HubError::io(&partial, e))?;
        f.sync_all().map_err(|e| HubError::io(&partial, e))?;
        Ok((partial, resumed))
    }

    /// Fetches bytes `[start, start+len)` into `path` at the same offset, resuming within the range on retry.
    async fn fetch_range(
        &self,
        t: &Target<'_>,
        url: &str,
        path: &Path,
        start: u64,
        len: u64,
        bar: &ProgressBar,
    ) -> std::result::Result<(), FetchErr> {
        let mut file = tokio::fs::OpenOptions::new().write(true).open(path).await.map_err(|e| HubError::io(path, e))?;
        let mut got = 0u64;
        let mut failures = 0u32;
        while got < len {
            let from = start + got;
            let mut headers = self.auth_headers(url);
            headers.insert(RANGE, header_value(&format!("bytes={from}-{}", start + len - 1)));
            let before = got;
            let outcome: std::result::Result<Option<reqwest::Response>, String> = async {
                let resp = self.client.get(url).headers(headers).send().await.map_err(|e| describe(&e))?;
                let status = resp.status();
                if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
                    return Err(format!("HTTP {status}"));
                }
                if status == StatusCode::OK {
                    return Err(RANGE_IGNORED.into());
                }
                if status != StatusCode::PARTIAL_CONTENT {
                    return Ok(Some(resp));
                }
                if !content_range_starts_at(&resp, from) {
                    return Err("Content-Range does not match the request".into());
                }
                file.seek(std::io::SeekFrom::Start(from)).await.map_err(|e| e.to_string())?;
                let mut resp = resp;
                let mut speed = SpeedCheck::new(self.opts.min_speed, self.opts.speed_window);
                while got < len {
                    match resp.chunk().await {
                        Ok(Some(bytes)) => {
                            let take = (bytes.len() as u64).min(len - got) as usize;
                            file.write_all(&bytes[..take]).await.map_err(|e| format!("write: {e}"))?;
                            got += take as u64;
                            bar.inc(take as u64);
                            speed.record(take as u64)?;
                        }
                        Ok(None) => return Err(format!("connection closed at byte {} of range", got)),
                        Err(e) => return Err(describe(&e)),
                    }
                }
                Ok(None)
            }
            .await;
            match outcome {
                Ok(None) => {}
                Ok(Some(resp)) => {
                    return Err(FetchErr::Hub(self.status_error(resp, t.repo, t.commit, Some(t.file)).await))
                }
                Err(m) if m == RANGE_IGNORED => return Err(FetchErr::RangeIgnored),
                Err(message) => {
                    file.flush().await.map_err(|e| HubError::io(path, e))?;
                    if got > before {
                        failures = 0;
                    }
                    failures += 1;
                    if failures > self.opts.max_retries {
                        return Err(FetchErr::Hub(HubError::Network {
                            url: url.to_string(),
                            message,
                            attempts: failures,
                        }));
                    }
                    let delay = self.backoff(failures);
                    tracing::warn!("{} range at {}: {message}; retrying in {delay:?}", t.file, start + got);
                    tokio::time::sleep(delay).await;
                }
            }
        }
        file.flush().await.map_err(|e| HubError::io(path, e))?;
        Ok(())
    }
}

/// Marker message for a 200 answer to a ranged request.
const RANGE_IGNORED: &str = "server ignored Range";

fn chunk_len(i: u64, chunk: u64, size: u64) -> u64 {
    chunk.min(size - i * chunk)
}

fn save_state(path: &Path, state: &Mutex<PartsState>) -> Result<()> {
    let bytes = match state.lock() {
        Ok(s) => serde_json::to_vec(&*s).unwrap_or_default(),
        Err(_) => return Ok(()),
    };
    crate::cache::write_atomic(path, &bytes)
}

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("bytes=0-"))
}

/// True when a 206 answer's `Content-Range: bytes A-B/N` starts at `pos`.
fn content_range_starts_at(resp: &reqwest::Response, pos: u64) -> bool {
    resp.headers()
        .get(CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("bytes "))
        .and_then(|v| v.split('-').next())
        .and_then(|a| a.trim().parse::<u64>().ok())
        == Some(pos)
}

/// sha256 state after the first `len` bytes of a file.
fn prefix_sha256(path: &Path, len: u64) -> std::io::Result<sha2::Sha256> {
    use std::io::Read;
    let f = std::fs::File::open(path)?;
    let mut r = f.take(len);
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h)
}

fn remove_quiet(p: &Path) {
    let _ = std::fs::remove_file(p);
}

/// The start of the error of a download below the minimum speed.
const TOO_SLOW: &str = "too slow";

/// Watches a response's throughput over fixed windows (see `HubOptions::min_speed`).
struct SpeedCheck {
    min_speed: u64,
    window: std::time::Duration,
    start: std::time::Instant,
    bytes: u64,
}

impl SpeedCheck {
    fn new(min_speed: u64, window: std::time::Duration) -> Self {
        Self { min_speed, window, start: std::time::Instant::now(), bytes: 0 }
    }

    /// Count `n` more bytes; an error once a whole window passed below the minimum speed.
    fn record(&mut self, n: u64) -> Result<(), String> {
        self.bytes += n;
        let elapsed = self.start.elapsed();
        if elapsed < self.window || self.min_speed == 0 {
            return Ok(());
        }
        let rate = self.bytes as f64 / elapsed.as_secs_f64();
        if rate < self.min_speed as f64 {
            return Err(format!(
                "{TOO_SLOW}: {} bytes in {:.1} s ({rate:.0} B/s, the minimum is {} B/s)",
                self.bytes,
                elapsed.as_secs_f64(),
                self.min_speed
            ));
        }
        self.start = std::time::Instant::now();
        self.bytes = 0;
        Ok(())
    }
}
