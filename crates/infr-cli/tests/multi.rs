//! Memory issue: `infr multi` hosts several models on one server and routes each request by
//! its `model`: two tiny models answer concurrent requests, each exactly as it answers alone;
//! `/v1/models` lists both with their context; an unknown or missing name is refused naming
//! the served models.

#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

fn synth(name: &str) -> String {
    let p =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../testdata/oracle/synth/{name}.gguf"));
    p.to_string_lossy().into_owned()
}

/// POST (or GET without a body) on `addr`; the status and the JSON body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let json = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(json).unwrap_or(serde_json::Value::Null))
}

fn complete(addr: &str, model: &str, prompt: &str) -> (String, String) {
    let body = serde_json::json!({"model": model, "prompt": prompt, "max_tokens": 6, "temperature": 0}).to_string();
    let (status, v) = http(addr, "POST", "/v1/completions", &body);
    assert_eq!(status, 200, "{v}");
    (
        v["model"].as_str().unwrap_or_default().to_owned(),
        v["choices"][0]["text"].as_str().unwrap_or_default().to_owned(),
    )
}

#[test]
fn two_models_route_by_name_under_concurrent_requests() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_infr"))
        .args(["multi", &format!("a={}@cpu", synth("qwen3")), &format!("b={}@cpu", synth("llama4"))])
        .args(["--port", "0", "-np", "2", "-c", "1024", "-t", "1"])
        .env_remove("INFR_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts infr multi");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("listening on http://").unwrap_or_else(|| panic!("{line:?}")).to_owned();

    let (status, models) = http(&addr, "GET", "/v1/models", "");
    assert_eq!(status, 200);
    let ids: Vec<&str> = models["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert!(models["data"].as_array().unwrap().iter().all(|m| m["context_length"] == 512), "{models}");

    // Each model alone, then both at once from several threads: the same answers.
    let alone: Vec<(String, String)> = ["a", "b"].iter().map(|m| complete(&addr, m, "aa ab")).collect();
    assert_eq!((alone[0].0.as_str(), alone[1].0.as_str()), ("a", "b"));
    assert_ne!(alone[0].1, alone[1].1, "two different random models answer differently");
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let addr = addr.clone();
            std::thread::spawn(move || complete(&addr, if i % 2 == 0 { "a" } else { "b" }, "aa ab"))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), alone[i % 2], "request {i}");
    }

    // Unknown and missing names, in each API's shape.
    let (status, v) = http(&addr, "POST", "/v1/completions", r#"{"model": "c", "prompt": "x"}"#);
    assert_eq!(status, 404);
    assert!(v["error"]["message"].as_str().unwrap().contains("'a', 'b'"), "{v}");
    let (status, v) = http(
        &addr,
        "POST",
        "/v1/messages",
        r#"{"model": "c", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}"#,
    );
    assert_eq!((status, v["type"].as_str()), (404, Some("error")), "{v}");
    let (status, v) = http(&addr, "POST", "/v1/completions", r#"{"prompt": "x"}"#);
    assert_eq!(status, 400, "{v}");
    let (status, v) = http(&addr, "GET", "/health", "");
    assert_eq!((status, v["status"].as_str()), (200, Some("ok")), "{v}");
    let _ = child.kill();
    let _ = child.wait();
}
