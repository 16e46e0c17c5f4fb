//! Anthropic-compatible endpoints: `/v1/messages` (plain and streaming) and
//! `/v1/messages/count_tokens`.
//!
//! Usage follows Anthropic's meaning: `input_tokens` counts the prompt tokens computed for this
//! request and `cache_read_input_tokens` those reused from the slot's cache (their sum is the
//! prompt length).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use infr_tokenizer::chat::{ChatMessage, ToolCall};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::errors::{parse_json, AnthropicError, ApiError};
use crate::generate::{self, Outcome};
use crate::params::{sampling_request, Knobs};
use crate::reply::{AnthropicMessage, Envelope};
use crate::sse;
use crate::state::{unix_now, SharedState};
use crate::tools::{ToolChoice, ToolSetup};

/// One content block: text, `tool_use` (assistant) and `tool_result` (user) are rendered;
/// thinking blocks are dropped.
#[derive(Debug, Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    /// `tool_use`: the call id.
    #[serde(default)]
    id: Option<String>,
    /// `tool_use`: the function name.
    #[serde(default)]
    name: Option<String>,
    /// `tool_use`: the arguments object.
    #[serde(default)]
    input: Option<Value>,
    /// `tool_result`: the call answered.
    #[serde(default)]
    tool_use_id: Option<String>,
    /// `tool_result`: a string or text blocks.
    #[serde(default)]
    content: Option<Value>,
    /// `tool_result`: whether the tool failed.
    #[serde(default)]
    is_error: Option<bool>,
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

sampling_request! {
/// Fields of `/v1/messages` and `/v1/messages/count_tokens` (unknown fields are ignored).
struct MessagesRequest {
    messages: Vec<Message>,
    #[serde(default)]
    system: Option<Content>,
    /// `{name, description, input_schema}` each.
    #[serde(default)]
    tools: Option<Vec<Value>>,
    /// `{"type": "auto" | "any" | "tool" | "none", "name"}`.
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    stream: Option<bool>,
    /// Extended thinking: `{"type": "enabled", "budget_tokens": N}` or `{"type": "disabled"}`
    /// (any other shape is ignored).
    #[serde(default)]
    thinking: Option<Value>,
}
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
                    other => return Err(unsupported(other, &format!("{what}[{i}].type"))),
                }
            }
            Ok(parts.join("\n"))
        }
    }
}

fn unsupported(kind: &str, param: &str) -> ApiError {
    let why = match kind {
        "image" | "document" => {
            format!("{param}: {kind} input is not supported: the loaded model has no vision support")
        }
        _ => format!("content blocks of type '{kind}' are not supported here"),
    };
    ApiError::bad(why, param)
}

/// The text of a `tool_result`'s content (a string or text blocks).
fn result_text(content: Option<Value>, is_error: bool, what: &str) -> Result<String, ApiError> {
    let text = match content {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s,
        Some(Value::Array(items)) => {
            let mut parts = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match (item.get("type").and_then(Value::as_str), item.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => parts.push(t.to_owned()),
                    (kind, _) => return Err(unsupported(kind.unwrap_or("?"), &format!("{what}.content[{i}]"))),
                }
            }
            parts.join("\n")
        }
        Some(_) => return Err(ApiError::bad("tool_result content must be a string or text blocks", what)),
    };
    Ok(if is_error { format!("Error: {text}") } else { text })
}

/// One Anthropic message as chat-template messages: an assistant turn with `tool_use` blocks
/// becomes text plus `tool_calls`; a user turn's `tool_result` blocks become `tool` messages
/// (before any text of that turn, which follows as a user message).
fn convert(m: Message, i: usize, out: &mut Vec<ChatMessage>) -> Result<(), ApiError> {
    let what = format!("messages[{i}].content");
    let blocks = match m.content {
        Content::Text(s) => {
            out.push(ChatMessage::new(m.role, s));
            return Ok(());
        }
        Content::Blocks(b) => b,
    };
    let mut text = Vec::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for (j, b) in blocks.into_iter().enumerate() {
        let param = format!("{what}[{j}]");
        match (b.kind.as_str(), m.role.as_str()) {
            ("text", _) => text.push(b.text.unwrap_or_default()),
            ("thinking" | "redacted_thinking", _) => {}
            ("tool_use", "assistant") => {
                let name = b.name.ok_or_else(|| ApiError::bad("tool_use needs a name", format!("{param}.name")))?;
                let input = b.input.unwrap_or_else(|| json!({}));
                calls.push(ToolCall::function(b.id, name, input));
            }
            ("tool_result", "user") => {
                let id = b.tool_use_id.unwrap_or_default();
                let name = out.iter().rev().find_map(|m| {
                    m.tool_calls
                        .as_ref()?
                        .iter()
                        .find(|c| c.id.as_deref() == Some(id.as_str()))
                        .map(|c| c.function.name.clone())
                });
                let body = result_text(b.content, b.is_error.unwrap_or(false), &param)?;
                results.push(ChatMessage { name, ..ChatMessage::tool(id, body) });
            }
            (other, _) => return Err(unsupported(other, &format!("{param}.type"))),
        }
    }
    let text = text.join("\n");
    if !calls.is_empty() {
        let mut msg = ChatMessage::assistant_tool_calls(calls);
        if !text.is_empty() {
            msg.content = Some(text.into());
        }
        out.push(msg);
        return Ok(());
    }
    let had_results = !results.is_empty();
    out.extend(results);
    if !had_results || !text.is_empty() {
        out.push(ChatMessage::new(m.role, text));
    }
    Ok(())
}

/// The conversation as chat-template messages.
fn conversation(req: &mut MessagesRequest) -> Result<Vec<ChatMessage>, ApiError> {
    let mut out = Vec::new();
    if let Some(system) = req.system.take() {
        out.push(ChatMessage::system(content_text(system, "system")?));
    }
    for (i, m) in std::mem::take(&mut req.messages).into_iter().enumerate() {
        match m.role.as_str() {
            "user" | "assistant" => convert(m, i, &mut out)?,
            // Claude Code sends mid-conversation system messages to models it does not know;
            // the chat-template adaptation renders or folds them (`polyfill::adapt`).
            "system" => out.push(ChatMessage::system(content_text(m.content, &format!("messages[{i}].content"))?)),
            other => {
                return Err(ApiError::bad(
                    format!("messages[{i}].role must be 'user', 'assistant' or 'system', not '{other}'"),
                    format!("messages[{i}].role"),
                ))
            }
        }
    }
    if out.iter().all(|m| m.role == "system") {
        return Err(ApiError::bad("messages must not be empty", "messages"));
    }
    Ok(out)
}

/// Anthropic tools (`{name, description, input_schema}`) as OpenAI function tools, and the
/// setup for parsing the reply.
fn tool_setup(st: &SharedState, req: &mut MessagesRequest) -> Result<Option<ToolSetup>, ApiError> {
    let choice = ToolChoice::from_anthropic(req.tool_choice.as_ref())?;
    let mut tools = Vec::new();
    for (i, t) in req.tools.take().unwrap_or_default().into_iter().enumerate() {
        let name = t.get("name").and_then(Value::as_str);
        let Some(name) = name else {
            return Err(ApiError::bad("each tool needs a name", format!("tools[{i}].name")));
        };
        let mut function = json!({ "name": name });
        if let Some(d) = t.get("description") {
            function["description"] = d.clone();
        }
        function["parameters"] = t.get("input_schema").cloned().unwrap_or_else(|| json!({"type": "object"}));
        tools.push(json!({ "type": "function", "function": function }));
    }
    ToolSetup::new(tools, choice, st.text.template().source())
}

/// Anthropic's `usage` object.
pub(crate) fn usage_json(o: &Outcome) -> Value {
    json!({
        "input_tokens": o.prompt_tokens - o.cached_tokens,
        "cache_read_input_tokens": o.cached_tokens,
        "cache_creation_input_tokens": 0,
        "output_tokens": o.completion_tokens,
    })
}

/// The `stop_sequence` that ended the reply, or null.
pub(crate) fn stop_sequence(o: &Outcome) -> Value {
    match &o.finish {
        generate::FinishKind::StopSequence(s) => json!(s),
        _ => Value::Null,
    }
}

/// `POST /v1/messages`.
pub async fn messages(State(st): State<SharedState>, body: axum::body::Body) -> Result<Response, AnthropicError> {
    let body = crate::errors::read_body(body).await?;
    let mut req: MessagesRequest = parse_json(&body)?;
    req.refuse_unsupported()?;
    // Anthropic's API has no log-probabilities.
    crate::params::refuse_unsupported([("logprobs", &req.logprobs), ("top_logprobs", &req.top_logprobs)])?;
    let messages = conversation(&mut req)?;
    let setup = tool_setup(&st, &mut req)?;
    let knobs = Knobs {
        max_tokens: req.max_tokens,
        stop: req.stop_sequences.take().unwrap_or_default(),
        ..req.sampling_knobs()
    };
    let (tools, kwargs) = (setup.as_ref().map(|s| s.tools.clone()), thinking_kwargs(req.thinking.as_ref()));
    let prompt = crate::state::blocking(&st, move |s| s.text.chat_prompt_with(messages, tools, kwargs)).await?;
    let prep = knobs.prepare(prompt.ids, &st.opts.default_sampling, st.text.stop_ids())?;
    let constraint = st.text.tool_constraint(setup.as_ref())?;
    // A grammar shapes the reply from its first token: it holds no reasoning to split off.
    let split = match constraint {
        Some(_) => None,
        None => st.opts.reasoning_format.splitter(st.text.template().source(), prompt.reasoning_open),
    };
    let rx = generate::start_constrained(&st, "messages", prep, constraint)?;
    let env = Envelope { id: st.new_id("msg_"), created: unix_now(), model: st.opts.model_id.clone() };
    let ids = st.clone();
    let mut reply = AnthropicMessage::new(env, setup, split, Box::new(move || ids.new_id("toolu_")));
    if !req.stream.unwrap_or(false) {
        let (text, o) = generate::collect(rx).await?;
        return Ok(Json(reply.body(text, &o)).into_response());
    }
    let fmt = move |p| reply.event(p).into_iter().map(sse::Out::into_event).collect();
    Ok(sse::respond_with(rx, fmt, sse::Heartbeat::AnthropicPing))
}

/// Template variables for Anthropic's `thinking` field: `{"type": "enabled" | "disabled"}`
/// becomes `enable_thinking` (Qwen3-style templates read it; others ignore it). The
/// `budget_tokens` of an enabled thinking is accepted and not enforced.
fn thinking_kwargs(thinking: Option<&Value>) -> Map<String, Value> {
    let mut kwargs = Map::new();
    match thinking.and_then(|t| t.get("type")).and_then(Value::as_str) {
        Some("enabled") => {
            kwargs.insert("enable_thinking".into(), Value::Bool(true));
        }
        Some("disabled") => {
            kwargs.insert("enable_thinking".into(), Value::Bool(false));
        }
        _ => {}
    }
    kwargs
}

/// `POST /v1/messages/count_tokens`.
pub async fn count_tokens(State(st): State<SharedState>, body: axum::body::Body) -> Result<Response, AnthropicError> {
    let body = crate::errors::read_body(body).await?;
    let mut req: MessagesRequest = parse_json(&body)?;
    req.refuse_unsupported()?;
    // Anthropic's API has no log-probabilities.
    crate::params::refuse_unsupported([("logprobs", &req.logprobs), ("top_logprobs", &req.top_logprobs)])?;
    let messages = conversation(&mut req)?;
    let setup = tool_setup(&st, &mut req)?;
    let tools = setup.map(|s| s.tools);
    let prompt = crate::state::blocking(&st, move |s| s.text.chat_prompt(messages, tools)).await?;
    Ok(Json(json!({ "input_tokens": prompt.len() })).into_response())
}
