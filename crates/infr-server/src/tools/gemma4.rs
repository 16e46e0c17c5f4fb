//! Gemma 4's tool calls: `<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>`.
//! Keys are bare words, strings sit between `<|"|>` markers, and values nest as `{...}` and
//! `[...]`; numbers, `true`, `false` and `null` are literals. Turned into JSON arguments.

use serde_json::{Map, Number, Value};

use super::{Parsed, ParsedCall};

/// The marker that opens a call.
pub const OPEN: &str = "<|tool_call>";
/// The marker that closes a call.
pub const CLOSE: &str = "<tool_call|>";
/// The marker around string values.
pub const QUOTE: &str = "<|\"|>";

/// Split `text` into content and Gemma 4 calls; a block that does not parse stays text.
pub fn parse(text: &str) -> Parsed {
    let mut out = Parsed::default();
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        let body = &rest[at + OPEN.len()..];
        match call(body) {
            Some((c, used)) => {
                out.content.push_str(&rest[..at]);
                out.calls.push(c);
                rest = &body[used..];
            }
            None => {
                out.content.push_str(&rest[..at + OPEN.len()]);
                rest = body;
            }
        }
    }
    out.content.push_str(rest);
    out
}

/// One call after its opener: `call:NAME{...}` and the closer (optional at the very end).
fn call(s: &str) -> Option<(ParsedCall, usize)> {
    let mut c = Cursor { s, pos: 0 };
    c.ws();
    c.eat("call:")?;
    let start = c.pos;
    while c.peek().is_some_and(|ch| ch != '{' && !ch.is_whitespace()) {
        c.pos += c.peek()?.len_utf8();
    }
    let name = s[start..c.pos].to_owned();
    if name.is_empty() {
        return None;
    }
    c.ws();
    let Value::Object(args) = c.object()? else { return None };
    c.ws();
    if c.eat(CLOSE).is_none() && !c.rest().trim().is_empty() {
        return None;
    }
    let arguments = Value::Object(args).to_string();
    Some((ParsedCall { name, arguments }, c.pos))
}

struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

impl Cursor<'_> {
    fn rest(&self) -> &str {
        &self.s[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn ws(&mut self) {
        let r = self.rest();
        self.pos += r.len() - r.trim_start().len();
    }

    fn eat(&mut self, lit: &str) -> Option<()> {
        self.rest().starts_with(lit).then(|| self.pos += lit.len())
    }

    /// `{key:value,...}` as a JSON object.
    fn object(&mut self) -> Option<Value> {
        self.eat("{")?;
        let mut m = Map::new();
        self.ws();
        if self.eat("}").is_some() {
            return Some(Value::Object(m));
        }
        loop {
            self.ws();
            let key = self.key()?;
            self.ws();
            self.eat(":")?;
            self.ws();
            let v = self.value()?;
            m.insert(key, v);
            self.ws();
            if self.eat(",").is_some() {
                continue;
            }
            self.eat("}")?;
            return Some(Value::Object(m));
        }
    }

    fn key(&mut self) -> Option<String> {
        if self.rest().starts_with(QUOTE) {
            return self.string();
        }
        let r = self.rest();
        let n = r.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.')).unwrap_or(r.len());
        let key = r[..n].to_owned();
        self.pos += n;
        (n > 0).then_some(key)
    }

    fn string(&mut self) -> Option<String> {
        self.eat(QUOTE)?;
        let end = self.rest().find(QUOTE)?;
        let v = self.rest()[..end].to_owned();
        self.pos += end + QUOTE.len();
        Some(v)
    }

    fn value(&mut self) -> Option<Value> {
        let r = self.rest();
        if r.starts_with(QUOTE) {
            return self.string().map(Value::String);
        }
        if r.starts_with('{') {
            return self.object();
        }
        if r.starts_with('[') {
            self.eat("[")?;
            let mut items = Vec::new();
            self.ws();
            if self.eat("]").is_some() {
                return Some(Value::Array(items));
            }
            loop {
                self.ws();
                items.push(self.value()?);
                self.ws();
                if self.eat(",").is_some() {
                    continue;
                }
                self.eat("]")?;
                return Some(Value::Array(items));
            }
        }
        for (lit, v) in [("true", Value::Bool(true)), ("false", Value::Bool(false)), ("null", Value::Null)] {
            if r.starts_with(lit) {
                self.pos += lit.len();
                return Some(v);
            }
        }
        let n = r.find(|c: char| !(c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E'))).unwrap_or(r.len());
        let num: Number = serde_json::from_str(&r[..n]).ok()?;
        self.pos += n;
        Some(Value::Number(num))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_with_nested_values() {
        let text = "Let me check.<|tool_call>call:get_weather{city:<|\"|>Paris, FR<|\"|>,days:3,\
                    opts:{metric:true,tags:[<|\"|>a<|\"|>,2.5]}}<tool_call|>";
        let p = parse(text);
        assert_eq!(p.content, "Let me check.");
        assert_eq!(p.calls.len(), 1);
        assert_eq!(p.calls[0].name, "get_weather");
        let args: Value = serde_json::from_str(&p.calls[0].arguments).unwrap();
        assert_eq!(
            args,
            serde_json::json!({"city": "Paris, FR", "days": 3, "opts": {"metric": true, "tags": ["a", 2.5]}})
        );
    }

    #[test]
    fn several_calls_empty_args_and_junk() {
        let p = parse("<|tool_call>call:a{}<tool_call|><|tool_call>call:b{x:null}<tool_call|>");
        assert_eq!(p.calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(p.calls[1].arguments, "{\"x\":null}");
        let junk = "<|tool_call>call:a{x:<tool_call|> after";
        let p = parse(junk);
        assert!(p.calls.is_empty());
        assert_eq!(p.content, junk);
        // A call cut off before its closer at the end of the reply still counts.
        assert_eq!(parse("<|tool_call>call:a{n:1}").calls.len(), 1);
    }
}
