//! A streaming load generator for an OpenAI-compatible server: N concurrent clients each stream
//! one chat completion, or one plain completion (greedy, `stream_options.include_usage`), and
//! the run reports whether every stream ended with `[DONE]` and the aggregate completion tokens
//! per second.
//!
//! Shared by `tests/api/load.rs` and `examples/load.rs` (through `#[path]`).

#![allow(dead_code)]

use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Server base URL, e.g. `http://127.0.0.1:8080`.
    pub url: String,
    /// Concurrent streaming clients.
    pub clients: usize,
    /// `max_tokens` of each request.
    pub max_tokens: usize,
    /// API key sent as a bearer token.
    pub api_key: Option<String>,
    /// Longest a single request may take.
    pub timeout: Duration,
    /// Stream `/v1/completions` with a plain prompt instead of a chat completion: no chat
    /// template or reply parser on either side (a random model's text can fail a server's
    /// chat-format parser, which then ends the stream with an error).
    pub completions: bool,
}

/// One client's stream.
#[derive(Debug, Clone, Default)]
pub struct StreamResult {
    /// The stream ended with `data: [DONE]`.
    pub done: bool,
    /// `usage.completion_tokens` of the last chunk.
    pub completion_tokens: usize,
    /// The streamed text.
    pub text: String,
    /// Time to the first content.
    pub ttft: Option<Duration>,
    /// Time to the end of the stream.
    pub elapsed: Duration,
    /// What went wrong, if anything.
    pub error: Option<String>,
}

/// The result of a run.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// Clients run.
    pub clients: usize,
    /// From the first request to the last stream's end.
    pub wall: Duration,
    /// Each client's stream.
    pub results: Vec<StreamResult>,
}

impl LoadReport {
    /// Completion tokens of all streams.
    pub fn total_tokens(&self) -> usize {
        self.results.iter().map(|r| r.completion_tokens).sum()
    }

    /// Aggregate completion tokens per second.
    pub fn tokens_per_s(&self) -> f64 {
        self.total_tokens() as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// Every stream ended with `[DONE]`, reported usage and had no error.
    pub fn all_ok(&self) -> bool {
        self.results.len() == self.clients
            && self.results.iter().all(|r| r.done && r.error.is_none() && r.completion_tokens > 0)
    }

    /// One line for logs.
    pub fn summary(&self) -> String {
        let ok = self.results.iter().filter(|r| r.done && r.error.is_none()).count();
        let mut ttft: Vec<f64> = self.results.iter().filter_map(|r| r.ttft).map(|d| d.as_secs_f64() * 1e3).collect();
        ttft.sort_by(f64::total_cmp);
        // Nearest-rank percentiles of the streams' times to first token.
        let pct = |p: f64| {
            let rank = ((p / 100.0) * ttft.len() as f64).ceil().max(1.0) as usize;
            ttft.get(rank - 1).copied().unwrap_or(f64::NAN)
        };
        format!(
            "{} clients: {}/{} streams complete, {} completion tokens in {:.2} s = {:.1} tokens/s aggregate \
             ({:.1} per client), time to first token p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms",
            self.clients,
            ok,
            self.clients,
            self.total_tokens(),
            self.wall.as_secs_f64(),
            self.tokens_per_s(),
            self.tokens_per_s() / self.clients.max(1) as f64,
            pct(50.0),
            pct(90.0),
            pct(99.0),
        )
    }
}

/// Run `opts.clients` concurrent streams and wait for all of them.
pub async fn run(opts: &LoadOptions) -> LoadReport {
    // reqwest is built without a default TLS provider (see the workspace's Cargo.toml).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder().timeout(opts.timeout).build().expect("http client");
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..opts.clients {
        let (http, opts) = (http.clone(), opts.clone());
        tasks.push(tokio::spawn(async move { one(&http, &opts, i).await }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap_or_else(|e| StreamResult { error: Some(e.to_string()), ..Default::default() }));
    }
    LoadReport { clients: opts.clients, wall: start.elapsed(), results }
}

async fn one(http: &reqwest::Client, opts: &LoadOptions, i: usize) -> StreamResult {
    let start = Instant::now();
    let mut res = StreamResult::default();
    let ask = format!("Story number {i}: write a long story about a dragon who learns to fly.");
    let mut body = json!({
        "model": "any",
        "max_tokens": opts.max_tokens,
        "temperature": 0,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let path = if opts.completions {
        body["prompt"] = json!(format!("{ask}\n\nOnce upon a time"));
        "completions"
    } else {
        body["messages"] = json!([{"role": "user", "content": ask}]);
        "chat/completions"
    };
    let mut req = http.post(format!("{}/v1/{path}", opts.url.trim_end_matches('/'))).json(&body);
    if let Some(k) = &opts.api_key {
        req = req.bearer_auth(k);
    }
    let mut resp = match req.send().await {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => {
            res.error = Some(format!("HTTP {}: {}", r.status(), r.text().await.unwrap_or_default()));
            return res;
        }
        Err(e) => {
            res.error = Some(e.to_string());
            return res;
        }
    };
    let mut buf = String::new();
    loop {
        let chunk = match resp.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                res.error = Some(e.to_string());
                break;
            }
        };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            for line in event.lines() {
                let Some(data) = line.strip_prefix("data:").map(str::trim) else { continue };
                if data == "[DONE]" {
                    res.done = true;
                    continue;
                }
                let v: Value = match serde_json::from_str(data) {
                    Ok(v) => v,
                    Err(e) => {
                        res.error = Some(format!("bad chunk {data:?}: {e}"));
                        continue;
                    }
                };
                if let Some(err) = v.get("error") {
                    res.error = Some(err.to_string());
                }
                let choice = &v["choices"][0];
                let text = if opts.completions { &choice["text"] } else { &choice["delta"]["content"] };
                if let Some(t) = text.as_str() {
                    if !t.is_empty() {
                        res.ttft.get_or_insert_with(|| start.elapsed());
                        res.text.push_str(t);
                    }
                }
                if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
                    res.completion_tokens = n as usize;
                }
            }
        }
    }
    res.elapsed = start.elapsed();
    res
}
