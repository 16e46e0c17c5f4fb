//! Tool calls in model output: each model family writes them in its own dialect, picked from
//! the chat template's text (as llama.cpp does, by markers the template contains).
//!
//! | dialect | looks like | template marker |
//! | --- | --- | --- |
//! | [`Dialect::Hermes`] | `<tool_call>{"name": .., "arguments": {..}}</tool_call>` (Qwen 2.5, Hermes, SmolLM) | `<tool_call>` |
//! | [`Dialect::QwenXml`] | `<tool_call><function=NAME><parameter=P>v</parameter></function></tool_call>` (Qwen3-Coder) | `<function=` + `<parameter=` |
//! | [`Dialect::Llama3`] | `<\|python_tag\|>{"name": .., "parameters": {..}}` (Llama 3.x) | `<\|python_tag\|>` / `ipython` |
//! | [`Dialect::Mistral`] | `[TOOL_CALLS][{"name": .., "arguments": {..}}]` | `[TOOL_CALLS]` |
//! | [`Dialect::Gemma`] | `[name(a=1, b="x")]` or a ```` ```tool_code ```` block | `<start_of_turn>` / `tool_code` |
//! | [`Dialect::Generic`] | any of the JSON forms above | none of these |
//!
//! The JSON dialects also read a call in a ```` ```json ```` fence, as small models often write.
//!
//! Parsing never fails: output that does not hold a well-formed call stays plain text. A
//! missing opener (`{"name": ..}</tool_call>` with no `<tool_call>`) and trailing junk after a
//! call are tolerated. [`ToolStream`] does the same incrementally for streamed responses,
//! holding text back while a call may be starting.

pub mod gemma;
pub mod gemma4;
pub mod grammar;
pub mod harmony;
pub mod hermes;
pub mod llama_json;
pub mod polyfill;
pub mod qwen_xml;
pub mod respond;
pub mod stream;

use serde_json::Value;

use crate::errors::ApiError;
pub use stream::{ToolEvent, ToolStream};

/// How a model family writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `<tool_call>` JSON (Hermes 2 Pro, Qwen 2.5, SmolLM2); the body may also be a JSON list.
    Hermes,
    /// Qwen3-Coder's XML form inside `<tool_call>`.
    QwenXml,
    /// Llama 3.x: a JSON object with `name` and `parameters`, optionally after `<|python_tag|>`.
    Llama3,
    /// Mistral: `[TOOL_CALLS]` then a JSON list of calls.
    Mistral,
    /// Gemma: a Python-style call list `[f(a=1)]` or a ```` ```tool_code ```` block.
    Gemma,
    /// Gemma 4: `<|tool_call>call:f{a:<|"|>x<|"|>}<tool_call|>`.
    Gemma4,
    /// gpt-oss's harmony: a message `to=functions.f` with JSON arguments.
    Harmony,
    /// Unknown template: the JSON forms (`<tool_call>`, bare `{"name": ..}`, `[TOOL_CALLS]`).
    Generic,
}

impl Dialect {
    /// The dialect a chat template's source asks for.
    pub fn detect(template_source: &str) -> Self {
        let has = |s: &str| template_source.contains(s);
        if has(gemma4::OPEN) {
            Dialect::Gemma4
        } else if has("to=functions.") || has("<|channel|>commentary") {
            Dialect::Harmony
        } else if has("<function=") && has("<parameter=") {
            Dialect::QwenXml
        } else if has("<tool_call>") {
            Dialect::Hermes
        } else if has("<|python_tag|>") || has("ipython") {
            Dialect::Llama3
        } else if has("[TOOL_CALLS]") {
            Dialect::Mistral
        } else if has("tool_code") || has("<start_of_turn>") {
            Dialect::Gemma
        } else {
            Dialect::Generic
        }
    }

    /// Markers that start a call anywhere in the output.
    pub(crate) fn openers(self) -> &'static [&'static str] {
        match self {
            Dialect::Hermes | Dialect::Generic => &["<tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "```json"],
            Dialect::QwenXml => &["<tool_call>", "<function="],
            Dialect::Llama3 => &["<|python_tag|>", "```json"],
            Dialect::Mistral => &["[TOOL_CALLS]", "```json"],
            Dialect::Gemma => &["```tool_code", "<tool_call>"],
            Dialect::Gemma4 => &[gemma4::OPEN],
            Dialect::Harmony => harmony::OPENERS,
        }
    }

    /// The shape a call may have when it is the very start of the output, with no opener.
    pub(crate) fn bare_start(self) -> BareStart {
        match self {
            Dialect::Hermes | Dialect::Generic | Dialect::Llama3 | Dialect::Mistral => BareStart::JsonObject,
            Dialect::QwenXml | Dialect::Gemma4 | Dialect::Harmony => BareStart::None,
            Dialect::Gemma => BareStart::PythonList,
        }
    }
}

/// A call that may open the output without any marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BareStart {
    /// Only marked calls.
    None,
    /// `{"name": ...` (or a list of such objects).
    JsonObject,
    /// `[name(...)]`.
    PythonList,
}

/// One parsed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedCall {
    /// The function name.
    pub name: String,
    /// The arguments as a JSON object in text (OpenAI's `function.arguments`).
    pub arguments: String,
}

impl ParsedCall {
    /// The arguments as a JSON value (Anthropic's `input`); `{}` if they do not parse.
    pub fn input(&self) -> Value {
        serde_json::from_str(&self.arguments).unwrap_or_else(|_| Value::Object(Default::default()))
    }
}

/// A reply split into text and calls.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    /// The text outside the calls (the whole text when there are none).
    pub content: String,
    /// The calls, in order.
    pub calls: Vec<ParsedCall>,
}

/// Split a whole reply into text and tool calls. `tools` (OpenAI JSON) gives parameter types
/// to dialects that write untyped values (Qwen XML).
pub fn parse(dialect: Dialect, text: &str, tools: &[Value]) -> Parsed {
    let parsed = match dialect {
        Dialect::Hermes | Dialect::Generic | Dialect::Mistral | Dialect::Llama3 => {
            let p = hermes::parse(text);
            if p.calls.is_empty() {
                llama_json::parse(text, tools)
            } else {
                p
            }
        }
        Dialect::QwenXml => {
            let p = qwen_xml::parse(text, tools);
            if p.calls.is_empty() {
                hermes::parse(text)
            } else {
                p
            }
        }
        Dialect::Gemma => {
            let p = gemma::parse(text);
            if p.calls.is_empty() {
                hermes::parse(text)
            } else {
                p
            }
        }
        Dialect::Gemma4 => gemma4::parse(text),
        Dialect::Harmony => harmony::parse(text),
    };
    if parsed.calls.is_empty() {
        return Parsed { content: text.to_owned(), calls: Vec::new() };
    }
    Parsed { content: parsed.content.trim().to_owned(), calls: parsed.calls }
}

/// `tool_choice` of a request. `Required` and `Named` are enforced with a grammar for the
/// dialects [`grammar`] supports (named: only that tool is offered, too); elsewhere the model
/// is only asked and whatever it writes is parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (the default).
    Auto,
    /// No tools: they are not shown to the model and output is not parsed.
    None,
    /// At least one call (OpenAI `required`, Anthropic `any`).
    Required,
    /// A call of this function.
    Named(String),
}

impl ToolChoice {
    /// OpenAI's `tool_choice`: `"none" | "auto" | "required" | {"type": "function",
    /// "function": {"name"}}`.
    pub fn from_openai(v: Option<&Value>) -> Result<Self, ApiError> {
        match v {
            None | Some(Value::Null) => Ok(ToolChoice::Auto),
            Some(Value::String(s)) => match s.as_str() {
                "auto" => Ok(ToolChoice::Auto),
                "none" => Ok(ToolChoice::None),
                "required" => Ok(ToolChoice::Required),
                other => Err(ApiError::bad(format!("unknown tool_choice '{other}'"), "tool_choice")),
            },
            Some(v) => v
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .map(|n| ToolChoice::Named(n.to_owned()))
                .ok_or_else(|| ApiError::bad("tool_choice must name a function", "tool_choice")),
        }
    }

    /// Anthropic's `tool_choice`: `{"type": "auto" | "any" | "none" | "tool", "name"}`.
    pub fn from_anthropic(v: Option<&Value>) -> Result<Self, ApiError> {
        let Some(v) = v.filter(|v| !v.is_null()) else { return Ok(ToolChoice::Auto) };
        match v.get("type").and_then(Value::as_str) {
            Some("auto") => Ok(ToolChoice::Auto),
            Some("none") => Ok(ToolChoice::None),
            Some("any") => Ok(ToolChoice::Required),
            Some("tool") => v
                .get("name")
                .and_then(Value::as_str)
                .map(|n| ToolChoice::Named(n.to_owned()))
                .ok_or_else(|| ApiError::bad("tool_choice of type 'tool' needs a name", "tool_choice.name")),
            _ => Err(ApiError::bad("tool_choice.type must be auto, any, tool or none", "tool_choice.type")),
        }
    }
}

/// Tools of a request that uses them: what to show the template and how to parse the reply.
#[derive(Debug, Clone)]
pub struct ToolSetup {
    /// Declared tools (OpenAI JSON), filtered to the named one for a named `tool_choice`.
    pub tools: Vec<Value>,
    /// How the model writes calls.
    pub dialect: Dialect,
    /// The request's `tool_choice`.
    pub choice: ToolChoice,
}

impl ToolSetup {
    /// The setup for `tools` under `choice`; `None` when there are no tools or the choice is
    /// `none` (then tools are neither shown nor parsed).
    pub fn new(tools: Vec<Value>, choice: ToolChoice, template_source: &str) -> Result<Option<Self>, ApiError> {
        for (i, t) in tools.iter().enumerate() {
            if llama_json::tool_name(t).is_none() {
                return Err(ApiError::bad("each tool needs a function name", format!("tools[{i}]")));
            }
        }
        if tools.is_empty() && matches!(choice, ToolChoice::Required | ToolChoice::Named(_)) {
            return Err(ApiError::bad("tool_choice asks for a tool call, but the request has no tools", "tool_choice"));
        }
        if tools.is_empty() || choice == ToolChoice::None {
            return Ok(None);
        }
        let tools = match &choice {
            ToolChoice::Named(n) => {
                let named: Vec<Value> =
                    tools.into_iter().filter(|t| llama_json::tool_name(t) == Some(n.as_str())).collect();
                if named.is_empty() {
                    return Err(ApiError::bad(
                        format!("tool_choice names '{n}', which is not in tools"),
                        "tool_choice",
                    ));
                }
                named
            }
            _ => tools,
        };
        Ok(Some(Self { tools, dialect: Dialect::detect(template_source), choice }))
    }

    /// Parse a whole reply.
    pub fn parse(&self, text: &str) -> Parsed {
        parse(self.dialect, text, &self.tools)
    }

    /// A streaming parser.
    pub fn stream(&self) -> ToolStream {
        ToolStream::new(self.dialect, self.tools.clone())
    }
}

/// A call from a JSON value: `{"name", "arguments" | "parameters" | "args" | "input"}`, or
/// OpenAI's `{"function": {"name", "arguments"}}`. Arguments may be an object or a string
/// holding one; absent arguments are `{}`.
pub(crate) fn call_from_json(v: &Value) -> Option<ParsedCall> {
    let obj = v.as_object()?;
    if let Some(f @ Value::Object(_)) = obj.get("function") {
        return call_from_json(f);
    }
    let name = obj.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    let args = ["arguments", "parameters", "args", "input"].iter().find_map(|k| obj.get(*k));
    let arguments = match args {
        None | Some(Value::Null) => "{}".to_owned(),
        Some(a @ Value::Object(_)) => a.to_string(),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(a @ Value::Object(_)) => a.to_string(),
            _ => return None,
        },
        Some(_) => return None,
    };
    Some(ParsedCall { name: name.to_owned(), arguments })
}

/// Calls from a JSON value: one call object or a list of them (all must be calls).
pub(crate) fn calls_from_json(v: &Value) -> Option<Vec<ParsedCall>> {
    match v {
        Value::Array(items) if !items.is_empty() => items.iter().map(call_from_json).collect(),
        Value::Object(_) => call_from_json(v).map(|c| vec![c]),
        _ => None,
    }
}

/// The first JSON value at the start of `s` (after whitespace) and the bytes it used; what
/// follows it is left alone.
pub(crate) fn json_prefix(s: &str) -> Option<(Value, usize)> {
    let lead = s.len() - s.trim_start().len();
    let mut it = serde_json::Deserializer::from_str(&s[lead..]).into_iter::<Value>();
    match it.next() {
        Some(Ok(v)) => Some((v, lead + it.byte_offset())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_dialects_from_template_markers() {
        assert_eq!(Dialect::detect("{{ '<tool_call>\\n' }}"), Dialect::Hermes);
        assert_eq!(Dialect::detect("<tool_call>\n<function=x>\n<parameter=y>"), Dialect::QwenXml);
        assert_eq!(Dialect::detect("<|start_header_id|>ipython<|end_header_id|>"), Dialect::Llama3);
        assert_eq!(Dialect::detect("[TOOL_CALLS]"), Dialect::Mistral);
        assert_eq!(Dialect::detect("<start_of_turn>user"), Dialect::Gemma);
        assert_eq!(Dialect::detect("<|im_start|>"), Dialect::Generic);
    }

    #[test]
    fn call_shapes() {
        let c = call_from_json(&serde_json::json!({"name": "f", "arguments": "{\"a\": 1}"})).unwrap();
        assert_eq!(c, ParsedCall { name: "f".into(), arguments: "{\"a\":1}".into() });
        let c = call_from_json(&serde_json::json!({"function": {"name": "g"}})).unwrap();
        assert_eq!(c.arguments, "{}");
        assert!(call_from_json(&serde_json::json!({"name": "f", "arguments": "nope"})).is_none());
        assert!(call_from_json(&serde_json::json!({"arguments": {}})).is_none());
        assert_eq!(json_prefix("  {\"a\": 1} junk").map(|(_, n)| n), Some(10));
    }

    #[test]
    fn plain_text_stays_text() {
        for d in [Dialect::Hermes, Dialect::QwenXml, Dialect::Llama3, Dialect::Gemma, Dialect::Generic] {
            let p = parse(d, "Hello! {not json} [x] <tool_call>", &[]);
            assert_eq!(p.content, "Hello! {not json} [x] <tool_call>");
            assert!(p.calls.is_empty());
        }
    }
}
