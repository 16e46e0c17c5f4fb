//! Python-compatible text forms of template values: `json.dumps` (the `tojson` filter of HF
//! transformers' chat-template sandbox), `repr()`/`str()` (what jinja2 prints for `{{ value }}`
//! and `|string`), and Python's shortest float repr.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// How deep `tojson` / `repr` descend before giving up (Python raises `RecursionError` too).
const MAX_DEPTH: usize = 128;

/// Options of Python's `json.dumps` that chat templates use.
#[derive(Debug, Clone)]
pub struct JsonOptions {
    /// `indent`: `None` renders on one line; `Some(s)` puts each item on its own line, indented
    /// by `s` per level (an integer `n` in the template means `n` spaces).
    pub indent: Option<String>,
    /// Between items: `", "` by default, `","` when indenting (Python's defaults).
    pub item_separator: String,
    /// Between a key and its value: `": "` by default.
    pub key_separator: String,
    /// `sort_keys`: emit mapping keys in sorted order.
    pub sort_keys: bool,
    /// `ensure_ascii`: escape every non-ASCII character as `\uXXXX` (HF passes `False`).
    pub ensure_ascii: bool,
}

impl Default for JsonOptions {
    fn default() -> Self {
        JsonOptions {
            indent: None,
            item_separator: ", ".into(),
            key_separator: ": ".into(),
            sort_keys: false,
            ensure_ascii: false,
        }
    }
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// The `tojson` filter: `json.dumps(value, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)` exactly as transformers defines it, with the same keyword arguments
/// (`indent` may also be passed positionally).
pub(crate) fn tojson_filter(value: &Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match indent {
        Some(v) => Some(v),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    let mut opts = JsonOptions::default();
    match indent {
        None => {}
        Some(v) if v.is_none() || v.is_undefined() => {}
        Some(v) => {
            let unit = if let Some(s) = v.as_str() {
                s.to_owned()
            } else {
                let n = i64::try_from(v).map_err(|_| invalid("tojson: indent must be an integer or a string"))?;
                " ".repeat(n.clamp(0, 64) as usize)
            };
            opts.indent = Some(unit);
            opts.item_separator = ",".into();
        }
    }
    if let Some(seps) = kwargs.get::<Option<Value>>("separators")? {
        if !seps.is_none() {
            let parts: Vec<Value> = seps.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] => {
                    let (Some(a), Some(b)) = (a.as_str(), b.as_str()) else {
                        return Err(invalid("tojson: separators must be two strings"));
                    };
                    opts.item_separator = a.to_owned();
                    opts.key_separator = b.to_owned();
                }
                _ => return Err(invalid("tojson: separators must be a pair (item_sep, key_sep)")),
            }
        }
    }
    opts.sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    opts.ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(&mut out, value, &opts, 0)?;
    Ok(Value::from(out))
}

/// Serialises `value` like Python's `json.dumps` with `opts`.
pub fn to_python_json(value: &Value, opts: &JsonOptions) -> Result<String, Error> {
    let mut out = String::new();
    write_json(&mut out, value, opts, 0)?;
    Ok(out)
}

fn newline_indent(out: &mut String, opts: &JsonOptions, level: usize) {
    if let Some(unit) = &opts.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(unit);
        }
    }
}

/// Mapping entries in iteration order (sorted by their JSON key text when `sort`).
fn map_entries(value: &Value, sort: bool) -> Result<Vec<(Value, Value)>, Error> {
    let mut entries = Vec::new();
    for key in value.try_iter()? {
        let item = value.get_item(&key)?;
        entries.push((key, item));
    }
    if sort {
        entries.sort_by(|a, b| a.0.cmp(&b.0));
    }
    Ok(entries)
}

fn write_json(out: &mut String, value: &Value, opts: &JsonOptions, level: usize) -> Result<(), Error> {
    if level > MAX_DEPTH {
        return Err(invalid("tojson: value nested too deeply"));
    }
    match value.kind() {
        // jinja2 would raise on an Undefined; with chainable undefined we print JSON null.
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(out, value, true),
        ValueKind::String => write_json_str(out, value.as_str().unwrap_or_default(), opts.ensure_ascii),
        ValueKind::Bytes => {
            return Err(invalid("tojson: bytes are not JSON serializable"));
        }
        ValueKind::Map => {
            let entries = map_entries(value, opts.sort_keys)?;
            if entries.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_separator);
                }
                newline_indent(out, opts, level + 1);
                write_json_str(out, &json_key(k)?, opts.ensure_ascii);
                out.push_str(&opts.key_separator);
                write_json(out, v, opts, level + 1)?;
            }
            newline_indent(out, opts, level);
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_separator);
                }
                newline_indent(out, opts, level + 1);
                write_json(out, v, opts, level + 1)?;
            }
            newline_indent(out, opts, level);
            out.push(']');
        }
        kind => return Err(invalid(format!("tojson: a value of type {kind} is not JSON serializable"))),
    }
    Ok(())
}

/// Python's `json.dumps` turns non-string keys into strings: `1` → `"1"`, `True` → `"true"`.
fn json_key(key: &Value) -> Result<String, Error> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_owned(),
        ValueKind::None | ValueKind::Undefined => "null".to_owned(),
        ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).to_owned(),
        ValueKind::Number => {
            let mut s = String::new();
            write_number(&mut s, key, true);
            s
        }
        kind => return Err(invalid(format!("tojson: keys must be str, int, float, bool or None, not {kind}"))),
    })
}

/// Writes a number as Python would: integers plainly, floats with `float.__repr__`.
/// `json` chooses the spellings `NaN`/`Infinity` over `nan`/`inf`.
fn write_number(out: &mut String, value: &Value, json: bool) {
    if value.is_integer() {
        if let Ok(i) = i128::try_from(value.clone()) {
            let _ = write!(out, "{i}");
            return;
        }
    }
    let f = f64::try_from(value.clone()).unwrap_or(f64::NAN);
    if f.is_nan() {
        out.push_str(if json { "NaN" } else { "nan" });
    } else if f.is_infinite() {
        let s = match (json, f > 0.0) {
            (true, true) => "Infinity",
            (true, false) => "-Infinity",
            (false, true) => "inf",
            (false, false) => "-inf",
        };
        out.push_str(s);
    } else {
        out.push_str(&python_float_repr(f));
    }
}

/// `repr(f)` for a finite float: the shortest round-tripping digits, fixed notation for
/// decimal exponents in `-4..16` (always with a fractional part, `1.0`), scientific otherwise
/// (`1e+16`, `1.5e-07`).
pub fn python_float_repr(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    // Rust's `{:e}` gives the shortest round-tripping digits: "-1.2345e-7".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                s.push_str(&digits);
                s.push_str(&"0".repeat(int_len - digits.len()));
                s.push_str(".0");
            } else {
                s.push_str(&digits[..int_len]);
                s.push('.');
                s.push_str(&digits[int_len..]);
            }
        } else {
            s.push_str("0.");
            s.push_str(&"0".repeat((-exp - 1) as usize));
            s.push_str(&digits);
        }
    } else {
        s.push_str(&digits[..1]);
        if digits.len() > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        let _ = write!(s, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    s
}

/// A JSON string literal with Python's escapes (`ensure_ascii` also escapes non-ASCII,
/// with surrogate pairs above U+FFFF).
fn write_json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `str(value)`: strings as they are, everything else as `repr`.
pub fn python_str(value: &Value) -> String {
    match value.kind() {
        ValueKind::String => value.as_str().unwrap_or_default().to_owned(),
        ValueKind::Undefined => String::new(),
        _ => {
            let mut out = String::new();
            write_repr(&mut out, value, 0);
            out
        }
    }
}

/// Python's `repr(value)`: `None`, `True`, `'text'`, `[1, 'a']`, `{'k': 'v'}`.
pub fn python_repr(value: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, value, 0);
    out
}

fn write_repr(out: &mut String, value: &Value, level: usize) {
    if level > MAX_DEPTH {
        out.push_str("...");
        return;
    }
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number => write_number(out, value, false),
        ValueKind::String => write_repr_str(out, value.as_str().unwrap_or_default()),
        ValueKind::Map => {
            out.push('{');
            let entries = map_entries(value, false).unwrap_or_default();
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, k, level + 1);
                out.push_str(": ");
                write_repr(out, v, level + 1);
            }
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            if let Ok(items) = value.try_iter() {
                for (i, v) in items.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_repr(out, &v, level + 1);
                }
            }
            out.push(']');
        }
        _ => {
            let _ = write!(out, "{value}");
        }
    }
}

/// A Python string literal: single quotes unless the text has `'` and no `"`.
fn write_repr_str(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        // Expected values are Python 3 `repr(float)`.
        let cases = [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (-2.25, "-2.25"),
            (1e16, "1e+16"),
            (1.5e-7, "1.5e-07"),
            (0.0001, "0.0001"),
            (123456789.125, "123456789.125"),
            (1e15, "1000000000000000.0"),
            (0.1, "0.1"),
            (-0.0, "-0.0"),
            (1.2345e300, "1.2345e+300"),
        ];
        for (f, want) in cases {
            assert_eq!(python_float_repr(f), want, "{f}");
        }
    }

    #[test]
    fn json_matches_python_dumps() {
        let v = Value::from_serialize(serde_json::json!({"a": [1, 2.0, "x\u{e9}\n"], "b": {}, "c": null}));
        // json.dumps({"a": [1, 2.0, "xé\n"], "b": {}, "c": None}, ensure_ascii=False)
        assert_eq!(
            to_python_json(&v, &JsonOptions::default()).ok().as_deref(),
            Some(r#"{"a": [1, 2.0, "xé\n"], "b": {}, "c": null}"#)
        );
        let opts = JsonOptions { indent: Some("  ".into()), item_separator: ",".into(), ..JsonOptions::default() };
        assert_eq!(
            to_python_json(&v, &opts).ok().as_deref(),
            Some("{\n  \"a\": [\n    1,\n    2.0,\n    \"xé\\n\"\n  ],\n  \"b\": {},\n  \"c\": null\n}")
        );
        let opts = JsonOptions { ensure_ascii: true, ..JsonOptions::default() };
        let v = Value::from("é😀");
        assert_eq!(to_python_json(&v, &opts).ok().as_deref(), Some(r#""\u00e9\ud83d\ude00""#));
    }

    #[test]
    fn repr_matches_python() {
        let v = Value::from_serialize(serde_json::json!({"k": ["it's", true, null, 3]}));
        assert_eq!(python_repr(&v), r#"{'k': ["it's", True, None, 3]}"#);
        assert_eq!(python_str(&Value::from("plain")), "plain");
    }
}
