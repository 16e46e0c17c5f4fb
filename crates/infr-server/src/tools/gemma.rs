//! Python-style calls (Gemma, Llama 4 and other "pythonic" templates): a list opening the
//! reply, `[get_weather(city="Paris"), get_time(tz='UTC')]`, or a fenced block
//!
//! ~~~text
//! ```tool_code
//! print(default_api.get_weather(city="Paris"))
//! ```
//! ~~~
//!
//! Arguments are keyword arguments with Python literals (strings, numbers, `True`/`False`/
//! `None`, lists, tuples and dicts), turned into JSON.

use serde_json::{Map, Number, Value};

use super::{Parsed, ParsedCall};

/// The fence that opens a code block of calls.
pub const TOOL_CODE: &str = "```tool_code";

/// Split `text` into content and Python-style calls.
pub fn parse(text: &str) -> Parsed {
    let mut out = Parsed::default();
    let lead = text.len() - text.trim_start().len();
    let mut rest = text;
    if text[lead..].starts_with('[') {
        let mut c = Cursor { s: &text[lead..], pos: 0 };
        if let Some(calls) = c.call_list() {
            out.calls = calls;
            rest = &text[lead + c.pos..];
        }
    }
    while let Some(at) = rest.find(TOOL_CODE) {
        let body = &rest[at + TOOL_CODE.len()..];
        let end = body.find("```").unwrap_or(body.len());
        match block_calls(&body[..end]) {
            Some(calls) => {
                out.content.push_str(&rest[..at]);
                out.calls.extend(calls);
                rest = body.get(end + 3..).unwrap_or("");
            }
            None => {
                out.content.push_str(&rest[..at + TOOL_CODE.len()]);
                rest = body;
            }
        }
    }
    out.content.push_str(rest);
    out
}

/// The calls of a `tool_code` block: one statement a line, each `f(...)` or `print(f(...))`.
fn block_calls(body: &str) -> Option<Vec<ParsedCall>> {
    let mut calls = Vec::new();
    for line in body.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let inner = line.strip_prefix("print(").and_then(|l| l.strip_suffix(')')).unwrap_or(line);
        let mut c = Cursor { s: inner, pos: 0 };
        let call = c.call()?;
        c.ws();
        if c.pos != inner.len() {
            return None;
        }
        calls.push(call);
    }
    (!calls.is_empty()).then_some(calls)
}

struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

impl Cursor<'_> {
    fn rest(&self) -> &str {
        &self.s[self.pos..]
    }

    fn ws(&mut self) {
        let r = self.rest();
        self.pos += r.len() - r.trim_start().len();
    }

    fn eat(&mut self, c: char) -> bool {
        self.ws();
        if self.rest().starts_with(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn ident(&mut self) -> Option<&str> {
        self.ws();
        let r = self.rest();
        let n = r.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.' || c == '-')).unwrap_or(r.len());
        if n == 0 || r.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        let start = self.pos;
        self.pos += n;
        Some(&self.s[start..start + n])
    }

    /// `[call, call, ...]`
    fn call_list(&mut self) -> Option<Vec<ParsedCall>> {
        if !self.eat('[') {
            return None;
        }
        let mut calls = Vec::new();
        loop {
            if self.eat(']') && !calls.is_empty() {
                return Some(calls);
            }
            calls.push(self.call()?);
            if !self.eat(',') {
                return self.eat(']').then_some(calls);
            }
        }
    }

    /// `name(key=value, ...)`; a dotted name keeps its last part (`default_api.f` is `f`).
    fn call(&mut self) -> Option<ParsedCall> {
        let full = self.ident()?;
        let name = full.rsplit('.').next().unwrap_or(full).to_owned();
        if name.is_empty() || !self.eat('(') {
            return None;
        }
        let mut args = Map::new();
        loop {
            if self.eat(')') {
                break;
            }
            let key = self.ident()?.to_owned();
            if !self.eat('=') {
                return None;
            }
            let v = self.literal(0)?;
            args.insert(key, v);
            if !self.eat(',') {
                if !self.eat(')') {
                    return None;
                }
                break;
            }
        }
        Some(ParsedCall { name, arguments: Value::Object(args).to_string() })
    }

    fn literal(&mut self, depth: usize) -> Option<Value> {
        if depth > 64 {
            return None;
        }
        self.ws();
        let r = self.rest();
        let first = r.chars().next()?;
        match first {
            '"' | '\'' => self.string(first),
            '[' | '(' => {
                let close = if first == '[' { ']' } else { ')' };
                self.pos += 1;
                let mut items = Vec::new();
                loop {
                    if self.eat(close) {
                        return Some(Value::Array(items));
                    }
                    items.push(self.literal(depth + 1)?);
                    if !self.eat(',') {
                        return self.eat(close).then_some(Value::Array(items));
                    }
                }
            }
            '{' => {
                self.pos += 1;
                let mut map = Map::new();
                loop {
                    if self.eat('}') {
                        return Some(Value::Object(map));
                    }
                    let k = match self.literal(depth + 1)? {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    if !self.eat(':') {
                        return None;
                    }
                    map.insert(k, self.literal(depth + 1)?);
                    if !self.eat(',') {
                        return self.eat('}').then_some(Value::Object(map));
                    }
                }
            }
            _ => {
                let n = r.find(|c: char| !(c.is_alphanumeric() || "+-._".contains(c))).unwrap_or(r.len());
                let word = &r[..n];
                let v = match word {
                    "True" | "true" => Value::Bool(true),
                    "False" | "false" => Value::Bool(false),
                    "None" | "null" => Value::Null,
                    _ => {
                        if let Ok(i) = word.parse::<i64>() {
                            Value::Number(i.into())
                        } else {
                            Value::Number(Number::from_f64(word.parse::<f64>().ok()?)?)
                        }
                    }
                };
                self.pos += n;
                Some(v)
            }
        }
    }

    /// A quoted string with Python escapes (`\n`, `\t`, `\\`, quotes, `\uXXXX`).
    fn string(&mut self, quote: char) -> Option<Value> {
        let mut out = String::new();
        let mut chars = self.rest().char_indices().skip(1);
        while let Some((i, c)) = chars.next() {
            match c {
                c if c == quote => {
                    self.pos += i + 1;
                    return Some(Value::String(out));
                }
                '\\' => {
                    let (_, e) = chars.next()?;
                    match e {
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'r' => out.push('\r'),
                        'u' => {
                            let hex: String = (0..4).filter_map(|_| chars.next().map(|(_, h)| h)).collect();
                            out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                        }
                        other => out.push(other),
                    }
                }
                c => out.push(c),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &str) -> ParsedCall {
        ParsedCall { name: name.into(), arguments: args.into() }
    }

    #[test]
    fn call_lists() {
        let p = parse("[get_weather(city=\"Paris\", days=3), get_time(tz='UTC', dst=False)]");
        assert_eq!(
            p.calls,
            vec![
                call("get_weather", "{\"city\":\"Paris\",\"days\":3}"),
                call("get_time", "{\"tz\":\"UTC\",\"dst\":false}")
            ]
        );
        assert_eq!(p.content, "");
        let p = parse(" [f(xs=[1, 2.5, None], d={'k': (1, 'a\\'b')})] trailing");
        assert_eq!(p.calls, vec![call("f", "{\"xs\":[1,2.5,null],\"d\":{\"k\":[1,\"a'b\"]}}")]);
        assert_eq!(p.content, " trailing");
        assert_eq!(parse("[noargs()]").calls, vec![call("noargs", "{}")]);
    }

    #[test]
    fn tool_code_blocks() {
        let p = parse("Checking.\n```tool_code\nprint(default_api.get_weather(city=\"Oslo\"))\n```\nDone.");
        assert_eq!(p.calls, vec![call("get_weather", "{\"city\":\"Oslo\"}")]);
        assert_eq!(p.content, "Checking.\n\nDone.");
    }

    #[test]
    fn not_calls() {
        for t in ["[1, 2, 3]", "[link](http://x)", "[f(1)]", "[f(a=)]", "```tool_code\nx = 1\n```", "[f(a=\"open"] {
            let p = parse(t);
            assert!(p.calls.is_empty(), "{t}");
            assert_eq!(p.content, t);
        }
    }
}
