//! Tool calls while streaming: text goes out as it comes until a call may be starting (a
//! partial opener, or a reply that opens like a bare JSON or Python call); from there text is
//! held back until the call block closes (then its calls go out) or the reply ends (then the
//! held text is parsed whole, and what is not a call goes out as text).

use serde_json::Value;

use super::{hermes, parse, BareStart, Dialect, ParsedCall};

/// What the stream produces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolEvent {
    /// Text to send as content (never empty).
    Text(String),
    /// A complete call.
    Call(ParsedCall),
}

/// Incremental splitter of a streamed reply into text and calls.
#[derive(Debug, Clone)]
pub struct ToolStream {
    dialect: Dialect,
    tools: Vec<Value>,
    buf: String,
    capturing: bool,
    /// While capturing: the marker that closes the block (searched after `skip` bytes).
    closer: Option<(&'static str, usize)>,
    /// While capturing a reply that opened with bare JSON: the block ends with that JSON
    /// value (and a `</tool_call>` right after it, if any), so text after it is not held.
    bare_json: bool,
    at_start: bool,
}

/// Whether the start of a reply is a call without an opener.
enum Bare {
    Yes,
    Maybe,
    No,
}

impl ToolStream {
    /// A stream for `dialect`; `tools` are the declared tools (OpenAI JSON).
    pub fn new(dialect: Dialect, tools: Vec<Value>) -> Self {
        Self { dialect, tools, buf: String::new(), capturing: false, closer: None, bare_json: false, at_start: true }
    }

    /// Add decoded text.
    pub fn push(&mut self, piece: &str) -> Vec<ToolEvent> {
        self.buf.push_str(piece);
        let mut out = Vec::new();
        loop {
            if self.capturing {
                if !self.close_block(&mut out) {
                    return out;
                }
                continue;
            }
            if self.at_start {
                let t = self.buf.trim_start();
                if t.is_empty() {
                    return out;
                }
                match self.bare(t) {
                    Bare::Yes => {
                        self.capturing = true;
                        self.closer = None;
                        self.bare_json = self.dialect.bare_start() == BareStart::JsonObject;
                        self.at_start = false;
                        continue;
                    }
                    Bare::Maybe => return out,
                    Bare::No => {}
                }
            }
            let found = self.dialect.openers().iter().filter_map(|o| self.buf.find(o).map(|at| (at, *o))).min();
            if let Some((at, opener)) = found {
                self.emit_text(at, &mut out);
                self.capturing = true;
                self.closer = closer_of(self.dialect, opener).map(|c| (c, opener.len()));
                continue;
            }
            let keep = self.partial_opener();
            self.emit_text(self.buf.len() - keep, &mut out);
            return out;
        }
    }

    /// The reply ended: whatever is held back.
    pub fn finish(&mut self) -> Vec<ToolEvent> {
        let text = std::mem::take(&mut self.buf);
        self.capturing = false;
        let mut out = Vec::new();
        if text.is_empty() {
            return out;
        }
        let p = parse(self.dialect, &text, &self.tools);
        if !p.content.is_empty() {
            out.push(ToolEvent::Text(p.content));
        }
        out.extend(p.calls.into_iter().map(ToolEvent::Call));
        out
    }

    /// Send `buf[..n]` as text.
    fn emit_text(&mut self, n: usize, out: &mut Vec<ToolEvent>) {
        if n == 0 {
            return;
        }
        let text: String = self.buf.drain(..n).collect();
        if !text.trim().is_empty() {
            self.at_start = false;
        }
        out.push(ToolEvent::Text(text));
    }

    /// While capturing: if the block has closed, send its calls (or its text) and return true.
    fn close_block(&mut self, out: &mut Vec<ToolEvent>) -> bool {
        let end = if self.bare_json {
            let Some(end) = json_value_end(&self.buf) else { return false };
            // Take a `</tool_call>` that follows; wait while what follows may still be one.
            let rest = &self.buf[end..];
            let t = rest.trim_start();
            if t.is_empty() || (hermes::CLOSE.starts_with(t) && t.len() < hermes::CLOSE.len()) {
                return false;
            }
            match t.strip_prefix(hermes::CLOSE) {
                Some(after) => self.buf.len() - after.len(),
                None => end,
            }
        } else {
            let Some((closer, skip)) = self.closer else { return false };
            let Some(end) = self.buf.get(skip..).and_then(|b| b.find(closer)).map(|e| skip + e + closer.len()) else {
                return false;
            };
            end
        };
        self.bare_json = false;
        let block: String = self.buf.drain(..end).collect();
        self.capturing = false;
        self.closer = None;
        self.at_start = false;
        let p = parse(self.dialect, &block, &self.tools);
        if p.calls.is_empty() {
            out.push(ToolEvent::Text(block));
        } else {
            if !p.content.is_empty() {
                out.push(ToolEvent::Text(p.content));
            }
            out.extend(p.calls.into_iter().map(ToolEvent::Call));
        }
        true
    }

    /// Whether the reply so far (`t`, trimmed) opens with an unmarked call.
    fn bare(&self, t: &str) -> Bare {
        match self.dialect.bare_start() {
            BareStart::None => Bare::No,
            BareStart::JsonObject => {
                let Some(inner) = t.strip_prefix('{').or_else(|| t.strip_prefix('[')) else { return Bare::No };
                let inner = inner.trim_start_matches(|c: char| c.is_whitespace() || c == '{');
                const KEYS: [&str; 3] = ["\"name\"", "\"function\"", "\"type\""];
                if KEYS.iter().any(|k| inner.starts_with(k)) {
                    Bare::Yes
                } else if KEYS.iter().any(|k| k.starts_with(inner)) {
                    Bare::Maybe
                } else {
                    Bare::No
                }
            }
            BareStart::PythonList => {
                let Some(inner) = t.strip_prefix('[') else { return Bare::No };
                let n = inner.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.')).unwrap_or(inner.len());
                match inner[n..].chars().next() {
                    None => Bare::Maybe,
                    Some('(') if n > 0 => Bare::Yes,
                    Some(_) => Bare::No,
                }
            }
        }
    }

    /// Bytes at the end of the buffer that could begin an opener.
    fn partial_opener(&self) -> usize {
        let h = &self.buf;
        let mut best = 0;
        for o in self.dialect.openers() {
            let max = o.len().saturating_sub(1).min(h.len());
            for n in (best + 1..=max).rev() {
                let start = h.len() - n;
                if h.is_char_boundary(start) && o.starts_with(&h[start..]) {
                    best = n;
                    break;
                }
            }
        }
        best
    }
}

/// The byte just after the JSON object or array that `s` starts with (after whitespace), once
/// it is complete (strings and escapes respected).
fn json_value_end(s: &str) -> Option<usize> {
    let start = s.len() - s.trim_start().len();
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    for (i, c) in s[start..].char_indices() {
        if in_str {
            match (esc, c) {
                (true, _) => esc = false,
                (false, '\\') => esc = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(start + i + 1);
                }
            }
            _ if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

/// The marker that ends a block opened by `opener` (`None`: the block runs to the end).
fn closer_of(dialect: Dialect, opener: &str) -> Option<&'static str> {
    match opener {
        "<tool_call>" => Some(hermes::CLOSE),
        "```json" | "```tool_code" => Some("```"),
        "<function=" if dialect == Dialect::QwenXml => Some(hermes::CLOSE),
        super::gemma4::OPEN => Some(super::gemma4::CLOSE),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `text` in pieces of `step` chars; returns (text, calls).
    fn run(d: Dialect, text: &str, step: usize) -> (String, Vec<ParsedCall>) {
        let mut s = ToolStream::new(d, Vec::new());
        let chars: Vec<char> = text.chars().collect();
        let mut evs = Vec::new();
        for piece in chars.chunks(step) {
            evs.extend(s.push(&piece.iter().collect::<String>()));
        }
        evs.extend(s.finish());
        let mut out = String::new();
        let mut calls = Vec::new();
        for e in evs {
            match e {
                ToolEvent::Text(t) => out.push_str(&t),
                ToolEvent::Call(c) => calls.push(c),
            }
        }
        (out, calls)
    }

    #[test]
    fn streamed_hermes_matches_whole_parse() {
        let t = "Sure.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n\
                 {\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
        for step in [1, 3, 7, 1000] {
            let (text, calls) = run(Dialect::Hermes, t, step);
            assert_eq!(text.trim(), "Sure.");
            assert_eq!(calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        }
    }

    #[test]
    fn streamed_gemma4_calls() {
        let t = "Checking.<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>\
                 <|tool_call>call:noop{}<tool_call|> done";
        for step in [1, 2, 5, 1000] {
            let (text, calls) = run(Dialect::Gemma4, t, step);
            assert_eq!(text, "Checking. done", "step {step}");
            assert_eq!(calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["get_weather", "noop"]);
            assert_eq!(calls[0].arguments, "{\"city\":\"Paris\"}");
        }
        assert_eq!(Dialect::detect("{{ '<|tool_call>call:' }}"), Dialect::Gemma4);
    }

    #[test]
    fn plain_text_passes_through_and_partial_openers_are_held() {
        let mut s = ToolStream::new(Dialect::Hermes, Vec::new());
        assert_eq!(s.push("Hello <tool"), vec![ToolEvent::Text("Hello ".into())]);
        assert_eq!(s.push("s> here"), vec![ToolEvent::Text("<tools> here".into())]);
        assert_eq!(s.finish(), vec![]);
        for d in [Dialect::Hermes, Dialect::QwenXml, Dialect::Llama3, Dialect::Gemma, Dialect::Gemma4, Dialect::Generic]
        {
            let t = "{\"name\": \"Ada\"} is [not] a call <tool_call> broken";
            assert_eq!(run(d, t, 2), (t.to_owned(), vec![]), "{d:?}");
        }
    }

    /// Agent-clients issue, defect 4: a reply that opens like a call but is plain JSON goes
    /// out as soon as the JSON ends, not at the end of the reply.
    #[test]
    fn bare_json_is_released_when_it_ends() {
        let mut s = ToolStream::new(Dialect::Hermes, Vec::new());
        assert!(s.push("{\"name\": \"Ada\", \"note\": \"a } in a string\"").is_empty());
        let out = s.push("} and then prose");
        assert_eq!(
            out,
            vec![
                ToolEvent::Text("{\"name\": \"Ada\", \"note\": \"a } in a string\"}".into()),
                ToolEvent::Text(" and then prose".into())
            ]
        );
        // A real call still comes out as a call, its closer taken along.
        let (text, calls) = run(Dialect::Hermes, "{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\nDone.", 3);
        assert_eq!((text.trim(), calls.len()), ("Done.", 1));
    }

    #[test]
    fn bare_starts() {
        let (text, calls) = run(Dialect::Hermes, "{\"name\": \"a\", \"arguments\": {}}</tool_call>", 2);
        assert_eq!((text.as_str(), calls.len()), ("", 1));
        let (text, calls) = run(Dialect::Llama3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"q\": 2}}", 4);
        assert_eq!((text.as_str(), calls[0].arguments.as_str()), ("", "{\"q\":2}"));
        let fenced =
            "Calling:\n```json\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n```\nand ```json\n[1]\n``` after";
        let (text, calls) = run(Dialect::Hermes, fenced, 3);
        assert_eq!((text.as_str(), calls.len()), ("Calling:\n\nand ```json\n[1]\n``` after", 1));
        let (text, calls) = run(Dialect::Gemma, "[f(a=1)]", 1);
        assert_eq!((text.as_str(), calls.len()), ("", 1));
        let (text, calls) = run(
            Dialect::QwenXml,
            "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>ok",
            5,
        );
        assert_eq!((text.as_str(), calls[0].arguments.as_str()), ("ok", "{\"a\":1}"));
    }
}
