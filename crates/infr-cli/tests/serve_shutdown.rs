//! Hardening issue, defect 5: `infr serve` shuts down on SIGINT and SIGTERM alike, bounded by
//! `server.shutdown_grace_s`: a stream still running when the grace period ends gets a final
//! event and `[DONE]` (SIGTERM used to cut it off), and a second signal exits at once (repeated
//! SIGINTs used to be ignored while generation went on). The model is a tiny random one made
//! by `infr synth` (no download), which generates without ever choosing its end token early.

#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{signal, wait_exit};

mod common;

struct Server {
    child: Child,
    addr: String,
}

fn start(dir: &std::path::Path, grace_s: u64) -> Server {
    let exe = env!("CARGO_BIN_EXE_infr");
    let model = dir.join("tiny.gguf");
    if !model.exists() {
        let ok = Command::new(exe)
            .args(["synth", "--shape", "tiny-qwen3", "--quant", "Q8_0", "-o"])
            .arg(&model)
            .status()
            .expect("runs infr synth");
        assert!(ok.success());
    }
    let mut child = Command::new(exe)
        .arg("serve")
        .arg(&model)
        .args(["--port", "0", "--dev", "cpu", "-c", "16384", "-t", "1", "--set"])
        .arg(format!("server.shutdown_grace_s={grace_s}"))
        .current_dir(dir)
        .env_remove("INFR_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts infr serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("listening on http://").unwrap_or_else(|| panic!("{line:?}")).to_owned();
    Server { child, addr }
}

/// Start a long streamed completion and read until its first token arrived (so the request
/// runs: headers alone can come while it is still queued, and a queued request is refused at
/// the first signal); the open stream.
fn stream(addr: &str) -> TcpStream {
    let body = r#"{"prompt": "aa ab ac", "max_tokens": 16000, "stream": true, "temperature": 0,
        "stream_options": {"include_usage": true}}"#;
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let seen = common::read_until(&mut s, "\"text\"", "stream closed before its first token");
    assert!(seen.contains("200 OK"), "{seen}");
    s
}

#[test]
fn sigterm_ends_running_streams_with_a_final_event() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = start(dir.path(), 1);
    let mut s = stream(&srv.addr);
    signal(&srv.child, "-TERM");
    let mut rest = String::new();
    let _ = s.read_to_string(&mut rest);
    assert!(
        rest.contains("\"finish_reason\":\"length\""),
        "no final event: ...{}",
        &rest[rest.len().saturating_sub(400)..]
    );
    assert!(rest.contains("data: [DONE]"), "no [DONE]");
    // Ended by the shutdown, not by its token limit.
    let used = rest
        .split("\"completion_tokens\":")
        .nth(1)
        .and_then(|t| t.split([',', '}']).next()?.trim().parse::<u64>().ok());
    assert!(used.is_some_and(|n| n < 16000), "completion_tokens {used:?}");
    let st = wait_exit(&mut srv.child, Duration::from_secs(20));
    assert!(st.success(), "{st:?}");
}

#[test]
fn a_second_signal_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = start(dir.path(), 600);
    let _s = stream(&srv.addr);
    signal(&srv.child, "-INT");
    std::thread::sleep(Duration::from_millis(300));
    // The grace period (600 s) is far away: only the second signal can end it now.
    assert!(srv.child.try_wait().unwrap().is_none(), "exited on the first signal with a stream running");
    signal(&srv.child, "-INT");
    let st = wait_exit(&mut srv.child, Duration::from_secs(10));
    assert_eq!(st.code(), Some(130));
}
