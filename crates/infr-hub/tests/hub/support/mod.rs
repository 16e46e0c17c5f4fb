//! A fake Hugging Face Hub on 127.0.0.1 for the tests: the API endpoints `infr-hub` and `huggingface_hub`
//! use, LFS files redirected to a blob URL with `X-Linked-Etag`, Range support, and fault injection.
//!
//! It is a hand-rolled HTTP/1.1 server (one request per connection, `Connection: close`) so faults such as a
//! connection dropped mid-body are exact. It runs on its own thread and runtime, usable from sync and async
//! tests and while a Python subprocess talks to it.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A file of a fake repo.
#[derive(Clone, Debug)]
pub struct MockFile {
    pub path: String,
    pub data: Vec<u8>,
    /// LFS files are served through a redirect to `/blobs/<sha256>`, others inline with a git-sha1 ETag.
    pub lfs: bool,
}

impl MockFile {
    pub fn lfs(path: &str, data: Vec<u8>) -> Self {
        MockFile { path: path.into(), data, lfs: true }
    }
    pub fn small(path: &str, data: &[u8]) -> Self {
        MockFile { path: path.into(), data: data.to_vec(), lfs: false }
    }
    pub fn sha256(&self) -> String {
        hex(&sha2::Sha256::digest(&self.data))
    }
    pub fn git_sha1(&self) -> String {
        let mut h = sha1::Sha1::new();
        h.update(format!("blob {}\0", self.data.len()).as_bytes());
        h.update(&self.data);
        hex(&h.finalize())
    }
    pub fn etag(&self) -> String {
        if self.lfs {
            self.sha256()
        } else {
            self.git_sha1()
        }
    }
}

/// A fake repo at one commit.
#[derive(Clone, Debug)]
pub struct MockRepo {
    pub id: String,
    pub commit: String,
    pub files: Vec<MockFile>,
    /// When set, API and resolve requests need `Authorization: Bearer <token>`.
    pub token: Option<String>,
}

impl MockRepo {
    pub fn new(id: &str, files: Vec<MockFile>) -> Self {
        let commit = hex(&sha1::Sha1::digest(id.as_bytes()));
        MockRepo { id: id.into(), commit, files, token: None }
    }
}

/// Faults applied to content responses (blob GETs and inline files).
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Close the connection after this many body bytes, for the next `drop_count` content responses.
    pub drop_after: Option<u64>,
    pub drop_count: u32,
    /// Only drop responses to a Range starting at this offset.
    pub drop_at_offset: Option<u64>,
    /// Flip a byte of every content response.
    pub corrupt: bool,
    /// Wait this long before sending content headers.
    pub stall: Option<Duration>,
    /// Send content in pieces of this many bytes with a pause between them.
    pub trickle: Option<(usize, Duration)>,
    /// Answer 200 with the whole body even when a Range is asked for.
    pub ignore_range: bool,
    /// Answer content requests with 503 this many times first.
    pub fail_503: u32,
    /// Tree listing page size (pagination through `Link`), 0 = one page.
    pub page_size: usize,
    /// Make the tree endpoint answer 404 (a mirror without it).
    pub no_tree: bool,
}

/// One request seen by the server.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: HashMap<String, String>,
}

struct State {
    repos: Vec<MockRepo>,
    faults: Faults,
    log: Vec<Request>,
    /// `host:port` of the CDN listener.
    cdn: String,
}

/// A running fake Hub.
pub struct MockHub {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Deterministic pseudo-random bytes.
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

impl MockHub {
    /// Starts the server on 127.0.0.1 with an ephemeral port.
    pub fn start(repos: Vec<MockRepo>) -> MockHub {
        let state =
            Arc::new(Mutex::new(State { repos, faults: Faults::default(), log: Vec::new(), cdn: String::new() }));
        let (tx, rx) = std::sync::mpsc::channel();
        let st = state.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                // Two listeners: the Hub, and a "CDN" on another origin that LFS redirects point at (clients
                // follow same-origin redirects themselves and read metadata only from cross-origin ones).
                let hub = TcpListener::bind("127.0.0.1:0").await.expect("bind");
                let cdn = TcpListener::bind("127.0.0.1:0").await.expect("bind");
                let cdn_addr = cdn.local_addr().expect("addr");
                st.lock().expect("lock").cdn = cdn_addr.to_string();
                tx.send(hub.local_addr().expect("addr")).expect("send addr");
                let serve = |listener: TcpListener, st: Arc<Mutex<State>>| async move {
                    loop {
                        let Ok((sock, _)) = listener.accept().await else { continue };
                        let st = st.clone();
                        tokio::spawn(async move {
                            let _ = tokio::time::timeout(Duration::from_secs(60), handle(sock, st)).await;
                        });
                    }
                };
                tokio::join!(serve(hub, st.clone()), serve(cdn, st.clone()));
            });
        });
        let addr = rx.recv_timeout(Duration::from_secs(10)).expect("server start");
        MockHub { addr, state }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set_faults(&self, f: Faults) {
        self.state.lock().expect("lock").faults = f;
    }

    pub fn requests(&self) -> Vec<Request> {
        self.state.lock().expect("lock").log.clone()
    }

    pub fn clear_log(&self) {
        self.state.lock().expect("lock").log.clear();
    }

    /// Requests for content (blob or inline file GETs).
    pub fn content_gets(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "GET" && (r.path.starts_with("/blobs/") || r.path.contains("/resolve/")))
            .collect()
    }
}

async fn handle(mut sock: TcpStream, st: Arc<Mutex<State>>) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = sock.read(&mut tmp).await?;
        if n == 0 || buf.len() > 65536 {
            return Ok(());
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let text = String::from_utf8_lossy(&buf).to_string();
    let mut lines = text.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_string();
    let path = first.next().unwrap_or("").to_string();
    let mut headers = HashMap::new();
    for l in lines.take_while(|l| !l.is_empty()) {
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let req = Request { method, path, headers };
    st.lock().expect("lock").log.push(req.clone());
    let host = req.headers.get("host").cloned().unwrap_or_default();
    let resp = route(&req, &st, &host);
    send(&mut sock, &req, resp, &st).await
}

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Content subject to faults and Range.
    content: bool,
}

fn json(status: u16, v: serde_json::Value) -> Resp {
    Resp {
        status,
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: v.to_string().into_bytes(),
        content: false,
    }
}

fn error(status: u16, code: &str, msg: &str) -> Resp {
    let mut r = json(status, serde_json::json!({ "error": msg }));
    r.headers.push(("X-Error-Code".into(), code.into()));
    r
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or(""), 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn route(req: &Request, st: &Arc<Mutex<State>>, host: &str) -> Resp {
    let state = st.lock().expect("lock");
    let (path, query) = req.path.split_once('?').unwrap_or((&req.path, ""));
    let auth = req.headers.get("authorization").cloned();
    let authorized = |repo: &MockRepo| match &repo.token {
        None => true,
        Some(t) => auth.as_deref() == Some(&format!("Bearer {t}")),
    };
    if let Some(sha) = path.strip_prefix("/blobs/") {
        for repo in &state.repos {
            if let Some(f) = repo.files.iter().find(|f| f.lfs && f.sha256() == sha) {
                return Resp {
                    status: 200,
                    headers: vec![("ETag".into(), format!("\"{sha}\"")), ("Accept-Ranges".into(), "bytes".into())],
                    body: f.data.clone(),
                    content: true,
                };
            }
        }
        return error(404, "EntryNotFound", "no such blob");
    }
    if let Some(rest) = path.strip_prefix("/api/models/") {
        let parts: Vec<&str> = rest.splitn(4, '/').collect();
        if parts.len() < 4 {
            return error(404, "RepoNotFound", "Repository not found");
        }
        let id = format!("{}/{}", parts[0], parts[1]);
        let Some(repo) = state.repos.iter().find(|r| r.id == id) else {
            return error(404, "RepoNotFound", "Repository not found");
        };
        if !authorized(repo) {
            return error(401, "RepoNotFound", "Invalid credentials in Authorization header");
        }
        let rev = percent_decode(parts[3]);
        if rev != "main" && rev != repo.commit {
            return error(404, "RevisionNotFound", "Invalid rev id");
        }
        return match parts[2] {
            "revision" => json(
                200,
                serde_json::json!({
                    "id": repo.id, "sha": repo.commit,
                    "siblings": repo.files.iter().map(|f| serde_json::json!({"rfilename": f.path})).collect::<Vec<_>>(),
                }),
            ),
            "tree" if !state.faults.no_tree => {
                let entries: Vec<serde_json::Value> = repo
                    .files
                    .iter()
                    .map(|f| {
                        let mut e = serde_json::json!({
                            "type": "file", "path": f.path, "size": f.data.len(), "oid": f.git_sha1(),
                        });
                        if f.lfs {
                            e["lfs"] = serde_json::json!({"oid": f.sha256(), "size": f.data.len(), "pointerSize": 134});
                        }
                        e
                    })
                    .collect();
                let ps = state.faults.page_size;
                if ps == 0 {
                    return json(200, serde_json::Value::Array(entries));
                }
                let cursor: usize = query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("cursor="))
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                let page: Vec<_> = entries.iter().skip(cursor).take(ps).cloned().collect();
                let mut r = json(200, serde_json::Value::Array(page));
                if cursor + ps < entries.len() {
                    r.headers.push((
                        "Link".into(),
                        format!("<http://{host}{path}?recursive=true&cursor={}>; rel=\"next\"", cursor + ps),
                    ));
                }
                r
            }
            _ => error(404, "EntryNotFound", "not found"),
        };
    }
    // /{org}/{repo}/resolve/{rev}/{file...}
    let parts: Vec<&str> = path.trim_start_matches('/').splitn(5, '/').collect();
    if parts.len() == 5 && parts[2] == "resolve" {
        let id = format!("{}/{}", parts[0], parts[1]);
        let Some(repo) = state.repos.iter().find(|r| r.id == id) else {
            return error(404, "RepoNotFound", "Repository not found");
        };
        if !authorized(repo) {
            return error(401, "RepoNotFound", "Invalid credentials in Authorization header");
        }
        let rev = percent_decode(parts[3]);
        if rev != "main" && rev != repo.commit {
            return error(404, "RevisionNotFound", "Invalid rev id");
        }
        let file = percent_decode(parts[4]);
        let Some(f) = repo.files.iter().find(|f| f.path == file) else {
            let mut r = error(404, "EntryNotFound", "Entry not found");
            r.headers.push(("X-Repo-Commit".into(), repo.commit.clone()));
            return r;
        };
        let common = vec![("X-Repo-Commit".into(), repo.commit.clone())];
        if f.lfs {
            let mut headers = common;
            headers.push(("Location".into(), format!("http://{}/blobs/{}", state.cdn, f.sha256())));
            headers.push(("X-Linked-Etag".into(), format!("\"{}\"", f.sha256())));
            headers.push(("X-Linked-Size".into(), f.data.len().to_string()));
            headers.push(("ETag".into(), "W/\"redirect-etag\"".into()));
            return Resp { status: 302, headers, body: Vec::new(), content: false };
        }
        let mut headers = common;
        headers.push(("ETag".into(), format!("\"{}\"", f.git_sha1())));
        headers.push(("Accept-Ranges".into(), "bytes".into()));
        return Resp { status: 200, headers, body: f.data.clone(), content: true };
    }
    error(404, "RepoNotFound", "not found")
}

async fn send(sock: &mut TcpStream, req: &Request, mut resp: Resp, st: &Arc<Mutex<State>>) -> std::io::Result<()> {
    let head_only = req.method == "HEAD";
    let mut drop_after = None;
    let mut faults = Faults::default();
    if resp.content && !head_only {
        let mut state = st.lock().expect("lock");
        faults = state.faults.clone();
        if state.faults.fail_503 > 0 {
            state.faults.fail_503 -= 1;
            resp = error(503, "Unavailable", "try later");
        } else if state.faults.drop_count > 0 {
            let start = req
                .headers
                .get("range")
                .and_then(|r| r.strip_prefix("bytes="))
                .and_then(|r| r.split('-').next())
                .and_then(|a| a.parse::<u64>().ok())
                .unwrap_or(0);
            if state.faults.drop_at_offset.is_none_or(|o| o == start) {
                state.faults.drop_count -= 1;
                drop_after = state.faults.drop_after;
            }
        }
    }
    if resp.content {
        let total = resp.body.len() as u64;
        if faults.corrupt && !resp.body.is_empty() {
            let mid = resp.body.len() / 2;
            resp.body[mid] ^= 0xff;
        }
        let range = req.headers.get("range").filter(|_| !faults.ignore_range).and_then(|r| {
            let r = r.strip_prefix("bytes=")?;
            let (a, b) = r.split_once('-')?;
            let a: u64 = a.parse().ok()?;
            let b: u64 = if b.is_empty() { total.saturating_sub(1) } else { b.parse().ok()? };
            Some((a, b.min(total.saturating_sub(1))))
        });
        if let Some((a, b)) = range {
            if a >= total {
                resp.status = 416;
                resp.headers.push(("Content-Range".into(), format!("bytes */{total}")));
                resp.body.clear();
            } else {
                resp.status = 206;
                resp.headers.push(("Content-Range".into(), format!("bytes {a}-{b}/{total}")));
                resp.body = resp.body[a as usize..=b as usize].to_vec();
            }
        }
        if let Some(d) = faults.stall {
            tokio::time::sleep(d).await;
        }
    }
    let reason = match resp.status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let mut head =
        format!("HTTP/1.1 {} {reason}\r\nConnection: close\r\nContent-Length: {}\r\n", resp.status, resp.body.len());
    for (k, v) in &resp.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    sock.write_all(head.as_bytes()).await?;
    if head_only {
        return sock.shutdown().await;
    }
    let body = match drop_after {
        Some(n) => &resp.body[..(n as usize).min(resp.body.len())],
        None => &resp.body[..],
    };
    match faults.trickle.filter(|_| resp.content) {
        Some((piece, pause)) => {
            for c in body.chunks(piece.max(1)) {
                sock.write_all(c).await?;
                sock.flush().await?;
                tokio::time::sleep(pause).await;
            }
        }
        None => sock.write_all(body).await?,
    }
    sock.flush().await?;
    sock.shutdown().await
}
