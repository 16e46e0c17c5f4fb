//! Anthropic-compatible endpoints: `/v1/messages` (plain and streaming) and
//! `/v1/messages/count_tokens`.
//!
//! Usage follows Anthropic's meaning: `input_tokens` counts the prompt tokens computed for this
//! request and `cache_read_input_tokens` those reused from the slot's cache (their sum is the
//! prompt length).

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use infr_tokenizer::chat::ChatMessage;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::errors::{parse_json, AnthropicError, ApiError};
use crate::generate::{self, Outcome, Piece};
use crate::params::Knobs;
use crate::sse;
use crate::state::SharedState;

/// One content block; only text is rendered (thinking blocks are dropped).
#[derive(Debug, Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

/// Content: a string or a list of blocks.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

#[derive(Debug, Deserialize)]
struct Message {
    role: String,
    content: Content,
}

/// Fields of `/v1/messages` and `/v1/messages/count_tokens` (unknown fields are ignored).
#[derive(Debug, Deserialize)]
struct MessagesRequest {
    messages: Vec<Message>,
    #[serde(default)]
    system: Option<Content>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_p: Option<f32>,
    #[serde(default)]
    top_k: Option<i32>,
    #[serde(default)]
    min_p: Option<f32>,
    #[serde(default)]
    seed: Option<i64>,
}

/// The text of `content`; `what` names the field in errors.
fn content_text(content: Content, what: &str) -> Result<String, ApiError> {
    match content {
        Content::Text(s) => Ok(s),
        Content::Blocks(blocks) => {
            let mut parts = Vec::new();
            for (i, b) in blocks.into_iter().enumerate() {
                match b.kind.as_str() {
                    "text" => parts.push(b.text.unwrap_or_default()),
                    "thinking" | "redacted_thinking" => {}
                    other => {
                        return Err(ApiError::bad(
                            format!("content blocks of type '{other}' are not supported (only text)"),
                            format!("{what}[{i}].type"),
                        ))
                    }
                }
            }
            Ok(parts.join("\n"))
        }
    }
}

/// The conversation as chat-template messages.
fn conversation(req: &mut MessagesRequest) -> Result<Vec<ChatMessage>, ApiError> {
    let mut out = Vec::new();
    if let Some(system) = req.system.take() {
        out.push(ChatMessage::system(content_text(system, "system")?));
    }
    for (i, m) in std::mem::take(&mut req.messages).into_iter().enumerate() {
        if m.role != "user" && m.role != "assistant" {
            return Err(ApiError::bad(
                format!("messages[{i}].role must be 'user' or 'assistant', not '{}'", m.role),
                format!("messages[{i}].role"),
            ));
        }
        let text = content_text(m.content, &format!("messages[{i}].content"))?;
        out.push(ChatMessage::new(m.role, text));
    }
    if out.iter().all(|m| m.role == "system") {
        return Err(ApiError::bad("messages must not be empty", "messages"));
    }
    Ok(out)
}

fn usage_json(o: &Outcome) -> Value {
    json!({
        "input_tokens": o.prompt_tokens - o.cached_tokens,
        "cache_read_input_tokens": o.cached_tokens,
        "cache_creation_input_tokens": 0,
        "output_tokens": o.completion_tokens,
    })
}

fn stop_sequence(o: &Outcome) -> Value {
    match &o.finish {
        generate::FinishKind::StopSequence(s) => json!(s),
        _ => Value::Null,
    }
}

/// `POST /v1/messages`.
pub async fn messages(State(st): State<SharedState>, body: Bytes) -> Result<Response, AnthropicError> {
    let mut req: MessagesRequest = parse_json(&body)?;
    let messages = conversation(&mut req)?;
    let knobs = Knobs {
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        min_p: req.min_p,
        seed: req.seed,
        max_tokens: req.max_tokens,
        stop: req.stop_sequences.unwrap_or_default(),
        ..Default::default()
    };
    let prompt = st.text.chat_prompt(messages, None)?;
    let prep = knobs.prepare(prompt, &st.opts.default_sampling, st.text.stop_ids())?;
    let rx = generate::start(&st, "messages", prep)?;
    let id = st.new_id("msg_");
    let model = st.opts.model_id.clone();
    if !req.stream.unwrap_or(false) {
        let (text, o) = generate::collect(rx).await?;
        return Ok(Json(json!({
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{ "type": "text", "text": text }],
            "stop_reason": o.finish.anthropic(),
            "stop_sequence": stop_sequence(&o),
            "usage": usage_json(&o),
        }))
        .into_response());
    }
    Ok(sse::respond(rx, move |p| match p {
        Piece::Started(s) => vec![
            sse::named(
                "message_start",
                &json!({
                    "type": "message_start",
                    "message": {
                        "id": id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": null,
                        "stop_sequence": null,
                        "usage": {
                            "input_tokens": s.prompt_tokens - s.cached_tokens,
                            "cache_read_input_tokens": s.cached_tokens,
                            "cache_creation_input_tokens": 0,
                            "output_tokens": 0,
                        },
                    },
                }),
            ),
            sse::named(
                "content_block_start",
                &json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
            ),
        ],
        Piece::Text(t) => vec![sse::named(
            "content_block_delta",
            &json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": t } }),
        )],
        Piece::End(o) => vec![
            sse::named("content_block_stop", &json!({ "type": "content_block_stop", "index": 0 })),
            sse::named(
                "message_delta",
                &json!({
                    "type": "message_delta",
                    "delta": { "stop_reason": o.finish.anthropic(), "stop_sequence": stop_sequence(&o) },
                    "usage": usage_json(&o),
                }),
            ),
            sse::named("message_stop", &json!({ "type": "message_stop" })),
        ],
        Piece::Failed(e) => vec![sse::named("error", &e.anthropic_body())],
    }))
}

/// `POST /v1/messages/count_tokens`.
pub async fn count_tokens(State(st): State<SharedState>, body: Bytes) -> Result<Response, AnthropicError> {
    let mut req: MessagesRequest = parse_json(&body)?;
    let messages = conversation(&mut req)?;
    let prompt = st.text.chat_prompt(messages, None)?;
    Ok(Json(json!({ "input_tokens": prompt.len() })).into_response())
}
