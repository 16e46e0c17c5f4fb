//! Prometheus metrics at `GET /metrics` (`infr serve --metrics`), in the text exposition
//! format. The set follows what llama.cpp's server exposes (`llamacpp:prompt_tokens_total`,
//! `llamacpp:tokens_predicted_total`, `llamacpp:requests_processing`, ...) under `infr_` names,
//! plus per-endpoint request counts and latency histograms.
//!
//! Requests and generations are counted with relaxed atomics (no lock on the request path);
//! the only lock is taken by the scrape itself, for the throughput window. Counting happens
//! whether or not `/metrics` is served. Like the `/v1/*` routes, `/metrics` needs the API key
//! when one is set (llama.cpp gates it the same way).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::errors::{ApiError, OpenAiError};
use crate::generate::Outcome;
use crate::state::SharedState;

/// Endpoint labels of `infr_requests_total` (the last one is everything else).
pub const ENDPOINTS: [&str; 9] =
    ["chat_completions", "completions", "messages", "count_tokens", "models", "props", "health", "metrics", "other"];

/// Status codes counted one by one; any other is counted as `other`.
const STATUSES: [u16; 12] = [200, 400, 401, 404, 405, 408, 413, 415, 422, 500, 501, 503];

/// Bucket bounds (seconds) of `infr_request_seconds`.
const REQUEST_BOUNDS: &[f64] = &[0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0];
/// Bucket bounds (seconds) of `infr_time_to_first_token_seconds`.
const TTFT_BOUNDS: &[f64] = &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// The endpoint label index of a request path.
pub fn endpoint_of(path: &str) -> usize {
    let name = match path {
        "/v1/chat/completions" | "/chat/completions" => "chat_completions",
        "/v1/completions" | "/completions" => "completions",
        "/v1/messages" => "messages",
        "/v1/messages/count_tokens" => "count_tokens",
        "/v1/models" | "/models" => "models",
        "/props" => "props",
        "/health" | "/v1/health" => "health",
        "/metrics" => "metrics",
        _ => "other",
    };
    ENDPOINTS.iter().position(|e| *e == name).unwrap_or(ENDPOINTS.len() - 1)
}

/// A histogram of seconds with fixed bounds.
#[derive(Debug)]
struct Histogram {
    bounds: &'static [f64],
    /// Per bucket (not cumulative); the last is `+Inf`.
    counts: Vec<AtomicU64>,
    sum_us: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self { bounds, counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(), sum_us: AtomicU64::new(0) }
    }

    fn observe(&self, secs: f64) {
        let i = self.bounds.iter().position(|b| secs <= *b).unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut total = 0;
        for (i, c) in self.counts.iter().enumerate() {
            total += c.load(Ordering::Relaxed);
            match self.bounds.get(i) {
                Some(b) => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {total}");
                }
                None => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {total}");
                }
            }
        }
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {total}");
    }
}

/// The throughput window: generated tokens at the previous scrape.
#[derive(Debug)]
struct Window {
    at: Instant,
    generated: u64,
    tps: f64,
}

/// Counters, gauges' sources and histograms of one server.
#[derive(Debug)]
pub struct Metrics {
    /// `[endpoint][status]`; the last status column is `other`.
    requests: Vec<Vec<AtomicU64>>,
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    prompt_us: AtomicU64,
    decode_us: AtomicU64,
    request_seconds: Histogram,
    ttft_seconds: Histogram,
    window: Mutex<Window>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// All zero.
    pub fn new() -> Self {
        let row = || (0..=STATUSES.len()).map(|_| AtomicU64::new(0)).collect();
        Self {
            requests: (0..ENDPOINTS.len()).map(|_| row()).collect(),
            prompt_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            generated_tokens: AtomicU64::new(0),
            prompt_us: AtomicU64::new(0),
            decode_us: AtomicU64::new(0),
            request_seconds: Histogram::new(REQUEST_BOUNDS),
            ttft_seconds: Histogram::new(TTFT_BOUNDS),
            window: Mutex::new(Window { at: Instant::now(), generated: 0, tps: 0.0 }),
        }
    }

    /// Count one answered request.
    pub fn count_request(&self, endpoint: usize, status: u16) {
        let col = STATUSES.iter().position(|s| *s == status).unwrap_or(STATUSES.len());
        if let Some(c) = self.requests.get(endpoint).and_then(|r| r.get(col)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Count the tokens of a generation that ended in any way (finished, failed, cancelled).
    pub fn count_tokens(&self, prompt: usize, cached: usize, generated: usize) {
        self.prompt_tokens.fetch_add(prompt as u64, Ordering::Relaxed);
        self.cached_tokens.fetch_add(cached as u64, Ordering::Relaxed);
        self.generated_tokens.fetch_add(generated as u64, Ordering::Relaxed);
    }

    /// Record a finished generation: its tokens, timings and latencies.
    pub fn finished(&self, o: &Outcome) {
        self.count_tokens(o.prompt_tokens, o.cached_tokens, o.completion_tokens);
        self.prompt_us.fetch_add(o.prompt_time.as_micros() as u64, Ordering::Relaxed);
        self.decode_us.fetch_add(o.decode_time.as_micros() as u64, Ordering::Relaxed);
        let ttft = o.queue_wait + o.prompt_time;
        self.request_seconds.observe((ttft + o.decode_time).as_secs_f64());
        if o.completion_tokens > 0 {
            self.ttft_seconds.observe(ttft.as_secs_f64());
        }
    }

    /// The text exposition of everything, with the scheduler's gauges.
    pub fn render(&self, sched: &infr_engine::SchedulerStats) -> String {
        let mut out = String::with_capacity(4096);
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP infr_requests_total HTTP requests answered, by endpoint and status code.\n\
             # TYPE infr_requests_total counter"
        );
        for (e, row) in self.requests.iter().enumerate() {
            for (s, c) in row.iter().enumerate() {
                let n = load(c);
                if n == 0 {
                    continue;
                }
                let status = STATUSES.get(s).map_or_else(|| "other".to_owned(), u16::to_string);
                let _ = writeln!(out, "infr_requests_total{{endpoint=\"{}\",status=\"{status}\"}} {n}", ENDPOINTS[e]);
            }
        }
        let counter = |out: &mut String, name: &str, help: &str, v: String| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
        let gauge = |out: &mut String, name: &str, help: &str, v: String| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        let generated = load(&self.generated_tokens);
        counter(&mut out, "infr_prompt_tokens_total", "Prompt tokens of generations, cached ones included.", {
            load(&self.prompt_tokens).to_string()
        });
        counter(&mut out, "infr_cached_prompt_tokens_total", "Prompt tokens reused from a slot's cache.", {
            load(&self.cached_tokens).to_string()
        });
        counter(&mut out, "infr_generated_tokens_total", "Tokens generated.", generated.to_string());
        let secs = |us: u64| (us as f64 / 1e6).to_string();
        counter(&mut out, "infr_prompt_seconds_total", "Prompt processing time.", secs(load(&self.prompt_us)));
        counter(&mut out, "infr_decode_seconds_total", "Time from first to last token, summed.", {
            secs(load(&self.decode_us))
        });
        counter(&mut out, "infr_tokens_computed_total", "Tokens run through the model.", {
            sched.tokens_computed.to_string()
        });
        counter(&mut out, "infr_steps_total", "Forward steps of the scheduler.", sched.steps.to_string());
        gauge(&mut out, "infr_requests_running", "Requests holding a slot.", sched.active.to_string());
        gauge(&mut out, "infr_requests_queued", "Requests waiting for a slot.", sched.queued.to_string());
        gauge(&mut out, "infr_slots_total", "Slots (requests served at once).", sched.slots.to_string());
        let tps = self.window_tps(generated);
        gauge(
            &mut out,
            "infr_generation_tokens_per_second",
            "Tokens generated per second of wall time between the two latest scrapes.",
            tps.to_string(),
        );
        self.request_seconds.render(
            &mut out,
            "infr_request_seconds",
            "Time from submission to the last token of finished generations.",
        );
        self.ttft_seconds.render(
            &mut out,
            "infr_time_to_first_token_seconds",
            "Time from submission to the first token (queue wait and prompt).",
        );
        out
    }

    /// Generated tokens per second since the previous scrape (the first: since the start). A
    /// scrape within a second of the previous one repeats its value.
    fn window_tps(&self, generated: u64) -> f64 {
        let mut w = match self.window.lock() {
            Ok(w) => w,
            Err(poisoned) => poisoned.into_inner(),
        };
        let dt = w.at.elapsed().as_secs_f64();
        if dt >= 1.0 {
            w.tps = generated.saturating_sub(w.generated) as f64 / dt;
            w.at = Instant::now();
            w.generated = generated;
        }
        w.tps
    }
}

/// Middleware counting every answered request by endpoint and status.
pub async fn track(State(st): State<SharedState>, req: Request, next: Next) -> Response {
    let endpoint = endpoint_of(req.uri().path());
    let resp = next.run(req).await;
    st.metrics.count_request(endpoint, resp.status().as_u16());
    resp
}

/// `GET /metrics`: the text exposition, or 501 when the server runs without `--metrics`.
pub async fn handler(State(st): State<SharedState>) -> Response {
    if !st.opts.metrics {
        return OpenAiError(ApiError::NotSupported(
            "metrics are off: start the server with --metrics (config server.metrics = true)".into(),
        ))
        .into_response();
    }
    let body = st.metrics.render(&st.sched.stats());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::generate::FinishKind;

    fn stats() -> infr_engine::SchedulerStats {
        infr_engine::SchedulerStats {
            slots: 2,
            active: 1,
            queued: 0,
            tokens_computed: 40,
            steps: 9,
            plans_built: 3,
            memory_available: None,
        }
    }

    /// `name{labels} value` of each sample line; panics on a malformed line.
    fn samples(text: &str) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (name, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
            let v: f64 = value.parse().unwrap_or_else(|_| panic!("bad value: {line}"));
            let bare = name.split('{').next().unwrap_or("");
            assert!(bare.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "bad name: {line}");
            assert_eq!(name.contains('{'), name.ends_with('}'), "bad labels: {line}");
            out.push((name.to_owned(), v));
        }
        out
    }

    fn get(s: &[(String, f64)], name: &str) -> f64 {
        s.iter().find(|(n, _)| n == name).map(|(_, v)| *v).unwrap_or_else(|| panic!("no {name}"))
    }

    #[test]
    fn counts_and_renders() {
        let m = Metrics::new();
        m.count_request(endpoint_of("/v1/chat/completions"), 200);
        m.count_request(endpoint_of("/v1/chat/completions"), 200);
        m.count_request(endpoint_of("/nope"), 404);
        m.count_request(endpoint_of("/v1/messages"), 418);
        m.finished(&Outcome {
            finish: FinishKind::Stop,
            prompt_tokens: 12,
            cached_tokens: 2,
            completion_tokens: 5,
            queue_wait: Duration::from_millis(10),
            prompt_time: Duration::from_millis(30),
            decode_time: Duration::from_millis(200),
        });
        m.count_tokens(3, 0, 1);
        let text = m.render(&stats());
        let s = samples(&text);
        assert_eq!(get(&s, "infr_requests_total{endpoint=\"chat_completions\",status=\"200\"}"), 2.0);
        assert_eq!(get(&s, "infr_requests_total{endpoint=\"other\",status=\"404\"}"), 1.0);
        assert_eq!(get(&s, "infr_requests_total{endpoint=\"messages\",status=\"other\"}"), 1.0);
        assert_eq!(get(&s, "infr_prompt_tokens_total"), 15.0);
        assert_eq!(get(&s, "infr_cached_prompt_tokens_total"), 2.0);
        assert_eq!(get(&s, "infr_generated_tokens_total"), 6.0);
        assert_eq!(get(&s, "infr_slots_total"), 2.0);
        assert_eq!(get(&s, "infr_requests_running"), 1.0);
        assert_eq!(get(&s, "infr_request_seconds_count"), 1.0);
        assert_eq!(get(&s, "infr_request_seconds_bucket{le=\"0.1\"}"), 0.0);
        assert_eq!(get(&s, "infr_request_seconds_bucket{le=\"0.25\"}"), 1.0);
        assert_eq!(get(&s, "infr_request_seconds_bucket{le=\"+Inf\"}"), 1.0);
        assert!((get(&s, "infr_request_seconds_sum") - 0.24).abs() < 1e-9);
        assert_eq!(get(&s, "infr_time_to_first_token_seconds_bucket{le=\"0.05\"}"), 1.0);
        assert_eq!(get(&s, "infr_time_to_first_token_seconds_bucket{le=\"0.025\"}"), 0.0);
        assert!(text.contains("# TYPE infr_generation_tokens_per_second gauge"));
        assert!(text.contains("# TYPE infr_request_seconds histogram"));
    }

    #[test]
    fn endpoints() {
        assert_eq!(ENDPOINTS[endpoint_of("/chat/completions")], "chat_completions");
        assert_eq!(ENDPOINTS[endpoint_of("/v1/messages/count_tokens")], "count_tokens");
        assert_eq!(ENDPOINTS[endpoint_of("/metrics")], "metrics");
        assert_eq!(ENDPOINTS[endpoint_of("/x")], "other");
    }
}
