//! Shared setup of the HTTP tests: the real server on 127.0.0.1 (random port) with a test model
//! on the CPU, and small request helpers (the `server` module of `tests/api/main.rs`).
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use infr_core::GgufWeights;
use infr_cpu::{CpuBackend, CpuOptions, KernelTier};
use infr_engine::{slot_runner_options, Runner, RunnerOptions, Scheduler, SchedulerOptions};
use infr_server::{ServerOptions, TextModel};
use infr_tokenizer::chat::ChatTemplate;
use serde_json::Value;

/// The test model `name` (file stem) under `INFR_TEST_MODELS` (default `<repo>/models`), or
/// `synth:NAME` from `testdata/oracle/synth`;
/// `None` (skip) when missing, a failure when `INFR_REQUIRE_MODELS` is set.
pub fn model_path(name: &str) -> Option<PathBuf> {
    // `file:PATH`: a model the test wrote itself.
    if let Some(path) = name.strip_prefix("file:") {
        return Some(PathBuf::from(path));
    }
    // `synth:NAME`: a tiny random-weight model of the repository (always present).
    if let Some(synth) = name.strip_prefix("synth:") {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/oracle/synth");
        return Some(dir.join(format!("{synth}.gguf")));
    }
    let dir = std::env::var_os("INFR_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models"));
    let path = dir.join(format!("{name}.gguf"));
    if path.exists() {
        return Some(path);
    }
    assert!(std::env::var("INFR_REQUIRE_MODELS").is_err(), "missing model {}", path.display());
    eprintln!("skipping: {} not found", path.display());
    None
}

/// A one-slot server for `name` on its own thread; its base URL.
pub fn start_server(name: &str) -> Option<String> {
    start_server_with(name, 1, 2048, None)
}

/// A server for `name` with `parallel` slots sharing `n_ctx` tokens and an optional API key, on
/// its own thread and runtime (it lives as long as the test process); its base URL.
pub fn start_server_with(name: &str, parallel: usize, n_ctx: usize, api_key: Option<&str>) -> Option<String> {
    let key = api_key.map(str::to_owned);
    start_server_custom(name, parallel, n_ctx, None, move |o| o.api_key = key)
}

/// [`start_server_with`] with the model's chat template replaced by `template` (Jinja source)
/// when given, and the server options adjusted by `configure` (metrics, reasoning format, key).
pub fn start_server_custom(
    name: &str,
    parallel: usize,
    n_ctx: usize,
    template: Option<&str>,
    configure: impl FnOnce(&mut ServerOptions),
) -> Option<String> {
    let path = model_path(name)?;
    let w = GgufWeights::open(&path).expect("model opens");
    let meta = infr_core::WeightSource::metadata(&w);
    let tok = infr_tokenizer::Tokenizer::from_metadata(meta).expect("tokenizer");
    let template = match template {
        Some(src) => ChatTemplate::new(src, "", "").expect("test template"),
        None => ChatTemplate::for_model(meta).expect("chat template"),
    };
    let model = infr_models::load_model(&w).expect("model loads");
    let backend = Box::new(CpuBackend::new(CpuOptions { threads: 0, tier: KernelTier::Fast }).expect("cpu"));
    let ro = slot_runner_options(n_ctx, parallel, RunnerOptions { ubatch: 512, page_size: 64, ..Default::default() });
    let runner = Runner::new(model, &w, backend, ro).expect("runner");
    // Room for every slot's request plus a few waiting (load tests fill all slots at once).
    let queue_capacity = (4 * parallel).max(8);
    let sched = Scheduler::spawn(runner, SchedulerOptions { queue_capacity, ..Default::default() }).expect("sched");
    let mut opts = ServerOptions::new(name);
    configure(&mut opts);
    let state = infr_server::state(sched, TextModel::new(tok, template), opts);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            infr_server::serve(listener, state, std::future::pending()).await.unwrap();
        });
    });
    let addr = rx.recv_timeout(Duration::from_secs(60)).expect("server started");
    Some(format!("http://{addr}"))
}

/// An HTTP client with a generous timeout (CPU generation).
pub fn client() -> reqwest::Client {
    // reqwest is built without a default TLS provider (see the workspace's Cargo.toml).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap()
}

/// POST `body` as JSON; the status and the JSON answer.
pub async fn post(url: String, body: &Value) -> (u16, Value) {
    let r = client().post(url).json(body).send().await.expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.expect("json body"))
}

/// SSE events of a streamed response (status 200, `text/event-stream`): (event name, data).
pub async fn sse(url: String, body: &Value) -> Vec<(Option<String>, String)> {
    let r = client().post(url).json(body).send().await.expect("request");
    assert_eq!(r.status().as_u16(), 200);
    let ct = r.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    parse_sse(&r.text().await.expect("stream"))
}

/// Split an SSE body into (event name, data) pairs; multi-line data is joined with newlines.
pub fn parse_sse(text: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut event = None;
        let mut data = Vec::new();
        for line in block.lines() {
            if let Some(e) = line.strip_prefix("event:") {
                event = Some(e.trim().to_owned());
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push(d.strip_prefix(' ').unwrap_or(d).to_owned());
            }
        }
        if !data.is_empty() {
            out.push((event, data.join("\n")));
        }
    }
    out
}

/// A tool whose arguments a random-weight model can finish under a forced-call grammar: a
/// string enum, an integer and an optional flag (a free string would run to `max_tokens`).
pub fn forecast_tool() -> Value {
    serde_json::json!({"type": "function", "function": {
        "name": "forecast",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "enum": ["Paris", "Berlin"]},
            "days": {"type": "integer"},
            "metric": {"type": "boolean"},
        }, "required": ["city", "days"]},
    }})
}

/// Check that chat completion `v` (200, `what` names the case) ended in exactly one call of
/// [`forecast_tool`] with typed arguments; returns the call.
pub fn assert_forecast_call(status: u16, v: &Value, what: &str) -> Value {
    assert_eq!(status, 200, "{what}: {v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{what}: {v}");
    let calls = v["choices"][0]["message"]["tool_calls"].as_array().expect("tool calls");
    assert_eq!(calls.len(), 1, "{what}: {v}");
    let f = &calls[0]["function"];
    assert_eq!(f["name"], "forecast", "{what}: {v}");
    let args: Value = serde_json::from_str(f["arguments"].as_str().expect("arguments")).expect("JSON arguments");
    assert!(["Paris", "Berlin"].contains(&args["city"].as_str().unwrap_or("")), "{what}: {args}");
    assert!(args["days"].is_i64(), "{what}: {args}");
    assert!(args.get("metric").is_none_or(Value::is_boolean), "{what}: {args}");
    calls[0].clone()
}
