//! Server-sent events: turns the driver's [`Piece`]s into SSE events with a per-endpoint
//! formatter. Dropping the response body (client gone) drops the piece receiver, which
//! cancels the generation.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use serde::Serialize;
use tokio::sync::mpsc;

use crate::generate::Piece;

/// A `data: {json}` event.
pub fn data<T: Serialize>(value: &T) -> Event {
    Event::default().data(serde_json::to_string(value).unwrap_or_else(|_| "{}".into()))
}

/// An `event: NAME` + `data: {json}` event (Anthropic's style).
pub fn named<T: Serialize>(name: &str, value: &T) -> Event {
    Event::default().event(name).data(serde_json::to_string(value).unwrap_or_else(|_| "{}".into()))
}

/// OpenAI's terminator, `data: [DONE]`.
pub fn done() -> Event {
    Event::default().data("[DONE]")
}

/// One event as a response formatter produces it (inspectable in tests, unlike [`Event`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// `data: {json}`.
    Data(serde_json::Value),
    /// `event: NAME` + `data: {json}`.
    Named(&'static str, serde_json::Value),
    /// `data: [DONE]`.
    Done,
}

impl Out {
    /// The wire event.
    pub fn into_event(self) -> Event {
        match self {
            Out::Data(v) => data(&v),
            Out::Named(n, v) => named(n, &v),
            Out::Done => done(),
        }
    }
}

/// How often a stream with nothing to send shows the client it is alive (a long prompt's
/// prefill sends nothing until the first token; clients give up on silent streams).
pub const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// What a quiet stream sends every [`KEEP_ALIVE`]: an SSE comment (OpenAI), or the API's own
/// event (Anthropic's `event: ping`, which its clients count as activity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    Comment,
    AnthropicPing,
}

/// Stream `rx` as SSE, formatting each piece with `fmt`; the stream ends after the piece that
/// ends the generation.
pub fn respond<F>(rx: mpsc::Receiver<Piece>, fmt: F) -> Response
where
    F: FnMut(Piece) -> Vec<Event> + Send + 'static,
{
    respond_with(rx, fmt, Heartbeat::Comment)
}

/// [`respond`] with a chosen heartbeat.
pub fn respond_with<F>(rx: mpsc::Receiver<Piece>, fmt: F, heartbeat: Heartbeat) -> Response
where
    F: FnMut(Piece) -> Vec<Event> + Send + 'static,
{
    let events = stream::unfold((rx, fmt, false), |(mut rx, mut fmt, ended)| async move {
        if ended {
            return None;
        }
        let p = rx.recv().await?;
        let end = matches!(p, Piece::End(_) | Piece::Failed(_));
        Some((fmt(p), (rx, fmt, end)))
    })
    .flat_map(|evs| stream::iter(evs.into_iter().map(Ok::<Event, Infallible>)));
    let keep_alive = KeepAlive::new().interval(KEEP_ALIVE);
    let keep_alive = match heartbeat {
        Heartbeat::Comment => keep_alive,
        Heartbeat::AnthropicPing => keep_alive.event(named("ping", &serde_json::json!({"type": "ping"}))),
    };
    let mut resp = Sse::new(events).keep_alive(keep_alive).into_response();
    resp.headers_mut().insert("x-accel-buffering", axum::http::HeaderValue::from_static("no"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Claude Code drops a stream that sends no events for a while: during a long prefill the
    /// Anthropic stream sends `event: ping`, the OpenAI one SSE comments.
    #[tokio::test]
    async fn quiet_streams_send_heartbeats() {
        for (hb, want) in
            [(Heartbeat::AnthropicPing, "event: ping\ndata: {\"type\":\"ping\"}"), (Heartbeat::Comment, ":")]
        {
            let (tx, rx) = mpsc::channel::<Piece>(1);
            let resp = respond_with(rx, |_| Vec::new(), hb);
            let mut body = resp.into_body().into_data_stream();
            let first = tokio::time::timeout(KEEP_ALIVE * 2, body.next()).await.expect("a heartbeat in time");
            let bytes = first.expect("a frame").expect("body bytes");
            let text = String::from_utf8_lossy(&bytes);
            assert!(text.starts_with(want), "{hb:?}: {text:?}");
            drop(tx);
        }
    }
}
