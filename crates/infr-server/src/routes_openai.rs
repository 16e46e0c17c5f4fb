//! OpenAI-compatible endpoints: `/v1/chat/completions`, `/v1/completions`, `/v1/models`.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use infr_tokenizer::chat::ChatMessage;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::errors::{parse_json, ApiError, OpenAiError};
use crate::generate::{self, Outcome, Piece};
use crate::params::{sampling_request, Knobs, StopSpec};
use crate::reasoning::ReasoningFormat;
use crate::reply::{Envelope, OpenAiChat};
use crate::response_format;
use crate::sse;
use crate::state::{unix_now, SharedState};
use crate::tools::{ToolChoice, ToolSetup};

/// `stream_options`.
#[derive(Debug, Default, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

sampling_request! {
/// Fields of `/v1/chat/completions` (unknown fields are ignored; `model` is accepted and ignored).
struct ChatCompletionRequest {
    messages: Vec<ChatMessage>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    /// `"none" | "auto" | "required" | {"type": "function", "function": {"name"}}`.
    #[serde(default)]
    tool_choice: Option<Value>,
    /// `{"type": "text" | "json_object" | "json_schema", "json_schema": {"schema"}}`.
    #[serde(default)]
    response_format: Option<Value>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    max_completion_tokens: Option<i64>,
    #[serde(default)]
    n_predict: Option<i64>,
    #[serde(default)]
    stop: Option<StopSpec>,
    /// llama.cpp's per-request override of `--reasoning-format`: `none | deepseek | auto`.
    #[serde(default)]
    reasoning_format: Option<String>,
    /// Extra chat template variables (`{"enable_thinking": false}`). `reasoning_effort` and
    /// other unknown fields are accepted and ignored.
    #[serde(default)]
    chat_template_kwargs: Option<Map<String, Value>>,
}
}

/// `prompt` of `/v1/completions`: text, a one-element list of text, or token ids.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PromptSpec {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
}

sampling_request! {
/// Fields of `/v1/completions`.
struct CompletionRequest {
    prompt: PromptSpec,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    n_predict: Option<i64>,
    #[serde(default)]
    stop: Option<StopSpec>,
    #[serde(default)]
    echo: Option<bool>,
    #[serde(default)]
    response_format: Option<Value>,
}
}

/// OpenAI's `usage` object.
pub fn usage_json(o: &Outcome) -> Value {
    json!({
        "prompt_tokens": o.prompt_tokens,
        "completion_tokens": o.completion_tokens,
        "total_tokens": o.prompt_tokens + o.completion_tokens,
        "prompt_tokens_details": { "cached_tokens": o.cached_tokens },
    })
}

/// llama.cpp's `timings` object.
pub(crate) fn timings_json(o: &Outcome) -> Value {
    let computed = o.prompt_tokens - o.cached_tokens;
    let prompt_ms = o.prompt_time.as_secs_f64() * 1e3;
    let predicted_ms = o.decode_time.as_secs_f64() * 1e3;
    json!({
        "cache_n": o.cached_tokens,
        "prompt_n": computed,
        "prompt_ms": prompt_ms,
        "prompt_per_second": computed as f64 / (prompt_ms / 1e3).max(1e-9),
        "predicted_n": o.completion_tokens,
        "predicted_ms": predicted_ms,
        "predicted_per_second": o.decode_tps(),
        "queue_ms": o.queue_wait.as_secs_f64() * 1e3,
    })
}

/// Refuse, naming the field, what the chat template could only fail on (or silently drop): a
/// user or system message without content, and content parts other than text (this server
/// runs text-only models).
fn check_messages(messages: &[ChatMessage]) -> Result<(), ApiError> {
    use infr_tokenizer::chat::ChatContent;
    for (i, m) in messages.iter().enumerate() {
        match &m.content {
            None if matches!(m.role.as_str(), "user" | "system" | "developer") => {
                return Err(ApiError::bad(
                    format!("messages[{i}].content is missing"),
                    format!("messages[{i}].content"),
                ));
            }
            Some(ChatContent::Parts(parts)) => {
                for (j, part) in parts.iter().enumerate() {
                    let at = format!("messages[{i}].content[{j}]");
                    let why = match part.kind.as_str() {
                        "text" if part.text.is_some() => continue,
                        "text" => format!("{at}: a text part needs 'text'"),
                        "image_url" | "image" | "input_image" => {
                            format!("{at}: image input is not supported: the loaded model has no vision support")
                        }
                        "input_audio" | "audio" => {
                            format!("{at}: audio input is not supported: the loaded model has no audio support")
                        }
                        other => format!("{at}: unknown content part type '{other}' (expected 'text')"),
                    };
                    return Err(ApiError::bad(why, format!("{at}.type")));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(State(st): State<SharedState>, body: axum::body::Body) -> Result<Response, OpenAiError> {
    let body = crate::errors::read_body(body).await?;
    let mut req: ChatCompletionRequest = parse_json(&body)?;
    req.refuse_unsupported()?;
    let knobs = Knobs {
        max_tokens: req.max_completion_tokens.or(req.max_tokens).or(req.n_predict),
        stop: req.stop.take().map(StopSpec::into_vec).unwrap_or_default(),
        logprobs: crate::params::chat_logprobs(req.logprobs.as_ref(), req.top_logprobs.as_ref())?,
        ..req.sampling_knobs()
    };
    let want_logprobs = knobs.logprobs.is_some();
    if req.messages.is_empty() {
        return Err(ApiError::bad("messages must not be empty", "messages").into());
    }
    check_messages(&req.messages)?;
    // OpenAI's newer name for the system role; chat templates know only `system`.
    for m in req.messages.iter_mut().filter(|m| m.role == "developer") {
        m.role = "system".into();
    }
    let choice = ToolChoice::from_openai(req.tool_choice.as_ref())?;
    let json_schema = response_format::schema(req.response_format.as_ref())?;
    let setup = ToolSetup::new(req.tools.unwrap_or_default(), choice, st.text.template().source())?;
    let forced_call = setup.as_ref().is_some_and(|s| matches!(s.choice, ToolChoice::Required | ToolChoice::Named(_)));
    if json_schema.is_some() && forced_call {
        return Err(ApiError::bad(
            "response_format json_object/json_schema cannot be combined with a required or named tool_choice",
            "response_format",
        )
        .into());
    }
    let format = match req.reasoning_format.as_deref() {
        Some(f) => f.parse::<ReasoningFormat>().map_err(|e| ApiError::bad(e.to_string(), "reasoning_format"))?,
        None => st.opts.reasoning_format,
    };
    let kwargs = req.chat_template_kwargs.unwrap_or_default();
    let (messages, tools) = (req.messages, setup.as_ref().map(|s| s.tools.clone()));
    let prompt = crate::state::blocking(&st, move |s| s.text.chat_prompt_with(messages, tools, kwargs)).await?;
    let prep = knobs.prepare(prompt.ids, &st.opts.default_sampling, st.text.stop_ids())?;
    let constraint = match &json_schema {
        Some(schema) => Some(st.text.json_constraint(schema)?),
        None => st.text.tool_constraint(setup.as_ref())?,
    };
    // A grammar shapes the reply from its first token: it holds no reasoning to split off.
    let split = match constraint {
        Some(_) => None,
        None => format.splitter(st.text.template().source(), prompt.reasoning_open),
    };
    let rx = generate::start_constrained(&st, "chat", prep, constraint)?;
    let env = Envelope { id: st.new_id("chatcmpl-"), created: unix_now(), model: st.opts.model_id.clone() };
    let include_usage = req.stream_options.and_then(|s| s.include_usage).unwrap_or(false);
    let ids = st.clone();
    let mut reply = OpenAiChat::new(env, setup, split, include_usage, Box::new(move || ids.new_id("call_")));
    if !req.stream.unwrap_or(false) {
        let (text, o, lps) = generate::collect_logprobs(rx).await?;
        let mut v = reply.body(text, &o);
        if want_logprobs {
            let content: Vec<Value> = lps.iter().map(generate::LogprobEntry::openai_chat).collect();
            v["choices"][0]["logprobs"] = json!({ "content": content });
        }
        return Ok(Json(v).into_response());
    }
    Ok(sse::respond(rx, move |p| reply.event(p).into_iter().map(sse::Out::into_event).collect()))
}

/// `POST /v1/completions`.
pub async fn completions(State(st): State<SharedState>, body: axum::body::Body) -> Result<Response, OpenAiError> {
    let body = crate::errors::read_body(body).await?;
    let mut req: CompletionRequest = parse_json(&body)?;
    req.refuse_unsupported()?;
    let knobs = Knobs {
        max_tokens: req.max_tokens.or(req.n_predict),
        stop: req.stop.take().map(StopSpec::into_vec).unwrap_or_default(),
        logprobs: crate::params::completion_logprobs(req.logprobs.as_ref())?,
        ..req.sampling_knobs()
    };
    let want_logprobs = knobs.logprobs.is_some();
    crate::params::refuse_unsupported([("top_logprobs", &req.top_logprobs)])?;
    if req.echo == Some(true) {
        return Err(ApiError::bad("echo is not supported", "echo").into());
    }
    let prompt = match req.prompt {
        PromptSpec::Text(t) => crate::state::blocking(&st, move |s| Ok(s.text.encode_prompt(&t))).await?,
        PromptSpec::Texts(mut v) if v.len() == 1 => {
            let t = v.swap_remove(0);
            crate::state::blocking(&st, move |s| Ok(s.text.encode_prompt(&t))).await?
        }
        PromptSpec::Texts(_) => {
            return Err(ApiError::bad("only one prompt per request is supported", "prompt").into());
        }
        PromptSpec::Tokens(ids) => ids,
    };
    let json_schema = response_format::schema(req.response_format.as_ref())?;
    let prep = knobs
        .prepare(prompt, &st.opts.default_sampling, st.text.stop_ids())
        .map_err(|e| e.with_prompt_field("prompt"))?;
    let constraint = json_schema.as_ref().map(|s| st.text.json_constraint(s)).transpose()?;
    let rx =
        generate::start_constrained(&st, "completions", prep, constraint).map_err(|e| e.with_prompt_field("prompt"))?;
    let id = st.new_id("cmpl-");
    let created = unix_now();
    let model = st.opts.model_id.clone();
    if !req.stream.unwrap_or(false) {
        let (text, o, lps) = generate::collect_logprobs(rx).await?;
        let logprobs = if want_logprobs { generate::completions_logprobs(&lps, 0) } else { Value::Null };
        return Ok(Json(json!({
            "id": id,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [{ "index": 0, "text": text, "logprobs": logprobs, "finish_reason": o.finish.openai() }],
            "usage": usage_json(&o),
            "timings": timings_json(&o),
        }))
        .into_response());
    }
    let include_usage = req.stream_options.and_then(|s| s.include_usage).unwrap_or(false);
    let chunk = move |text: &str, finish: Option<&str>| {
        json!({
            "id": id,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [{ "index": 0, "text": text, "logprobs": null, "finish_reason": finish }],
        })
    };
    // Log-probabilities ride on the next text chunk (offsets count the text sent before).
    let (mut pending, mut sent) = (Vec::new(), 0usize);
    Ok(sse::respond(rx, move |p| match p {
        Piece::Started(_) => Vec::new(),
        Piece::Logprob(e) => {
            pending.push(e);
            Vec::new()
        }
        Piece::Text(t) => {
            let mut c = chunk(&t, None);
            if !pending.is_empty() {
                c["choices"][0]["logprobs"] = generate::completions_logprobs(&pending, sent);
                sent += pending.iter().map(|e| e.token.text.len()).sum::<usize>();
                pending.clear();
            }
            vec![sse::data(&c)]
        }
        Piece::End(o) => {
            let mut last = chunk("", Some(o.finish.openai()));
            if include_usage {
                last["usage"] = usage_json(&o);
            }
            vec![sse::data(&last), sse::done()]
        }
        Piece::Failed(e) => vec![sse::data(&e.openai_body())],
    }))
}

/// `GET /v1/models`.
pub async fn models(State(st): State<SharedState>, headers: HeaderMap) -> Json<Value> {
    if is_anthropic(&headers) {
        let m = anthropic_model(&st);
        let id = st.opts.model_id.clone();
        return Json(json!({ "data": [m], "has_more": false, "first_id": id, "last_id": id }));
    }
    Json(json!({ "object": "list", "data": [openai_model(&st)] }))
}

/// `GET /v1/models/{id}`: the served model (OpenAI or Anthropic shape, as `models`), or 404.
pub async fn model(
    State(st): State<SharedState>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    let anthropic = is_anthropic(&headers);
    if id != st.opts.model_id {
        let e =
            ApiError::NotFound(format!("the model '{id}' does not exist (this server serves '{}')", st.opts.model_id));
        return if anthropic {
            crate::errors::AnthropicError(e).into_response()
        } else {
            OpenAiError(e).into_response()
        };
    }
    Json(if anthropic { anthropic_model(&st) } else { openai_model(&st) }).into_response()
}

/// Whether a request comes from an Anthropic client (its SDKs send `anthropic-version`).
fn is_anthropic(headers: &HeaderMap) -> bool {
    headers.contains_key("anthropic-version")
}

/// The served model as OpenAI's model object, with the context it accepts (vLLM's
/// `max_model_len`, which clients read for the per-request limit).
fn openai_model(st: &SharedState) -> Value {
    let n_ctx = st.sched.n_ctx();
    json!({
        "id": st.opts.model_id,
        "object": "model",
        "created": st.started,
        "owned_by": "infr",
        "context_length": n_ctx,
        "max_model_len": n_ctx,
        "meta": { "n_ctx": n_ctx, "n_vocab": st.sched.n_vocab(), "slots": st.sched.slots() },
    })
}

/// The served model as Anthropic's model object.
fn anthropic_model(st: &SharedState) -> Value {
    let created = infr_tokenizer::chat::UtcDateTime::from_unix(st.started as i64);
    json!({
        "type": "model",
        "id": st.opts.model_id,
        "display_name": st.opts.model_id,
        "created_at": infr_tokenizer::chat::format_datetime("%Y-%m-%dT%H:%M:%SZ", &created),
    })
}
