//! JSON calls without `<tool_call>` tags: Llama 3.x (`{"name": "f", "parameters": {...}}`,
//! optionally after `<|python_tag|>`, several separated by `;`), Mistral
//! (`[TOOL_CALLS][{"name": "f", "arguments": {...}}]`), and a bare JSON call or list of calls
//! opening the reply.
//!
//! Calls in a ```` ```json ```` fence (as Qwen2.5-Coder often writes them, optionally with
//! `<tool_call>` tags inside) are read too.
//!
//! A bare or fenced call (no marker) must carry an arguments key and, when tools were declared, name one
//! of them, so that a JSON answer like `{"name": "Ada", "age": 36}` is not taken for a call.

use serde_json::Value;

use super::{call_from_json, calls_from_json, json_prefix, Parsed, ParsedCall};

/// A fenced JSON block.
pub const FENCE: &str = "```json";

/// Llama 3's marker before a call.
pub const PYTHON_TAG: &str = "<|python_tag|>";
/// Mistral's marker before a list of calls.
pub const TOOL_CALLS: &str = "[TOOL_CALLS]";

/// Split `text` into content and JSON calls; `tools` are the declared tools (OpenAI JSON).
pub fn parse(text: &str, tools: &[Value]) -> Parsed {
    for marker in [PYTHON_TAG, TOOL_CALLS] {
        if let Some(at) = text.find(marker) {
            let (calls, used) = sequence(&text[at + marker.len()..], calls_from_json);
            if !calls.is_empty() {
                let content = format!("{}{}", &text[..at], &text[at + marker.len() + used..]);
                return Parsed { content, calls };
            }
        }
    }
    if let Some(p) = fenced(text, tools) {
        return p;
    }
    let trimmed = text.trim_start();
    if !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
        return Parsed { content: text.to_owned(), calls: Vec::new() };
    }
    let (calls, used) = sequence(text, |v| bare_calls(v, tools));
    Parsed { content: text[used..].to_owned(), calls }
}

/// Calls in ```` ```json ```` fences; `None` when no fence holds only calls.
fn fenced(text: &str, tools: &[Value]) -> Option<Parsed> {
    let mut out = Parsed::default();
    let mut rest = text;
    while let Some(at) = rest.find(FENCE) {
        let body = &rest[at + FENCE.len()..];
        let end = body.find("```");
        let inner = &body[..end.unwrap_or(body.len())];
        let inner_t = inner.trim();
        let inner_t = inner_t.strip_prefix(super::hermes::OPEN).unwrap_or(inner_t);
        let inner_t = inner_t.strip_suffix(super::hermes::CLOSE).unwrap_or(inner_t);
        let (calls, used) = sequence(inner_t, |v| bare_calls(v, tools));
        if calls.is_empty() || !inner_t[used..].trim().is_empty() {
            out.content.push_str(&rest[..at + FENCE.len()]);
            rest = body;
            continue;
        }
        out.content.push_str(&rest[..at]);
        out.calls.extend(calls);
        rest = end.map_or("", |e| &body[e + 3..]);
    }
    out.content.push_str(rest);
    (!out.calls.is_empty()).then_some(out)
}

/// JSON values one after another (separated by whitespace or `;`), each giving calls through
/// `f`; stops at the first that does not. Returns the calls and the bytes used.
fn sequence(s: &str, f: impl Fn(&Value) -> Option<Vec<ParsedCall>>) -> (Vec<ParsedCall>, usize) {
    let mut calls = Vec::new();
    let mut used = 0;
    loop {
        let rest = &s[used..];
        let skip = rest.len() - rest.trim_start_matches(|c: char| c.is_whitespace() || c == ';').len();
        let Some((v, n)) = json_prefix(&rest[skip..]) else { break };
        let Some(more) = f(&v) else { break };
        calls.extend(more);
        used += skip + n;
    }
    (calls, used)
}

/// Calls from an unmarked JSON value (stricter than [`calls_from_json`]).
fn bare_calls(v: &Value, tools: &[Value]) -> Option<Vec<ParsedCall>> {
    let one = |v: &Value| -> Option<ParsedCall> {
        let obj = v.as_object()?;
        let inner = match obj.get("function") {
            Some(f @ Value::Object(_)) => f.as_object()?,
            _ => obj,
        };
        if !["arguments", "parameters"].iter().any(|k| inner.contains_key(*k)) {
            return None;
        }
        let call = call_from_json(v)?;
        if !tools.is_empty() && !tools.iter().any(|t| tool_name(t) == Some(call.name.as_str())) {
            return None;
        }
        Some(call)
    };
    match v {
        Value::Array(items) if !items.is_empty() => items.iter().map(one).collect(),
        Value::Object(_) => one(v).map(|c| vec![c]),
        _ => None,
    }
}

/// The name of a declared tool (OpenAI `{"type": "function", "function": {"name"}}`).
pub(crate) fn tool_name(tool: &Value) -> Option<&str> {
    tool.get("function").and_then(|f| f.get("name")).or_else(|| tool.get("name")).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: &str) -> ParsedCall {
        ParsedCall { name: name.into(), arguments: args.into() }
    }

    fn tools() -> Vec<Value> {
        vec![json!({"type": "function", "function": {"name": "get_weather", "parameters": {}}})]
    }

    #[test]
    fn llama3_forms() {
        let p = parse("<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", &tools());
        assert_eq!(p.calls, vec![call("get_weather", "{\"city\":\"Oslo\"}")]);
        assert_eq!(p.content, "");
        let p = parse("{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}", &[]);
        assert_eq!(p.calls, vec![call("get_weather", "{\"city\":\"Rome\"}")]);
        let p = parse(
            "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}<|eom_id|>",
            &[],
        );
        assert_eq!(p.calls, vec![call("a", "{}"), call("b", "{\"x\":1}")]);
        assert_eq!(p.content, "<|eom_id|>");
    }

    #[test]
    fn mistral_list() {
        let p = parse(
            "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": \"x\"}}, {\"name\": \"b\", \"arguments\": {}}]",
            &[],
        );
        assert_eq!(p.calls, vec![call("a", "{\"q\":\"x\"}"), call("b", "{}")]);
    }

    #[test]
    fn fenced_calls() {
        let t = "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"Paris\"}\n}\n```";
        let p = parse(t, &tools());
        assert_eq!(p.calls, vec![call("get_weather", "{\"city\":\"Paris\"}")]);
        assert_eq!(p.content, "");
        let t = "Here:\n```json\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>\n```\nbye";
        let p = parse(t, &tools());
        assert_eq!((p.calls.len(), p.content.as_str()), (1, "Here:\n\nbye"));
        // A JSON answer in a fence is text.
        let t = "```json\n{\"name\": \"Ada\", \"age\": 36}\n```";
        assert!(parse(t, &tools()).calls.is_empty());
    }

    #[test]
    fn json_answers_are_not_calls() {
        let t = "{\"name\": \"Ada\", \"age\": 36}";
        assert!(parse(t, &[]).calls.is_empty());
        let t = "{\"name\": \"other_tool\", \"arguments\": {}}";
        assert!(parse(t, &tools()).calls.is_empty());
        assert_eq!(parse(t, &[]).calls.len(), 1);
        assert!(parse("[1, 2, 3]", &[]).calls.is_empty());
        assert!(parse("{\"name\": \"get_weather\", \"parameters\": {\"city\": ", &tools()).calls.is_empty());
    }
}
