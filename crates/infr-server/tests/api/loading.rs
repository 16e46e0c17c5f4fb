//! Agent-clients issue (scale-out): a server listens before its model is ready. `/health`
//! answers 503 `"loading"` and every other route 503 in its API's shape until the load
//! finishes, then the model's routes answer; a failed load ends the server with its error.

use crate::server;

use std::time::Duration;

use infr_core::GgufWeights;
use infr_cpu::{CpuBackend, CpuOptions, KernelTier};
use infr_engine::{Runner, RunnerOptions, Scheduler, SchedulerOptions};
use infr_server::loading::{serve_while_loading, Ready};
use infr_server::{ServerOptions, TextModel};
use infr_tokenizer::chat::ChatTemplate;

/// A one-slot state for the qwen3 synth model.
fn state() -> infr_server::SharedState {
    let path = server::model_path("synth:qwen3").unwrap();
    let w = GgufWeights::open(&path).unwrap();
    let meta = infr_core::WeightSource::metadata(&w);
    let tok = infr_tokenizer::Tokenizer::from_metadata(meta).unwrap();
    let template = ChatTemplate::for_model(meta).unwrap();
    let model = infr_models::load_model(&w).unwrap();
    let backend = Box::new(CpuBackend::new(CpuOptions { threads: 1, tier: KernelTier::Fast }).unwrap());
    let runner = Runner::new(model, &w, backend, RunnerOptions { n_ctx: 4096, ..Default::default() }).unwrap();
    let sched = Scheduler::spawn(runner, SchedulerOptions::default()).unwrap();
    infr_server::state(sched, TextModel::new(tok, template), ServerOptions::new("qwen3"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_503_until_the_model_is_ready() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let load = move || {
        go_rx.recv().map_err(|e| e.to_string())?;
        Ok(Ready::one(state()))
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve_while_loading(
        listener,
        load,
        || {},
        async {
            let _ = stop_rx.await;
        },
        Some(Duration::from_secs(5)),
    ));
    let c = server::client();
    let r = c.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["status"], "loading");
    let r = c.post(format!("{base}/v1/completions")).json(&serde_json::json!({"prompt": "x"})).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.json::<serde_json::Value>().await.unwrap()["error"]["message"].as_str().unwrap().contains("loading"));
    let r = c.post(format!("{base}/v1/messages")).json(&serde_json::json!({})).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["type"], "error");
    // Loaded: the model's routes.
    go_tx.send(()).unwrap();
    let mut ready = false;
    for _ in 0..200 {
        if c.get(format!("{base}/health")).send().await.unwrap().status() == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(ready, "the server became ready");
    let body = serde_json::json!({"prompt": "aa", "max_tokens": 2});
    let r = c.post(format!("{base}/v1/completions")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // Draining (a request still running): /health says so, and the request completes.
    let long = {
        let (c, base) = (c.clone(), base.clone());
        tokio::spawn(async move {
            let body = serde_json::json!({"prompt": "aa ab", "max_tokens": 3000, "temperature": 0});
            c.post(format!("{base}/v1/completions")).json(&body).send().await.unwrap().status()
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    stop_tx.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = c.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["status"], "draining");
    assert_eq!(long.await.unwrap(), 200);
    assert!(server.await.unwrap().is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_load_ends_the_server() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let load = || -> Result<Ready, String> { panic!("driver assertion") };
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        serve_while_loading(listener, load, || {}, std::future::pending(), Some(Duration::from_secs(1))),
    )
    .await
    .expect("ends rather than loading forever");
    assert!(r.unwrap_err().contains("loading the model failed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_load_ends_the_server_with_its_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let load = || Err("the model file is truncated".to_owned());
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        serve_while_loading(listener, load, || {}, std::future::pending(), Some(Duration::from_secs(1))),
    )
    .await
    .expect("ends");
    assert_eq!(r, Err("the model file is truncated".to_owned()));
}
