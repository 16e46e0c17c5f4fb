//! gpt-oss's harmony tool calls: a message addressed to a function,
//! `<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}`
//! (the recipient may also come before the channel), ended by `<|call|>`, an end-of-generation
//! token, so usually the end of the reply. Other messages that reach this parser (commentary
//! preambles) are text: their body is kept, their header dropped.

use super::{Parsed, ParsedCall};

/// Markers that open a harmony message after the reasoning split took the analysis and final
/// channels.
pub const OPENERS: &[&str] = &["<|start|>assistant", "<|channel|>commentary"];

const MESSAGE: &str = "<|message|>";
const RECIPIENT: &str = "to=functions.";
const ENDS: &[&str] = &["<|call|>", "<|end|>", "<|return|>"];

/// Split `text` into content and harmony calls.
pub fn parse(text: &str) -> Parsed {
    let mut out = Parsed::default();
    let mut rest = text;
    loop {
        let Some(at) = OPENERS.iter().filter_map(|o| rest.find(o)).min() else {
            out.content.push_str(rest);
            return out;
        };
        out.content.push_str(&rest[..at]);
        let msg = &rest[at..];
        let Some(m) = msg.find(MESSAGE) else {
            out.content.push_str(msg);
            return out;
        };
        let (header, body) = (&msg[..m], &msg[m + MESSAGE.len()..]);
        let end = ENDS.iter().filter_map(|e| body.find(e).map(|i| (i, e.len()))).min().unwrap_or((body.len(), 0));
        let text = &body[..end.0];
        match header.find(RECIPIENT) {
            Some(r) => {
                let name: String =
                    header[r + RECIPIENT.len()..].chars().take_while(|c| !c.is_whitespace() && *c != '<').collect();
                let args = text.trim();
                let arguments = match serde_json::from_str::<serde_json::Value>(args) {
                    Ok(v) if v.is_object() => v.to_string(),
                    _ => {
                        // Not a call after all: keep what the model wrote.
                        out.content.push_str(&msg[..m + MESSAGE.len() + end.0]);
                        rest = &body[end.0 + end.1..];
                        continue;
                    }
                };
                if !name.is_empty() {
                    out.calls.push(ParsedCall { name, arguments });
                }
            }
            None => out.content.push_str(text),
        }
        rest = &body[end.0 + end.1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_in_both_header_orders_and_preambles() {
        let p = parse("<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}");
        assert_eq!(p.calls, vec![ParsedCall { name: "get_weather".into(), arguments: "{\"city\":\"Paris\"}".into() }]);
        assert!(p.content.is_empty());
        let p = parse("<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>");
        assert_eq!(p.calls[0].name, "f");
        let p = parse("<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.g<|message|>{\"a\":1}");
        assert_eq!((p.content.as_str(), p.calls.len()), ("Checking.", 1));
        // Arguments that are not a JSON object stay text.
        let junk = "<|start|>assistant to=functions.f<|channel|>commentary<|message|>not json";
        assert_eq!(parse(junk).content, junk);
        assert!(parse(junk).calls.is_empty());
    }
}
