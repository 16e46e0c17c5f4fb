//! The Hub HTTP API: repo revision and file listing, per-file metadata (HEAD on `resolve`), and the status
//! mapping shared by all requests.
//!
//! Endpoints (the ones `huggingface_hub` and llama.cpp use):
//! - `GET {endpoint}/api/models/{repo}/revision/{rev}` → `sha` (the commit) and `siblings[].rfilename`;
//! - `GET {endpoint}/api/models/{repo}/tree/{commit}?recursive=true` → `path`, `size`, `oid`, `lfs.oid`
//!   (paginated through `Link: <...>; rel="next"`);
//! - `HEAD {endpoint}/{repo}/resolve/{commit}/{file}` → `X-Repo-Commit`, `X-Linked-Etag`/`ETag`,
//!   `X-Linked-Size`/`Content-Length`; same-origin redirects (renamed repos) are followed, cross-origin ones
//!   (CDN) are where the headers are read, exactly as `huggingface_hub.get_hf_file_metadata` does.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT_ENCODING, AUTHORIZATION, LOCATION};
use reqwest::{Method, StatusCode};
use serde::Deserialize;

use crate::error::{HubError, Result};
use crate::options::HubOptions;

/// One file of a repo listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoFile {
    /// Path inside the repo, `/`-separated.
    pub path: String,
    /// Size in bytes, when the listing gave it.
    pub size: Option<u64>,
    /// sha256 of the content for LFS files, git blob sha1 otherwise (when the listing gave it).
    pub oid: Option<String>,
}

/// A repo at one commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoInfo {
    /// Full commit hash the revision resolved to.
    pub commit: String,
    /// All files at that commit.
    pub files: Vec<RepoFile>,
}

/// What a HEAD on the `resolve` URL says about one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    /// Normalized ETag (quotes and `W/` removed): the blob name in the cache.
    pub etag: String,
    /// Size in bytes, if announced.
    pub size: Option<u64>,
    /// Commit from `X-Repo-Commit`, if sent.
    pub commit: Option<String>,
}

#[derive(Deserialize)]
struct RevisionJson {
    sha: Option<String>,
    #[serde(default)]
    siblings: Vec<SiblingJson>,
}

#[derive(Deserialize)]
struct SiblingJson {
    rfilename: String,
}

#[derive(Deserialize)]
struct TreeEntryJson {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    size: Option<u64>,
    oid: Option<String>,
    lfs: Option<LfsJson>,
}

#[derive(Deserialize)]
struct LfsJson {
    oid: Option<String>,
}

/// Percent-encodes a URL path segment; `/` is kept when `keep_slash` (file paths) and encoded otherwise
/// (revisions such as `refs/pr/1`, which `huggingface_hub` quotes with `safe=""`).
pub fn encode_path(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') || (keep_slash && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Strips `W/` and quotes from an ETag, as `huggingface_hub._normalize_etag` does.
pub fn normalize_etag(etag: &str) -> String {
    etag.trim().trim_start_matches("W/").trim_matches('"').to_string()
}

/// True for an ETag that is safe as a file name in `blobs/`.
fn valid_etag(etag: &str) -> bool {
    !etag.is_empty()
        && etag.len() <= 128
        && etag.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !etag.starts_with('.')
}

/// The HTTP side of the hub client.
#[derive(Debug, Clone)]
pub struct HubApi {
    pub(crate) opts: HubOptions,
    /// Follows redirects (downloads; `Authorization` is dropped on cross-host hops by reqwest).
    pub(crate) client: reqwest::Client,
    /// Does not follow redirects (metadata HEADs, which must see the redirect's own headers).
    no_redirect: reqwest::Client,
}

impl HubApi {
    /// Builds the HTTP clients (rustls, timeouts from `opts`).
    pub fn new(opts: HubOptions) -> Result<Self> {
        // A malformed endpoint is a setup error, not a network failure worth retrying.
        match reqwest::Url::parse(&opts.endpoint) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            Ok(u) => {
                return Err(HubError::Setup(format!(
                    "HF_ENDPOINT {:?}: only http:// and https:// endpoints are supported, not {}://",
                    opts.endpoint,
                    u.scheme()
                )))
            }
            Err(e) => return Err(HubError::Setup(format!("HF_ENDPOINT {:?} is not a URL: {e}", opts.endpoint))),
        }
        install_tls_provider();
        let build = |policy: reqwest::redirect::Policy| {
            reqwest::Client::builder()
                .user_agent(opts.user_agent.clone())
                .connect_timeout(opts.connect_timeout)
                .read_timeout(opts.read_timeout)
                .redirect(policy)
                .build()
                .map_err(|e| HubError::Setup(format!("HTTP client: {e}")))
        };
        let client = build(reqwest::redirect::Policy::limited(10))?;
        let no_redirect = build(reqwest::redirect::Policy::none())?;
        Ok(HubApi { opts, client, no_redirect })
    }

    /// The options this client was built with.
    pub fn options(&self) -> &HubOptions {
        &self.opts
    }

    /// Adds `Authorization: Bearer` when a token is set and `url` is on the endpoint's origin.
    pub(crate) fn auth_headers(&self, url: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(token) = &self.opts.token {
            if same_origin(url, &self.opts.endpoint) {
                if let Ok(v) = HeaderValue::from_str(&format!("Bearer {token}")) {
                    h.insert(AUTHORIZATION, v);
                }
            }
        }
        h
    }

    /// Backoff before retry number `attempt` (1-based): base · 2^(attempt-1), capped at 30 s.
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(16);
        (self.opts.retry_base_delay * factor).min(Duration::from_secs(30))
    }

    /// Maps a non-success response to a typed error (`file` set for `resolve` URLs).
    pub(crate) async fn status_error(
        &self,
        resp: reqwest::Response,
        repo: &str,
        revision: &str,
        file: Option<&str>,
    ) -> HubError {
        let status = resp.status();
        let url = resp.url().to_string();
        let code = resp.headers().get("x-error-code").and_then(|v| v.to_str().ok()).map(str::to_string);
        let token_sent = self.opts.token.is_some() && same_origin(&url, &self.opts.endpoint);
        let body = read_capped(resp, MAX_ERROR_BODY).await.map(|b| String::from_utf8_lossy(&b).into_owned());
        let body = body.unwrap_or_default();
        let body = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or_else(|| body.chars().take(200).collect());
        let (repo, revision) = (repo.to_string(), revision.to_string());
        match status {
            StatusCode::UNAUTHORIZED => HubError::Unauthorized { repo, url, token_sent },
            StatusCode::FORBIDDEN => HubError::Forbidden { repo, url },
            StatusCode::NOT_FOUND => match (file, code.as_deref()) {
                (Some(_), Some("RepoNotFound" | "RevisionNotFound")) | (None, _) => {
                    HubError::RepoNotFound { repo, revision, url }
                }
                (Some(f), _) => HubError::FileNotFound { repo, file: f.to_string(), available: Vec::new() },
            },
            _ => HubError::Http { status: status.as_u16(), url, body },
        }
    }

    /// Sends a request, retrying transport errors and 5xx/429 with backoff; returns the first answer that is
    /// not transient (which may still be an error status, for the caller to map).
    pub(crate) async fn send_retrying(
        &self,
        client: &reqwest::Client,
        method: Method,
        url: &str,
        extra: HeaderMap,
    ) -> Result<reqwest::Response> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let mut headers = self.auth_headers(url);
            headers.extend(extra.clone());
            let res = client.request(method.clone(), url).headers(headers).send().await;
            let transient = match res {
                Ok(r) if r.status().is_server_error() || r.status() == StatusCode::TOO_MANY_REQUESTS => {
                    if attempt > self.opts.max_retries {
                        return Ok(r);
                    }
                    format!("HTTP {}", r.status())
                }
                Ok(r) => return Ok(r),
                Err(e) => {
                    // A request that cannot even be built (bad URL) fails the same way every time.
                    if attempt > self.opts.max_retries || e.is_builder() {
                        return Err(HubError::Network {
                            url: url.to_string(),
                            message: describe(&e),
                            attempts: attempt,
                        });
                    }
                    describe(&e)
                }
            };
            let delay = self.backoff(attempt);
            tracing::warn!("{url}: {transient}; retrying in {delay:?} ({attempt}/{})", self.opts.max_retries);
            tokio::time::sleep(delay).await;
        }
    }

    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        repo: &str,
        revision: &str,
    ) -> Result<(T, Option<String>)> {
        let resp = self.send_retrying(&self.client, Method::GET, url, HeaderMap::new()).await?;
        if !resp.status().is_success() {
            return Err(self.status_error(resp, repo, revision, None).await);
        }
        let next =
            resp.headers().get_all(reqwest::header::LINK).iter().filter_map(|v| v.to_str().ok()).find_map(next_link);
        let bytes = read_capped(resp, MAX_JSON_BYTES).await?;
        let value = serde_json::from_slice(&bytes)
            .map_err(|e| HubError::Protocol { url: url.to_string(), reason: format!("bad JSON: {e}") })?;
        Ok((value, next))
    }

    /// Resolves `revision` to a commit and lists the repo's files at that commit (with sizes and hashes when
    /// the tree endpoint answers; the `siblings` list alone otherwise).
    pub async fn repo_info(&self, repo: &str, revision: &str) -> Result<RepoInfo> {
        let ep = &self.opts.endpoint;
        let url = format!("{ep}/api/models/{repo}/revision/{}", encode_path(revision, false));
        let (rev, _): (RevisionJson, _) = self.get_json(&url, repo, revision).await?;
        let commit = rev.sha.filter(|s| crate::model_ref::is_commit_hash(s)).ok_or_else(|| HubError::Protocol {
            url: url.clone(),
            reason: "no 40-hex `sha` in the revision answer".into(),
        })?;
        let mut files = Vec::new();
        let mut next = Some(format!("{ep}/api/models/{repo}/tree/{commit}?recursive=true"));
        let mut pages = 0;
        while let Some(page_url) = next.take() {
            pages += 1;
            match self.get_json::<Vec<TreeEntryJson>>(&page_url, repo, revision).await {
                Ok((entries, n)) => {
                    files.extend(entries.into_iter().filter(|e| e.kind == "file").map(|e| RepoFile {
                        oid: e.lfs.and_then(|l| l.oid).or(e.oid),
                        path: e.path,
                        size: e.size,
                    }));
                    if n.is_some() && pages >= MAX_TREE_PAGES {
                        return Err(HubError::Protocol {
                            url: page_url,
                            reason: format!("the file listing goes on past {MAX_TREE_PAGES} pages; stopping"),
                        });
                    }
                    next = n;
                }
                Err(e @ (HubError::Unauthorized { .. } | HubError::Forbidden { .. })) => return Err(e),
                Err(e) => {
                    tracing::debug!("tree listing unavailable ({e}); using the siblings list");
                    files = rev
                        .siblings
                        .iter()
                        .map(|s| RepoFile { path: s.rfilename.clone(), size: None, oid: None })
                        .collect();
                    break;
                }
            }
        }
        files.retain(|f| crate::model_ref::validate_repo_path(&f.path).is_ok());
        Ok(RepoInfo { commit, files })
    }

    /// The `resolve` URL of a file.
    pub fn resolve_url(&self, repo: &str, revision: &str, file: &str) -> String {
        format!("{}/{repo}/resolve/{}/{}", self.opts.endpoint, encode_path(revision, false), encode_path(file, true))
    }

    /// HEADs the `resolve` URL of a file and reads its ETag, size and commit.
    pub async fn file_meta(&self, repo: &str, revision: &str, file: &str) -> Result<FileMeta> {
        let mut url = self.resolve_url(repo, revision, file);
        let mut identity = HeaderMap::new();
        identity.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        for _ in 0..10 {
            let resp = self.send_retrying(&self.no_redirect, Method::HEAD, &url, identity.clone()).await?;
            let status = resp.status();
            let headers = resp.headers();
            let location = headers.get(LOCATION).and_then(|v| v.to_str().ok()).map(str::to_string);
            if status.is_redirection() {
                // Relative and same-origin redirects (renamed repos) stay on the Hub and are followed, as
                // huggingface_hub does; a cross-origin one (CDN) carries the metadata itself.
                if let Some(loc) = location.as_deref() {
                    let target = if loc.contains("://") { loc.to_string() } else { join_relative(&url, loc) };
                    if same_origin(&target, &url) {
                        url = target;
                        continue;
                    }
                }
            } else if !status.is_success() {
                return Err(self.status_error(resp, repo, revision, Some(file)).await);
            }
            let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
            let etag = h("x-linked-etag").or_else(|| h("etag")).map(|e| normalize_etag(&e)).unwrap_or_default();
            if !valid_etag(&etag) {
                return Err(HubError::Protocol { url, reason: format!("missing or unusable ETag {etag:?}") });
            }
            let size = h("x-linked-size")
                .or_else(|| if status.is_redirection() { None } else { h("content-length") })
                .and_then(|s| s.trim().parse().ok());
            let commit = h("x-repo-commit").filter(|c| crate::model_ref::is_commit_hash(c));
            return Ok(FileMeta { etag, size, commit });
        }
        Err(HubError::Protocol { url, reason: "too many relative redirects".into() })
    }
}

/// Readable text of a transport error, including its causes.
pub(crate) fn describe(e: &reqwest::Error) -> String {
    let mut s = if e.is_timeout() { "timed out".to_string() } else { e.to_string() };
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        let t = inner.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = inner.source();
    }
    s
}

/// `scheme://host[:port]` of a URL.
fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map(|i| i + 3).unwrap_or(0);
    match url[after_scheme..].find('/') {
        Some(i) => &url[..after_scheme + i],
        None => url,
    }
}

/// True when two URLs share scheme, host and port.
pub(crate) fn same_origin(a: &str, b: &str) -> bool {
    origin(a).eq_ignore_ascii_case(origin(b))
}

/// Resolves a relative `Location` against the URL that sent it.
fn join_relative(base: &str, loc: &str) -> String {
    if loc.starts_with('/') {
        format!("{}{loc}", origin(base))
    } else {
        let dir = base.rfind('/').map(|i| &base[..=i]).unwrap_or(base);
        format!("{dir}{loc}")
    }
}

/// Largest JSON answer read from the API (a tree listing of a very large repo is a few MiB).
pub const MAX_JSON_BYTES: usize = 64 << 20;
/// Most bytes of an error answer read for its message.
const MAX_ERROR_BODY: usize = 64 << 10;
/// Most pages of a repo's file listing followed (the Hub pages 1,000 entries each).
pub const MAX_TREE_PAGES: usize = 1000;

/// A response body of at most `max` bytes (checked as it arrives, so a hostile endpoint cannot
/// make the client buffer gigabytes).
async fn read_capped(mut resp: reqwest::Response, max: usize) -> Result<Vec<u8>> {
    let url = resp.url().to_string();
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Err(HubError::Protocol { url, reason: format!("answer larger than {max} bytes") });
    }
    let mut out = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(c)) => {
                if out.len() + c.len() > max {
                    return Err(HubError::Protocol { url, reason: format!("answer larger than {max} bytes") });
                }
                out.extend_from_slice(&c);
            }
            Ok(None) => return Ok(out),
            Err(e) => return Err(HubError::Network { url, message: describe(&e), attempts: 1 }),
        }
    }
}

/// Extracts the `rel="next"` target of a `Link` header.
fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params.contains("rel=\"next\"").then(|| url.trim().trim_start_matches('<').trim_end_matches('>').to_string())
    })
}

/// Makes rustls's ring provider the process default, which reqwest's clients use for HTTPS
/// (built without aws-lc-rs, whose C library was the longest step of a clean build). Safe to
/// call more than once: a provider already installed stays.
fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(encode_path("refs/pr/1", false), "refs%2Fpr%2F1");
        assert_eq!(encode_path("a b/c.gguf", true), "a%20b/c.gguf");
        assert_eq!(normalize_etag("W/\"abc\""), "abc");
        assert!(same_origin("http://127.0.0.1:5/x", "http://127.0.0.1:5"));
        assert!(!same_origin("http://127.0.0.1:6/x", "http://127.0.0.1:5"));
        assert_eq!(join_relative("http://h:1/a/b", "/c/d"), "http://h:1/c/d");
        assert_eq!(
            next_link("<http://h/api/models/a/b/tree/c?cursor=x>; rel=\"next\"").as_deref(),
            Some("http://h/api/models/a/b/tree/c?cursor=x")
        );
        assert!(!valid_etag("../x"));
    }
}
