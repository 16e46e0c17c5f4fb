//! Hermes / Qwen 2.5 calls: `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`, one
//! or several, with text around them. The body may also be a JSON list of calls (SmolLM2).
//! A body missing its `<tool_call>` opener but ending in `</tool_call>` is accepted, and so is
//! junk between the JSON and the closing tag. A block that does not parse stays text.

use super::{calls_from_json, json_prefix, Parsed};

/// The opening tag.
pub const OPEN: &str = "<tool_call>";
/// The closing tag.
pub const CLOSE: &str = "</tool_call>";

/// Split `text` into content and `<tool_call>` calls.
pub fn parse(text: &str) -> Parsed {
    let mut out = Parsed::default();
    let mut rest = text;
    // Missing opener: the reply starts with a JSON call closed by `</tool_call>`.
    if let Some((v, used)) = json_prefix(rest) {
        let after = rest[used..].trim_start();
        if after.starts_with(CLOSE) && !rest[..used].contains(OPEN) {
            if let Some(calls) = calls_from_json(&v) {
                out.calls.extend(calls);
                rest = &after[CLOSE.len()..];
            }
        }
    }
    while let Some(at) = rest.find(OPEN) {
        let body = &rest[at + OPEN.len()..];
        let Some((calls, used)) = block(body) else {
            // Not a call: keep the tag as text and look further on.
            out.content.push_str(&rest[..at + OPEN.len()]);
            rest = body;
            continue;
        };
        out.content.push_str(&rest[..at]);
        out.calls.extend(calls);
        rest = &body[used..];
    }
    out.content.push_str(rest);
    out
}

/// The calls of one block body (after the opener) and the bytes it spans, closing tag
/// included when present.
fn block(body: &str) -> Option<(Vec<super::ParsedCall>, usize)> {
    let (v, used) = json_prefix(body)?;
    let calls = calls_from_json(&v)?;
    let tail = &body[used..];
    let end = match tail.find(CLOSE) {
        // Junk up to the closing tag is dropped unless another call starts in it.
        Some(c) if !tail[..c].contains(OPEN) => used + c + CLOSE.len(),
        _ => used,
    };
    Some((calls, end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ParsedCall;

    fn call(name: &str, args: &str) -> ParsedCall {
        ParsedCall { name: name.into(), arguments: args.into() }
    }

    #[test]
    fn one_and_several_calls() {
        let p = parse("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
        assert_eq!(p.calls, vec![call("get_weather", "{\"city\":\"Paris\"}")]);
        assert_eq!(p.content.trim(), "");
        let p = parse(
            "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n\
             <tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>",
        );
        assert_eq!(p.calls, vec![call("a", "{}"), call("b", "{\"x\":[1,2]}")]);
        assert_eq!(p.content.trim(), "Let me check.");
    }

    #[test]
    fn list_bodies_missing_opener_and_junk() {
        let p = parse("<tool_call>[{\"name\": \"a\", \"arguments\": {\"q\": 1}}, {\"name\": \"b\"}]</tool_call>");
        assert_eq!(p.calls, vec![call("a", "{\"q\":1}"), call("b", "{}")]);
        let p = parse("{\"name\": \"a\", \"arguments\": {\"q\": \"x\"}}\n</tool_call>");
        assert_eq!(p.calls, vec![call("a", "{\"q\":\"x\"}")]);
        assert_eq!(p.content, "");
        let p = parse("<tool_call>\n{\"name\": \"a\", \"arguments\": {}}}\n</tool_call> and then");
        assert_eq!(p.calls, vec![call("a", "{}")]);
        assert_eq!(p.content, " and then");
        // Unclosed at the end of the reply (token limit right after the JSON).
        let p = parse("<tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\": true}}");
        assert_eq!(p.calls, vec![call("a", "{\"k\":true}")]);
    }

    #[test]
    fn broken_blocks_stay_text() {
        let t = "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\": </tool_call>";
        let p = parse(t);
        assert!(p.calls.is_empty());
        assert_eq!(p.content, t);
        let t = "I would use <tool_call> tags.";
        assert_eq!(parse(t).content, t);
    }
}
