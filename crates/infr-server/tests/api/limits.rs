//! Hardening issue, defect 4: connections that never finish a request are cut off, and a cap
//! on open connections keeps the server answering. Runs the real accept loop
//! (`infr_server::listen`) with short limits over a two-route router; no model needed.

use std::time::{Duration, Instant};

use axum::routing::{get, post};
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HEADER_TIMEOUT: Duration = Duration::from_millis(400);
const BODY_TIMEOUT: Duration = Duration::from_millis(400);

async fn start(max_connections: usize) -> String {
    let app = Router::new().route("/health", get(|| async { "ok" })).route(
        "/echo",
        post(|body: axum::body::Body| async move {
            match infr_server::errors::read_body_within(body, 1 << 20, BODY_TIMEOUT).await {
                Ok(b) => axum::response::IntoResponse::into_response(b),
                Err(e) => axum::response::IntoResponse::into_response(infr_server::errors::OpenAiError(e)),
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let limits = infr_server::listen::Limits { max_connections, header_timeout: HEADER_TIMEOUT, grace: None };
    tokio::spawn(infr_server::listen::serve_with(listener, app, std::future::pending(), limits, || {}));
    addr
}

/// Send `req` and read until the server closes or 3 s pass; the reply text.
async fn exchange(addr: &str, req: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(req).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

async fn health(addr: &str) -> String {
    exchange(addr, format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_headers_are_cut_off() {
    let addr = start(64).await;
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let t = Instant::now();
    let mut buf = [0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await.expect("connection cut off");
    let waited = t.elapsed();
    // Closed (or answered 408) after the header timeout, not before it.
    let text = n.as_ref().map(|&n| String::from_utf8_lossy(&buf[..n]).into_owned()).unwrap_or_default();
    assert!(text.is_empty() || text.contains("408"), "{text:?}");
    assert!(waited >= HEADER_TIMEOUT - Duration::from_millis(50), "{waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_cannot_starve_health() {
    let addr = start(16).await;
    // Fill every slot with connections that send half a request head, then more.
    let mut idle = Vec::new();
    for _ in 0..40 {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        let _ = s.write_all(b"GET /health HTTP/1.1\r\n").await;
        idle.push(s);
    }
    // Once the header timeout has cut them off, /health answers again.
    tokio::time::sleep(HEADER_TIMEOUT + Duration::from_millis(300)).await;
    let r = health(&addr).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r:?}");
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_closed_on_arrival() {
    let addr = start(2).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(TcpStream::connect(&addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = health(&addr).await;
    assert!(r.is_empty(), "a third connection was served while two were open: {r:?}");
    drop(held);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(health(&addr).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_body_gets_408() {
    let addr = start(8).await;
    let head = format!("POST /echo HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 100\r\n\r\n0123456789");
    let r = exchange(&addr, head.as_bytes()).await;
    assert!(r.starts_with("HTTP/1.1 408"), "{r:?}");
    assert!(r.contains("request_timeout"), "{r:?}");
    let full = format!("POST /echo HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello");
    assert!(exchange(&addr, full.as_bytes()).await.ends_with("hello"));
}
