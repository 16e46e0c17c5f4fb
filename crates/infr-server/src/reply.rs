//! Chat replies as the routes send them, whole or streamed: the reasoning is split off first
//! ([`crate::reasoning`]), then tool calls are parsed from the content part only
//! ([`crate::tools::respond`]).
//!
//! | | reasoning | content and calls |
//! | --- | --- | --- |
//! | OpenAI, whole | `message.reasoning_content` | `message.content`, `message.tool_calls` |
//! | OpenAI, streamed | `delta.reasoning_content` | `delta.content`, `delta.tool_calls` |
//! | Anthropic, whole | a first `thinking` block | `text` and `tool_use` blocks |
//! | Anthropic, streamed | `thinking` block: `thinking_delta`s | then the text / `tool_use` blocks |
//!
//! [`OpenAiChat`] and [`AnthropicMessage`] build the whole bodies and the stream's events from
//! the generation's [`Piece`]s; the routes only start the generation and hand the pieces over.

use serde_json::{json, Value};

use crate::generate::{Outcome, Piece};
use crate::reasoning::{ReasoningSplit, Split};
use crate::routes_anthropic::{stop_sequence, usage_json as anthropic_usage};
use crate::routes_openai::{timings_json, usage_json as openai_usage};
use crate::sse::Out;
use crate::tools::respond::{self, AnthropicBlocks, NamedEvent, OpenAiDeltas};
use crate::tools::ToolSetup;

/// A source of fresh ids (`call_...` for OpenAI calls, `toolu_...` for Anthropic blocks).
pub type IdSource = Box<dyn FnMut() -> String + Send>;

/// The fields that identify a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// Response id (`chatcmpl-...`, `msg_...`).
    pub id: String,
    /// Unix time of the response (OpenAI's `created`).
    pub created: u64,
    /// The model id echoed back.
    pub model: String,
}

/// Split `text` whole with `split` (or not at all).
fn split_whole(split: Option<ReasoningSplit>, text: String) -> Split {
    match split {
        Some(s) => s.split_whole(&text),
        None => Split { reasoning: String::new(), content: text },
    }
}

/// An OpenAI chat completion (`chat.completion` or its `chat.completion.chunk` stream).
pub struct OpenAiChat {
    env: Envelope,
    tools: Option<ToolSetup>,
    split: Option<ReasoningSplit>,
    deltas: OpenAiDeltas,
    include_usage: bool,
    new_id: IdSource,
    /// Log-probabilities not yet sent: they go with the next chunk.
    pending_logprobs: Vec<Value>,
}

impl OpenAiChat {
    /// A reply for a request with `tools` (`None`: plain text) and a reasoning splitter
    /// (`None`: `--reasoning-format none`); `include_usage` is `stream_options.include_usage`.
    pub fn new(
        env: Envelope,
        tools: Option<ToolSetup>,
        split: Option<ReasoningSplit>,
        include_usage: bool,
        new_id: IdSource,
    ) -> Self {
        let deltas = OpenAiDeltas::new(tools.as_ref());
        Self { env, tools, split, deltas, include_usage, new_id, pending_logprobs: Vec::new() }
    }

    /// The whole response body for a finished generation.
    pub fn body(mut self, text: String, o: &Outcome) -> Value {
        let s = split_whole(self.split.take(), text);
        let (mut message, has_calls) = respond::openai_message(s.content, self.tools.as_ref(), &mut self.new_id);
        if !s.reasoning.is_empty() {
            message["reasoning_content"] = Value::String(s.reasoning);
        }
        let finish = if has_calls && !hit_limit(o) { "tool_calls" } else { o.finish.openai() };
        json!({
            "id": self.env.id,
            "object": "chat.completion",
            "created": self.env.created,
            "model": self.env.model,
            "choices": [{ "index": 0, "message": message, "logprobs": null, "finish_reason": finish }],
            "usage": openai_usage(o),
            "timings": timings_json(o),
        })
    }

    /// The stream's events for one piece of the generation; log-probabilities ride on the
    /// next chunk sent.
    pub fn event(&mut self, p: Piece) -> Vec<Out> {
        if let Piece::Logprob(e) = p {
            self.pending_logprobs.push(e.openai_chat());
            return Vec::new();
        }
        let mut evs = self.event_inner(p);
        if !self.pending_logprobs.is_empty() {
            let first = evs.iter_mut().find_map(|e| match e {
                Out::Data(v) if v["choices"][0].is_object() => Some(v),
                _ => None,
            });
            if let Some(v) = first {
                v["choices"][0]["logprobs"] = json!({ "content": std::mem::take(&mut self.pending_logprobs) });
            }
        }
        evs
    }

    fn event_inner(&mut self, p: Piece) -> Vec<Out> {
        match p {
            Piece::Logprob(_) => Vec::new(),
            Piece::Started(_) => vec![self.chunk(json!({ "role": "assistant", "content": "" }), None)],
            Piece::Text(t) => {
                let s = match &mut self.split {
                    Some(split) => split.push(&t),
                    None => Split { reasoning: String::new(), content: t },
                };
                self.deltas_of(s)
            }
            Piece::End(o) => {
                let mut evs = match &mut self.split {
                    Some(split) => {
                        let s = split.finish();
                        self.deltas_of(s)
                    }
                    None => Vec::new(),
                };
                let held = self.deltas.finish(&mut self.new_id);
                evs.extend(held.into_iter().map(|d| self.chunk(d, None)));
                let finish = if self.deltas.has_calls() && !hit_limit(&o) { "tool_calls" } else { o.finish.openai() };
                evs.push(self.chunk(json!({}), Some(finish)));
                if self.include_usage {
                    let mut last = self.chunk_json(json!({}), None);
                    last["choices"] = json!([]);
                    last["usage"] = openai_usage(&o);
                    evs.push(Out::Data(last));
                }
                evs.push(Out::Done);
                evs
            }
            Piece::Failed(e) => vec![Out::Data(e.openai_body())],
        }
    }

    /// Chunks for released reasoning and content.
    fn deltas_of(&mut self, s: Split) -> Vec<Out> {
        let mut evs = Vec::new();
        if !s.reasoning.is_empty() {
            evs.push(self.chunk(json!({ "reasoning_content": s.reasoning }), None));
        }
        if !s.content.is_empty() {
            let ds = self.deltas.push(s.content, &mut self.new_id);
            evs.extend(ds.into_iter().map(|d| self.chunk(d, None)));
        }
        evs
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Out {
        Out::Data(self.chunk_json(delta, finish))
    }

    fn chunk_json(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.env.id,
            "object": "chat.completion.chunk",
            "created": self.env.created,
            "model": self.env.model,
            "choices": [{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }],
        })
    }
}

/// An Anthropic message (`message` or its event stream).
pub struct AnthropicMessage {
    env: Envelope,
    tools: Option<ToolSetup>,
    split: Option<ReasoningSplit>,
    blocks: AnthropicBlocks,
    /// Index of the open thinking block.
    thinking: Option<usize>,
    /// Whether a thinking block was sent.
    thought: bool,
    /// Whether the text / tool blocks have begun (no thinking may follow).
    answering: bool,
    new_id: IdSource,
}

impl AnthropicMessage {
    /// A reply for a request with `tools` (`None`: one text block) and a reasoning splitter
    /// (`None`: `--reasoning-format none`).
    pub fn new(env: Envelope, tools: Option<ToolSetup>, split: Option<ReasoningSplit>, new_id: IdSource) -> Self {
        let blocks = AnthropicBlocks::new(tools.as_ref());
        Self { env, tools, split, blocks, thinking: None, thought: false, answering: false, new_id }
    }

    /// The whole response body for a finished generation.
    pub fn body(mut self, text: String, o: &Outcome) -> Value {
        let s = split_whole(self.split.take(), text);
        let (blocks, has_calls) = respond::anthropic_content(s.content.clone(), self.tools.as_ref(), &mut self.new_id);
        let mut content = Vec::new();
        if !s.reasoning.is_empty() {
            content.push(json!({ "type": "thinking", "thinking": s.reasoning, "signature": "" }));
        }
        // After a thinking block an empty answer has no (empty) text block, as when streamed.
        if content.is_empty() || has_calls || !s.content.is_empty() {
            content.extend(blocks);
        }
        json!({
            "id": self.env.id,
            "type": "message",
            "role": "assistant",
            "model": self.env.model,
            "content": content,
            "stop_reason": if has_calls && !hit_limit(o) { "tool_use" } else { o.finish.anthropic() },
            "stop_sequence": stop_sequence(o),
            "usage": anthropic_usage(o),
        })
    }

    /// The stream's events for one piece of the generation.
    pub fn event(&mut self, p: Piece) -> Vec<Out> {
        let evs = match p {
            // Anthropic's API has no log-probabilities.
            Piece::Logprob(_) => Vec::new(),
            Piece::Started(s) => {
                let start = json!({
                    "type": "message_start",
                    "message": {
                        "id": self.env.id,
                        "type": "message",
                        "role": "assistant",
                        "model": self.env.model,
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
                });
                let mut evs = vec![("message_start", start)];
                if self.split.is_none() {
                    // Nothing to wait for: the text block (without tools) opens at once.
                    self.answering = true;
                    evs.extend(self.blocks.start());
                }
                evs
            }
            Piece::Text(t) => match &mut self.split {
                Some(split) => {
                    let s = split.push(&t);
                    self.events_of(s)
                }
                None => self.blocks.push(t, &mut self.new_id),
            },
            Piece::End(o) => {
                let mut evs = match &mut self.split {
                    Some(split) => {
                        let s = split.finish();
                        self.events_of(s)
                    }
                    None => Vec::new(),
                };
                self.close_thinking(&mut evs);
                if !self.answering && !self.thought {
                    self.answering = true;
                    evs.extend(self.blocks.start());
                }
                evs.extend(self.blocks.finish(&mut self.new_id));
                let stop_reason =
                    if self.blocks.has_calls() && !hit_limit(&o) { "tool_use" } else { o.finish.anthropic() };
                evs.push((
                    "message_delta",
                    json!({
                        "type": "message_delta",
                        "delta": { "stop_reason": stop_reason, "stop_sequence": stop_sequence(&o) },
                        "usage": anthropic_usage(&o),
                    }),
                ));
                evs.push(("message_stop", json!({ "type": "message_stop" })));
                evs
            }
            Piece::Failed(e) => vec![("error", e.anthropic_body())],
        };
        evs.into_iter().map(|(n, v)| Out::Named(n, v)).collect()
    }

    /// Events for released reasoning and content.
    fn events_of(&mut self, s: Split) -> Vec<NamedEvent> {
        let mut evs = Vec::new();
        if !s.reasoning.is_empty() {
            if self.answering {
                // The splitter never releases reasoning after content; keep it visible anyway.
                evs.extend(self.blocks.push(s.reasoning, &mut self.new_id));
            } else {
                let index = match self.thinking {
                    Some(i) => i,
                    None => {
                        let i = self.blocks.reserve_index();
                        self.thinking = Some(i);
                        self.thought = true;
                        evs.push((
                            "content_block_start",
                            json!({ "type": "content_block_start", "index": i,
                                    "content_block": { "type": "thinking", "thinking": "", "signature": "" } }),
                        ));
                        i
                    }
                };
                evs.push((
                    "content_block_delta",
                    json!({ "type": "content_block_delta", "index": index,
                            "delta": { "type": "thinking_delta", "thinking": s.reasoning } }),
                ));
            }
        }
        if !s.content.is_empty() {
            self.close_thinking(&mut evs);
            if !self.answering {
                self.answering = true;
                evs.extend(self.blocks.start());
            }
            evs.extend(self.blocks.push(s.content, &mut self.new_id));
        }
        evs
    }

    fn close_thinking(&mut self, evs: &mut Vec<NamedEvent>) {
        if let Some(index) = self.thinking.take() {
            evs.push(("content_block_stop", json!({ "type": "content_block_stop", "index": index })));
        }
    }
}

#[cfg(test)]
#[path = "reply_tests.rs"]
mod tests;

/// Whether generation stopped at the token limit: then the reply says so (`length` /
/// `max_tokens`) even after complete calls, since whatever came after them was cut off (the
/// cut text is sent as text, not dropped).
fn hit_limit(o: &Outcome) -> bool {
    o.finish == crate::generate::FinishKind::Length
}
