//! `/health`, `/props` and the fallback for unknown routes.

use axum::extract::State;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::errors::{ApiError, OpenAiError};
use crate::state::SharedState;

/// `GET /health`: always open; reports the slots' load.
pub async fn health(State(st): State<SharedState>) -> Response {
    let s = st.sched.stats();
    let body = |status: &str| {
        Json(
            json!({ "status": status, "slots_idle": s.slots - s.active, "slots_processing": s.active, "queued": s.queued }),
        )
    };
    // A draining server answers 503 so that load balancers stop sending to it.
    if st.sched.is_draining() {
        return (axum::http::StatusCode::SERVICE_UNAVAILABLE, body("draining")).into_response();
    }
    body("ok").into_response()
}

/// The chat page served at `GET /` to browsers (`static/chat.html`: streams from
/// `/v1/chat/completions`, renders markdown, stop button, tokens/s).
const CHAT_PAGE: &str = include_str!("static/chat.html");

/// `GET /` (and `HEAD /`, which uptime checks and gateways probe): the chat page for a browser
/// (a request that accepts HTML), else a line saying what this server is.
pub async fn index(State(st): State<SharedState>, headers: axum::http::HeaderMap) -> Response {
    use axum::http::header;
    let html = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"));
    if html {
        let h = [(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")];
        return (h, CHAT_PAGE).into_response();
    }
    let text = format!(
        "infr serve: {} (OpenAI API at /v1/chat/completions and /v1/completions, Anthropic API at \
         /v1/messages, health at /health)\n",
        st.opts.model_id
    );
    ([(axum::http::header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
}

/// `GET /props`: llama.cpp's server properties.
pub async fn props(State(st): State<SharedState>) -> Json<Value> {
    let d = &st.opts.default_sampling;
    let n_ctx = st.sched.n_ctx();
    Json(json!({
        "n_ctx": n_ctx,
        "total_slots": st.sched.slots(),
        "model_alias": st.opts.model_id,
        "model_path": st.opts.model_path,
        "chat_template": st.text.template().source(),
        "default_generation_settings": {
            "n_ctx": n_ctx,
            "params": {
                "temperature": d.temperature,
                "top_k": d.top_k,
                "top_p": d.top_p,
                "min_p": d.min_p,
                "repeat_penalty": d.repeat_penalty,
                "repeat_last_n": d.repeat_last_n,
                "presence_penalty": d.presence_penalty,
                "frequency_penalty": d.frequency_penalty,
                "n_predict": -1,
            },
        },
    }))
}

/// Unknown routes: 404 in OpenAI's shape.
pub async fn not_found(uri: Uri) -> Response {
    OpenAiError(ApiError::NotFound(format!("no route for {}", uri.path()))).into_response()
}
