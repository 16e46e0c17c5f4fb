//! infr's HTTP server: OpenAI- and Anthropic-compatible endpoints over the engine's
//! continuous-batching [`Scheduler`](infr_engine::Scheduler).
//!
//! | route | |
//! | --- | --- |
//! | `GET /health` | liveness and slot load; never needs the API key |
//! | `GET /v1/models` | the one served model (id = the file stem, `context_length` = a slot's context) |
//! | `POST /v1/chat/completions` | chat, plain or SSE (`stream_options.include_usage` supported) |
//! | `POST /v1/completions` | raw text prompt, plain or SSE |
//! | `POST /v1/messages` | Anthropic messages, plain or SSE events |
//! | `POST /v1/messages/count_tokens` | prompt length of an Anthropic request |
//! | `GET /props` | llama.cpp-style server properties |
//! | `GET /metrics` | Prometheus metrics with `--metrics` (else 501); needs the API key like `/v1/*` |
//!
//! Tool calls (OpenAI `tools` / Anthropic `tools`) are rendered through the chat template and
//! parsed out of the reply in the model family's dialect (see [`tools`]). Reasoning
//! (`<think>...</think>`) is split off into `reasoning_content` / a `thinking` block first (see
//! [`reasoning`] and [`reply`]).
//!
//! The `model` field of requests is ignored (as llama.cpp's server does): the loaded model
//! answers whatever name is asked for, and responses carry its id. With an API key set, every
//! route except `/health` requires it (`Authorization: Bearer KEY` or `x-api-key: KEY`).

pub mod auth;
pub mod errors;
pub mod generate;
pub mod listen;
pub mod loading;
pub mod metrics;
pub mod multi;
pub mod params;
pub mod reasoning;
pub mod reply;
pub mod response_format;
pub mod routes_anthropic;
pub mod routes_misc;
pub mod routes_openai;
pub mod sse;
pub mod state;
pub mod stop;
pub mod text;
pub mod tools;

use std::future::Future;
use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

pub use errors::ApiError;
pub use reasoning::ReasoningFormat;
pub use state::{AppState, ServerOptions, SharedState};
pub use text::TextModel;

/// Largest request body accepted (16 MiB).
pub const MAX_BODY_BYTES: usize = 16 << 20;

/// The shared state of a server over `sched`.
pub fn state(sched: infr_engine::SchedulerHandle, text: TextModel, opts: ServerOptions) -> SharedState {
    Arc::new(AppState::new(sched, text, opts))
}

/// All routes, with the API-key check on everything but `/health`, and request counting.
pub fn router(state: SharedState) -> Router {
    let gated = Router::new()
        .route("/v1/models", get(routes_openai::models))
        .route("/models", get(routes_openai::models))
        .route("/v1/models/{id}", get(routes_openai::model))
        .route("/v1/chat/completions", post(routes_openai::chat_completions))
        .route("/chat/completions", post(routes_openai::chat_completions))
        .route("/v1/completions", post(routes_openai::completions))
        .route("/completions", post(routes_openai::completions))
        .route("/v1/messages", post(routes_anthropic::messages))
        .route("/v1/messages/count_tokens", post(routes_anthropic::count_tokens))
        .route("/props", get(routes_misc::props))
        .route("/metrics", get(metrics::handler))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_key));
    Router::new()
        .route("/", get(routes_misc::index))
        .route("/health", get(routes_misc::health))
        .route("/v1/health", get(routes_misc::health))
        .merge(gated)
        .fallback(routes_misc::not_found)
        .layer(axum::middleware::from_fn_with_state(state.clone(), metrics::track))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(reject_oversized))
        .with_state(state)
}

/// Answer 413 (in the route's API shape) to a request whose Content-Length is over
/// [`MAX_BODY_BYTES`] before its body is read: a client that sent `Expect: 100-continue` is
/// told at once instead of being invited to upload it.
async fn reject_oversized(req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::response::IntoResponse;
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        let e = errors::ApiError::TooLarge(format!("request body is larger than {MAX_BODY_BYTES} bytes"));
        return if req.uri().path().starts_with("/v1/messages") {
            errors::AnthropicError(e).into_response()
        } else {
            errors::OpenAiError(e).into_response()
        };
    }
    next.run(req).await
}

/// [`serve_graceful`] for several models behind one listener ([`multi::multi_router`]): the
/// shutdown drains every model's scheduler.
pub async fn serve_multi_graceful(
    listener: tokio::net::TcpListener,
    models: Vec<(String, SharedState)>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Option<std::time::Duration>,
) -> std::io::Result<()> {
    let scheds: Vec<_> = models.iter().map(|(_, st)| st.sched.clone()).collect();
    let drain = scheds.clone();
    let shutdown = async move {
        shutdown.await;
        drain.iter().for_each(|s| s.drain());
    };
    let limits = listen::Limits { grace, ..listen::Limits::default() };
    listen::serve_with(listener, multi::multi_router(models), shutdown, limits, move || {
        scheds.iter().for_each(|s| s.end_running())
    })
    .await
}

/// Serve on `listener` until `shutdown` resolves, then let the requests in flight finish
/// (without a time limit; see [`serve_graceful`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: SharedState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_graceful(listener, state, shutdown, None).await
}

/// Serve on `listener` until `shutdown` resolves, then shut down gracefully: stop accepting
/// connections, refuse queued and new requests (503), let running generations finish for up to
/// `grace` (unbounded if `None`), then end those still running with a final event
/// (`finish_reason: length` / `stop_reason: max_tokens`) and return once their streams close.
pub async fn serve_graceful(
    listener: tokio::net::TcpListener,
    state: SharedState,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Option<std::time::Duration>,
) -> std::io::Result<()> {
    let sched = state.sched.clone();
    let drain = sched.clone();
    let shutdown = async move {
        shutdown.await;
        drain.drain();
    };
    let limits = listen::Limits { grace, ..listen::Limits::default() };
    listen::serve_with(listener, router(state), shutdown, limits, move || sched.end_running()).await
}
