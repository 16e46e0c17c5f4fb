//! Replies with tool calls in the two wire shapes: OpenAI `message.tool_calls` /
//! `delta.tool_calls`, Anthropic `tool_use` content blocks / `input_json_delta` events. Without
//! a [`ToolSetup`] (no tools, or `tool_choice: none`) text passes through untouched.

use serde_json::{json, Value};

use super::{Parsed, ParsedCall, ToolEvent, ToolSetup, ToolStream};

fn split(text: String, setup: Option<&ToolSetup>) -> Parsed {
    match setup {
        Some(s) => s.parse(&text),
        None => Parsed { content: text, calls: Vec::new() },
    }
}

/// OpenAI's `tool_calls` entry for `call`.
fn openai_call(call: &ParsedCall, id: String) -> Value {
    json!({ "id": id, "type": "function", "function": { "name": call.name, "arguments": call.arguments } })
}

/// The OpenAI `message` of a whole reply and whether it holds calls (`finish_reason:
/// "tool_calls"`). `new_id` gives call ids (`call_...`).
pub fn openai_message(text: String, setup: Option<&ToolSetup>, mut new_id: impl FnMut() -> String) -> (Value, bool) {
    let p = split(text, setup);
    if p.calls.is_empty() {
        return (json!({ "role": "assistant", "content": p.content }), false);
    }
    let calls: Vec<Value> = p.calls.iter().map(|c| openai_call(c, new_id())).collect();
    let content = if p.content.is_empty() { Value::Null } else { Value::String(p.content) };
    (json!({ "role": "assistant", "content": content, "tool_calls": calls }), true)
}

/// The Anthropic `content` blocks of a whole reply and whether it holds calls (`stop_reason:
/// "tool_use"`). `new_id` gives block ids (`toolu_...`).
pub fn anthropic_content(
    text: String,
    setup: Option<&ToolSetup>,
    mut new_id: impl FnMut() -> String,
) -> (Vec<Value>, bool) {
    let p = split(text, setup);
    let mut blocks = Vec::new();
    if !p.content.is_empty() || p.calls.is_empty() {
        blocks.push(json!({ "type": "text", "text": p.content }));
    }
    for c in &p.calls {
        blocks.push(json!({ "type": "tool_use", "id": new_id(), "name": c.name, "input": c.input() }));
    }
    let has = !p.calls.is_empty();
    (blocks, has)
}

/// Streamed OpenAI deltas.
#[derive(Debug)]
pub struct OpenAiDeltas {
    stream: Option<ToolStream>,
    calls: usize,
}

impl OpenAiDeltas {
    /// Deltas for a request with `setup` (`None`: plain text).
    pub fn new(setup: Option<&ToolSetup>) -> Self {
        Self { stream: setup.map(ToolSetup::stream), calls: 0 }
    }

    /// Whether calls were sent (`finish_reason: "tool_calls"`).
    pub fn has_calls(&self) -> bool {
        self.calls > 0
    }

    /// The `delta` objects for new text.
    pub fn push(&mut self, text: String, new_id: impl FnMut() -> String) -> Vec<Value> {
        match &mut self.stream {
            None => vec![json!({ "content": text })],
            Some(s) => {
                let evs = s.push(&text);
                self.deltas(evs, new_id)
            }
        }
    }

    /// The `delta` objects for text held back at the end.
    pub fn finish(&mut self, new_id: impl FnMut() -> String) -> Vec<Value> {
        let evs = self.stream.as_mut().map(ToolStream::finish).unwrap_or_default();
        self.deltas(evs, new_id)
    }

    fn deltas(&mut self, evs: Vec<ToolEvent>, mut new_id: impl FnMut() -> String) -> Vec<Value> {
        let mut out = Vec::new();
        for e in evs {
            match e {
                ToolEvent::Text(t) => out.push(json!({ "content": t })),
                ToolEvent::Call(c) => {
                    let index = self.calls;
                    self.calls += 1;
                    out.push(json!({ "tool_calls": [{
                        "index": index, "id": new_id(), "type": "function",
                        "function": { "name": c.name, "arguments": "" },
                    }] }));
                    out.push(json!({ "tool_calls": [{ "index": index, "function": { "arguments": c.arguments } }] }));
                }
            }
        }
        out
    }
}

/// Streamed Anthropic content-block events: `(event name, data)`.
#[derive(Debug)]
pub struct AnthropicBlocks {
    stream: Option<ToolStream>,
    next: usize,
    text_open: bool,
    calls: usize,
}

/// One Anthropic event: its name and data.
pub type NamedEvent = (&'static str, Value);

impl AnthropicBlocks {
    /// Blocks for a request with `setup` (`None`: one text block).
    pub fn new(setup: Option<&ToolSetup>) -> Self {
        Self { stream: setup.map(ToolSetup::stream), next: 0, text_open: false, calls: 0 }
    }

    /// Whether calls were sent (`stop_reason: "tool_use"`).
    pub fn has_calls(&self) -> bool {
        self.calls > 0
    }

    /// Take the next block index for a block sent by the caller (a thinking block, which comes
    /// before the text and tool blocks: call it before [`Self::start`] and [`Self::push`]).
    pub fn reserve_index(&mut self) -> usize {
        let index = self.next;
        self.next += 1;
        index
    }

    /// Events right after `message_start`: without tools the text block opens at once (with
    /// tools it opens with the first text, so a reply of calls only has no empty text block).
    pub fn start(&mut self) -> Vec<NamedEvent> {
        let mut out = Vec::new();
        if self.stream.is_none() {
            self.open_text(&mut out);
        }
        out
    }

    /// Events for new text.
    pub fn push(&mut self, text: String, new_id: impl FnMut() -> String) -> Vec<NamedEvent> {
        let evs = match &mut self.stream {
            None => vec![ToolEvent::Text(text)],
            Some(s) => s.push(&text),
        };
        self.events(evs, new_id)
    }

    /// Events for text held back at the end, and the last block's `content_block_stop`.
    pub fn finish(&mut self, new_id: impl FnMut() -> String) -> Vec<NamedEvent> {
        let evs = self.stream.as_mut().map(ToolStream::finish).unwrap_or_default();
        let mut out = self.events(evs, new_id);
        if self.next == 0 {
            // Nothing was generated: still one (empty) text block (none after a thinking block).
            self.open_text(&mut out);
        }
        self.close_text(&mut out);
        out
    }

    fn open_text(&mut self, out: &mut Vec<NamedEvent>) {
        if self.text_open {
            return;
        }
        let index = self.next;
        self.next += 1;
        self.text_open = true;
        out.push((
            "content_block_start",
            json!({ "type": "content_block_start", "index": index, "content_block": { "type": "text", "text": "" } }),
        ));
    }

    fn close_text(&mut self, out: &mut Vec<NamedEvent>) {
        if self.text_open {
            self.text_open = false;
            out.push(("content_block_stop", json!({ "type": "content_block_stop", "index": self.next - 1 })));
        }
    }

    fn events(&mut self, evs: Vec<ToolEvent>, mut new_id: impl FnMut() -> String) -> Vec<NamedEvent> {
        let mut out = Vec::new();
        for e in evs {
            match e {
                ToolEvent::Text(t) => {
                    if !self.text_open && t.trim().is_empty() && self.stream.is_some() {
                        continue; // whitespace between calls: no block for it
                    }
                    self.open_text(&mut out);
                    out.push((
                        "content_block_delta",
                        json!({ "type": "content_block_delta", "index": self.next - 1,
                                "delta": { "type": "text_delta", "text": t } }),
                    ));
                }
                ToolEvent::Call(c) => {
                    self.close_text(&mut out);
                    let index = self.next;
                    self.next += 1;
                    self.calls += 1;
                    out.push((
                        "content_block_start",
                        json!({ "type": "content_block_start", "index": index,
                                "content_block": { "type": "tool_use", "id": new_id(), "name": c.name, "input": {} } }),
                    ));
                    out.push((
                        "content_block_delta",
                        json!({ "type": "content_block_delta", "index": index,
                                "delta": { "type": "input_json_delta", "partial_json": c.arguments } }),
                    ));
                    out.push(("content_block_stop", json!({ "type": "content_block_stop", "index": index })));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{Dialect, ToolChoice};

    fn setup(template: &str) -> ToolSetup {
        let tools = vec![json!({"type": "function", "function": {"name": "get_weather", "parameters": {}}})];
        ToolSetup::new(tools, ToolChoice::Auto, template).unwrap().unwrap()
    }

    fn ids() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("id{n}")
        }
    }

    const REPLY: &str =
        "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

    #[test]
    fn openai_whole_reply() {
        let s = setup("<tool_call>");
        assert_eq!(s.dialect, Dialect::Hermes);
        let (m, has) = openai_message(REPLY.into(), Some(&s), ids());
        assert!(has);
        assert_eq!(m["content"], "Checking.");
        assert_eq!(m["tool_calls"][0]["id"], "id1");
        assert_eq!(m["tool_calls"][0]["type"], "function");
        assert_eq!(m["tool_calls"][0]["function"]["name"], "get_weather");
        assert_eq!(m["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
        let (m, has) = openai_message(REPLY.into(), None, ids());
        assert!(!has);
        assert_eq!(m["content"], REPLY);
        let (m, _) = openai_message("<tool_call>{broken".into(), Some(&s), ids());
        assert_eq!(m["content"], "<tool_call>{broken");
        assert!(m.get("tool_calls").is_none());
    }

    #[test]
    fn anthropic_whole_reply() {
        let s = setup("<tool_call>");
        let (blocks, has) = anthropic_content(REPLY.into(), Some(&s), ids());
        assert!(has);
        assert_eq!(blocks[0], json!({"type": "text", "text": "Checking."}));
        assert_eq!(
            blocks[1],
            json!({"type": "tool_use", "id": "id1", "name": "get_weather", "input": {"city": "Paris"}})
        );
        let (blocks, has) = anthropic_content(String::new(), Some(&s), ids());
        assert!(!has);
        assert_eq!(blocks, vec![json!({"type": "text", "text": ""})]);
    }

    #[test]
    fn openai_stream_deltas() {
        let s = setup("<tool_call>");
        let mut d = OpenAiDeltas::new(Some(&s));
        let mut id = ids();
        let mut out = Vec::new();
        for piece in REPLY.split_inclusive(' ') {
            out.extend(d.push(piece.to_owned(), &mut id));
        }
        out.extend(d.finish(&mut id));
        assert!(d.has_calls());
        let text: String = out.iter().filter_map(|v| v["content"].as_str()).collect();
        assert_eq!(text.trim(), "Checking.");
        let calls: Vec<&Value> = out.iter().filter(|v| v.get("tool_calls").is_some()).collect();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0]["tool_calls"][0]["function"]["name"], "get_weather");
        assert_eq!(calls[0]["tool_calls"][0]["id"], "id1");
        assert_eq!(calls[1]["tool_calls"][0]["index"], 0);
        assert_eq!(calls[1]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
    }

    #[test]
    fn anthropic_stream_blocks() {
        let s = setup("<tool_call>");
        let mut b = AnthropicBlocks::new(Some(&s));
        let mut id = ids();
        let mut evs = b.start();
        for piece in REPLY.split_inclusive('\n') {
            evs.extend(b.push(piece.to_owned(), &mut id));
        }
        evs.extend(b.finish(&mut id));
        let names: Vec<&str> = evs.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop"
            ]
        );
        assert_eq!(evs[3].1["content_block"]["type"], "tool_use");
        assert_eq!(evs[3].1["content_block"]["name"], "get_weather");
        assert_eq!(evs[3].1["index"], 1);
        assert_eq!(evs[4].1["delta"]["type"], "input_json_delta");
        assert_eq!(evs[4].1["delta"]["partial_json"], "{\"city\":\"Paris\"}");
        assert!(b.has_calls());
        // Without tools: the text block opens at once and closes at the end.
        let mut b = AnthropicBlocks::new(None);
        let mut evs = b.start();
        evs.extend(b.push(REPLY.into(), &mut id));
        evs.extend(b.finish(&mut id));
        let names: Vec<&str> = evs.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["content_block_start", "content_block_delta", "content_block_stop"]);
    }
}
