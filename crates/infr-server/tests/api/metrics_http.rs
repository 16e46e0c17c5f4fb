//! `/metrics` on the real server (smollm2 on the CPU): counters move by what a request used,
//! the text parses as Prometheus exposition, the route needs the API key, and it answers 501
//! when the server runs without metrics.

use crate::server;

use std::collections::HashMap;

use serde_json::{json, Value};
use server::{client, start_server_custom};

const MODEL: &str = "smollm2-135m-instruct-q4_1";
const KEY: &str = "sk-metrics";

/// Parse the exposition: `name{labels} value` per sample line (panics on anything else).
fn parse(text: &str) -> HashMap<String, f64> {
    let mut out = HashMap::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment: {line}");
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        let v: f64 = value.parse().unwrap_or_else(|_| panic!("bad value: {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, Some(rest.strip_suffix('}').unwrap_or_else(|| panic!("bad labels: {line}")))),
            None => (series, None),
        };
        assert!(!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "bad name: {line}");
        for pair in labels.into_iter().flat_map(|l| l.split(',')) {
            let (k, v) = pair.split_once('=').unwrap_or_else(|| panic!("bad label: {line}"));
            assert!(k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "bad label name: {line}");
            assert!(v.len() >= 2 && v.starts_with('"') && v.ends_with('"'), "unquoted label: {line}");
        }
        assert!(out.insert(series.to_owned(), v).is_none(), "duplicate series: {line}");
    }
    out
}

async fn scrape(base: &str) -> HashMap<String, f64> {
    let r = client().get(format!("{base}/metrics")).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let ct = r.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(ct.starts_with("text/plain"), "{ct}");
    parse(&r.text().await.unwrap())
}

fn get(m: &HashMap<String, f64>, series: &str) -> f64 {
    m.get(series).copied().unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_a_chat_request() {
    let Some(base) = start_server_custom(MODEL, 1, 1024, None, |o| {
        o.metrics = true;
        o.api_key = Some(KEY.into());
    }) else {
        return;
    };
    // Gated like /v1/*: no key, 401 (and that request is counted too).
    let r = client().get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);

    let before = scrape(&base).await;
    let body = json!({
        "messages": [{"role": "user", "content": "Name a color."}],
        "max_tokens": 6,
        "temperature": 0,
    });
    let r = client().post(format!("{base}/v1/chat/completions")).bearer_auth(KEY).json(&body).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    let usage = &v["usage"];
    let after = scrape(&base).await;

    let delta = |s: &str| get(&after, s) - get(&before, s);
    assert_eq!(delta("infr_requests_total{endpoint=\"chat_completions\",status=\"200\"}"), 1.0);
    assert_eq!(get(&after, "infr_requests_total{endpoint=\"metrics\",status=\"401\"}"), 1.0);
    // The first scrape is counted by the second.
    assert_eq!(get(&after, "infr_requests_total{endpoint=\"metrics\",status=\"200\"}"), 1.0);
    assert_eq!(delta("infr_prompt_tokens_total"), usage["prompt_tokens"].as_f64().unwrap());
    assert_eq!(delta("infr_generated_tokens_total"), usage["completion_tokens"].as_f64().unwrap());
    let cached = usage["prompt_tokens_details"]["cached_tokens"].as_f64().unwrap();
    assert_eq!(delta("infr_cached_prompt_tokens_total"), cached);
    assert_eq!(delta("infr_request_seconds_count"), 1.0);
    assert_eq!(delta("infr_time_to_first_token_seconds_count"), 1.0);
    assert_eq!(get(&after, "infr_request_seconds_bucket{le=\"+Inf\"}"), get(&after, "infr_request_seconds_count"));
    assert!(delta("infr_request_seconds_sum") > 0.0);
    assert!(delta("infr_tokens_computed_total") >= 1.0);
    assert_eq!(get(&after, "infr_slots_total"), 1.0);
    assert_eq!(get(&after, "infr_requests_running"), 0.0);
    assert_eq!(get(&after, "infr_requests_queued"), 0.0);
    assert!(after.contains_key("infr_generation_tokens_per_second"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_off_is_a_clear_501() {
    let Some(base) = start_server_custom(MODEL, 1, 256, None, |_| {}) else { return };
    let r = client().get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 501);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "not_supported_error");
    assert!(v["error"]["message"].as_str().unwrap().contains("--metrics"), "{v}");
}
