//! Qwen3-Coder's XML calls:
//!
//! ```text
//! <tool_call>
//! <function=get_weather>
//! <parameter=city>
//! Paris
//! </parameter>
//! </function>
//! </tool_call>
//! ```
//!
//! Values are untyped text: a parameter the tool's JSON schema declares as a string stays a
//! string; others are read as JSON when they parse (numbers, booleans, objects), else kept as
//! strings. A missing `<tool_call>` opener or missing closing tags are tolerated.

use serde_json::{Map, Value};

use super::hermes::{CLOSE, OPEN};
use super::llama_json::tool_name;
use super::{Parsed, ParsedCall};

const FUNC: &str = "<function=";
const FUNC_END: &str = "</function>";
const PARAM: &str = "<parameter=";
const PARAM_END: &str = "</parameter>";

/// Split `text` into content and XML calls; `tools` give parameter types.
pub fn parse(text: &str, tools: &[Value]) -> Parsed {
    let mut out = Parsed::default();
    let mut rest = text;
    while let Some(at) = rest.find(FUNC) {
        let Some((call, used)) = function(&rest[at + FUNC.len()..], tools) else {
            out.content.push_str(&rest[..at + FUNC.len()]);
            rest = &rest[at + FUNC.len()..];
            continue;
        };
        // Drop a `<tool_call>` opener right before the function.
        let before = &rest[..at];
        let before = match before.trim_end().strip_suffix(OPEN) {
            Some(b) => b,
            None => before,
        };
        out.content.push_str(before);
        out.calls.push(call);
        rest = &rest[at + FUNC.len() + used..];
        let after = rest.trim_start();
        if let Some(a) = after.strip_prefix(CLOSE) {
            rest = a;
        }
    }
    out.content.push_str(rest);
    out
}

/// One function after `<function=`: its call and the bytes used (`</function>` included).
fn function(s: &str, tools: &[Value]) -> Option<(ParsedCall, usize)> {
    let close = s.find('>')?;
    let name = s[..close].trim();
    if name.is_empty() || name.contains(['<', '\n']) {
        return None;
    }
    let schema = tools.iter().find(|t| tool_name(t) == Some(name)).and_then(properties);
    let mut args = Map::new();
    let mut pos = close + 1;
    loop {
        let rest = &s[pos..];
        let trimmed = rest.trim_start();
        let skip = rest.len() - trimmed.len();
        if let Some(p) = trimmed.strip_prefix(PARAM) {
            let gt = p.find('>')?;
            let key = p[..gt].trim();
            let body = &p[gt + 1..];
            // The value ends at its closing tag, or where the next parameter or the function ends.
            let end = [PARAM_END, PARAM, FUNC_END].iter().filter_map(|m| body.find(m).map(|i| (i, *m))).min();
            let (vlen, tag) = end.map_or((body.len(), 0), |(i, m)| (i, if m == PARAM_END { m.len() } else { 0 }));
            args.insert(key.to_owned(), value(&body[..vlen], schema.and_then(|s| s.get(key))));
            pos += skip + PARAM.len() + gt + 1 + vlen + tag;
        } else if let Some(_after) = trimmed.strip_prefix(FUNC_END) {
            pos += skip + FUNC_END.len();
            break;
        } else if trimmed.is_empty() || trimmed.starts_with(CLOSE) {
            // Unclosed function at the end of the reply or of its block.
            break;
        } else {
            return None;
        }
    }
    Some((ParsedCall { name: name.to_owned(), arguments: Value::Object(args).to_string() }, pos))
}

/// `parameters.properties` of a tool.
fn properties(tool: &Value) -> Option<&Map<String, Value>> {
    let f = tool.get("function").unwrap_or(tool);
    f.get("parameters").and_then(|p| p.get("properties")).and_then(Value::as_object)
}

/// A parameter's text as JSON, by its schema where known.
fn value(raw: &str, schema: Option<&Value>) -> Value {
    let text = raw.strip_prefix('\n').unwrap_or(raw);
    let text = text.strip_suffix('\n').unwrap_or(text);
    let wants_string = schema.and_then(|s| s.get("type")).is_some_and(|t| match t {
        Value::String(t) => t == "string",
        Value::Array(ts) => ts.iter().any(|t| t == "string") && ts.len() <= 2,
        _ => false,
    });
    if wants_string {
        return Value::String(text.to_owned());
    }
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(v) => v,
        Err(_) => match text.trim() {
            "True" => Value::Bool(true),
            "False" => Value::Bool(false),
            "None" => Value::Null,
            _ => Value::String(text.to_owned()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: &str) -> ParsedCall {
        ParsedCall { name: name.into(), arguments: args.into() }
    }

    #[test]
    fn typed_by_schema() {
        let tools = vec![json!({"type": "function", "function": {"name": "f", "parameters": {"properties": {
            "zip": {"type": "string"}, "n": {"type": "integer"}}}}})];
        let t = "I'll call it.\n<tool_call>\n<function=f>\n<parameter=zip>\n01234\n</parameter>\n\
                 <parameter=n>\n7\n</parameter>\n<parameter=opts>\n{\"a\": true}\n</parameter>\n</function>\n</tool_call>";
        let p = parse(t, &tools);
        assert_eq!(p.calls, vec![call("f", "{\"zip\":\"01234\",\"n\":7,\"opts\":{\"a\":true}}")]);
        assert_eq!(p.content.trim(), "I'll call it.");
    }

    #[test]
    fn several_calls_and_missing_tags() {
        let t = "<tool_call>\n<function=a>\n<parameter=x>\nhello world\n</parameter>\n</function>\n</tool_call>\n\
                 <function=b>\n<parameter=y>\nTrue\n<parameter=z>\n2.5\n</function>";
        let p = parse(t, &[]);
        assert_eq!(p.calls, vec![call("a", "{\"x\":\"hello world\"}"), call("b", "{\"y\":true,\"z\":2.5}")]);
        assert_eq!(p.content.trim(), "");
        // Cut off by the token limit inside a value.
        let p = parse("<tool_call>\n<function=a>\n<parameter=x>\npartial", &[]);
        assert_eq!(p.calls, vec![call("a", "{\"x\":\"partial\"}")]);
    }

    #[test]
    fn junk_is_text() {
        let t = "Use <function=> or <function=x> like this: hi";
        let p = parse(t, &[]);
        assert!(p.calls.is_empty());
        assert_eq!(p.content, t);
    }
}
