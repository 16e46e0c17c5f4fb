//! `tool_choice: required` / a named tool, enforced with a grammar (llguidance): the reply
//! must be exactly one call, in the model family's dialect, of a declared tool, with arguments
//! that match its JSON schema. Token masks come from our tokenizer's pieces.
//!
//! Enforced for the JSON dialects (`<tool_call>` JSON, which the polyfill also asks for,
//! Llama 3 JSON), Qwen3-Coder XML (required parameters present, values typed by their
//! schema: text without `<`, numerals, literals, JSON), gpt-oss's harmony messages (its
//! markers are control tokens, written as llguidance special tokens) and Gemma 4's
//! `<|tool_call>call:f{key:value}` form (the same typing in its own value syntax), Mistral's
//! `[TOOL_CALLS]` JSON list and the Python-style `[f(key=value)]` list of Gemma and other
//! pythonic templates.

use std::sync::Arc;

use infr_engine::TokenConstraint;
use infr_tokenizer::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};

use super::llama_json::{tool_name, TOOL_CALLS};
use super::{Dialect, ToolChoice, ToolSetup};

/// Builds grammar matchers over one tokenizer (made once per model, on first use).
pub struct GrammarEnv {
    factory: ParserFactory,
    vocab: usize,
}

impl GrammarEnv {
    /// The token trie of `tok`: control tokens are marked special (never matched as text).
    pub fn new(tok: &Tokenizer) -> Result<Self, String> {
        let vocab = tok.vocab_size();
        let words: Vec<Vec<u8>> = (0..vocab as u32)
            .map(|id| {
                let piece = tok.token_to_piece(id);
                if tok.is_control(id) {
                    let mut w = vec![0xFF];
                    w.extend_from_slice(&piece);
                    w
                } else {
                    piece
                }
            })
            .collect();
        let eos = tok.eos().or_else(|| tok.eog_ids().first().copied()).unwrap_or(0);
        let info = TokRxInfo::new(vocab as u32, eos);
        let trie = TokTrie::from(&info, &words);
        let env: Arc<dyn TokenizerEnv + Sync> = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
        factory.quiet();
        Ok(Self { factory, vocab })
    }

    /// A constraint for `lark`.
    pub fn constraint(&self, lark: &str) -> Result<GrammarConstraint, String> {
        let parser = self.factory.create_parser(TopLevelGrammar::from_lark(lark.to_owned()));
        let matcher = Matcher::new(parser);
        if let Some(e) = matcher.get_error() {
            return Err(e);
        }
        Ok(GrammarConstraint { matcher, vocab: self.vocab, error: None })
    }
}

/// A grammar as a [`TokenConstraint`].
pub struct GrammarConstraint {
    matcher: Matcher,
    vocab: usize,
    /// Set once the grammar cannot go on (see [`TokenConstraint::error`]).
    error: Option<String>,
}

impl TokenConstraint for GrammarConstraint {
    fn mask(&mut self, logits: &mut [f32]) {
        let mask = match self.matcher.compute_mask() {
            Ok(m) => m,
            Err(e) => {
                self.error = Some(format!("grammar engine: {e}"));
                return;
            }
        };
        if mask.is_zero() {
            if !self.matcher.is_stopped() {
                self.error = Some("no token can continue the output".into());
            }
            return;
        }
        for (i, l) in logits.iter_mut().enumerate() {
            if i >= self.vocab || !mask.is_allowed(i as u32) {
                *l = f32::NEG_INFINITY;
            }
        }
    }

    fn accept(&mut self, token: u32) {
        if let Err(e) = self.matcher.consume_token(token) {
            self.error.get_or_insert_with(|| format!("token {token} refused: {e}"));
        }
    }

    fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }

    fn error(&self) -> Option<String> {
        self.error.clone()
    }
}

/// The Lark grammar that forces a call for `setup`, or `None` when the choice is `auto` or
/// the dialect is not enforced. `control(text)`: whether a marker is one of the vocabulary's
/// control tokens (then the grammar names it as a special token, else as text).
pub fn tool_grammar(setup: &ToolSetup, control: &dyn Fn(&str) -> bool) -> Option<String> {
    if !matches!(setup.choice, ToolChoice::Required | ToolChoice::Named(_)) {
        return None;
    }
    let params = |t: &Value| {
        let f = t.get("function").unwrap_or(t);
        f.get("parameters").cloned().filter(Value::is_object).unwrap_or_else(|| json!({"type": "object"}))
    };
    let json_calls = |args_key: &str| {
        let alts: Vec<Value> = setup
            .tools
            .iter()
            .filter_map(|t| {
                let name = tool_name(t)?;
                Some(json!({
                    "type": "object",
                    "properties": { "name": { "const": name }, args_key: params(t) },
                    "required": ["name", args_key],
                    "additionalProperties": false,
                }))
            })
            .collect();
        json!({ "anyOf": alts }).to_string()
    };
    match setup.dialect {
        Dialect::Hermes | Dialect::Generic => Some(format!(
            "start: \"<tool_call>\\n\" call \"\\n</tool_call>\"\ncall: %json {}\n",
            json_calls("arguments")
        )),
        Dialect::Llama3 => Some(format!("start: call\ncall: %json {}\n", json_calls("parameters"))),
        Dialect::QwenXml => qwen_xml_grammar(&setup.tools, params),
        Dialect::Harmony => harmony_grammar(&setup.tools, params, control),
        Dialect::Gemma4 => gemma4_grammar(&setup.tools, params, control),
        Dialect::Mistral => {
            let marker = mark(TOOL_CALLS, control);
            let one: Value = serde_json::from_str(&json_calls("arguments")).ok()?;
            // As json.dumps writes it (Mistral's own calls): fixed separators, no free
            // whitespace, which a weak model would pad until max_tokens.
            let list = json!({"type": "array", "items": one, "minItems": 1, "maxItems": 1,
                "x-guidance": {"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}});
            Some(format!("start: {marker} call\ncall: %json {list}\n"))
        }
        Dialect::Gemma => pythonic_grammar(&setup.tools, params),
    }
}

/// The Python-style call list of one of `tools` opening the reply (`gemma.rs`):
/// `[NAME(key=value, ...)]`, keyword arguments in schema order with the required ones, values
/// typed as Python literals -- double-quoted strings without quotes or backslashes inside,
/// string enums, integers, numbers, `True` / `False`, and other values as Python literals.
fn pythonic_grammar(tools: &[Value], params: impl Fn(&Value) -> Value) -> Option<String> {
    let mut rules = vec![
        "pstr: /\"[^\"\\\\\\n]*\"/".to_owned(),
        format!("pnum: {NUMBER_RE}"),
        "pval: pstr | pnum | \"True\" | \"False\" | \"None\" | pdict | plist".to_owned(),
        "pdict: \"{\" (pstr \": \" pval (\", \" pstr \": \" pval)*)? \"}\"".to_owned(),
        "plist: \"[\" (pval (\", \" pval)*)? \"]\"".to_owned(),
    ];
    let quoted = |o: &str| lit(&format!("\"{o}\""));
    let values = ValueSyntax {
        string: "pstr",
        number: "pnum",
        boolean: "(\"True\" | \"False\")",
        object: "pdict",
        array: "plist",
        any: "pval",
        enum_option: &quoted,
    };
    let mut calls = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let Some(name) = tool_name(t) else { continue };
        let required = property_rules(i, &params(t), &mut rules, |key, ps| {
            format!("{} {}", lit(&format!("{key}=")), values.of(ps))
        });
        let body = ordered_members(i, &required, &lit(", "), &mut rules);
        rules.push(format!("call{i}: {} {body} \")\"", lit(&format!("{name}("))));
        calls.push(format!("call{i}"));
    }
    one_call_of(&calls, "\"[\"", "\"]\"", &rules)
}

/// Rules `p{i}_{j}` for the properties of `schema` in order (`member(key, property schema)`
/// writes one); returns whether each is required.
fn property_rules(
    i: usize,
    schema: &Value,
    rules: &mut Vec<String>,
    member: impl Fn(&str, &Value) -> String,
) -> Vec<bool> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map_or(Vec::new(), |r| r.iter().filter_map(Value::as_str).collect());
    let mut flags = Vec::new();
    if let Some(map) = schema.get("properties").and_then(Value::as_object) {
        for (j, (key, ps)) in map.iter().enumerate() {
            rules.push(format!("p{i}_{j}: {}", member(key, ps)));
            flags.push(required.contains(&key.as_str()));
        }
    }
    flags
}

/// Gemma 4's call of one of `tools` in its own syntax (see `gemma4.rs`):
/// `<|tool_call>call:NAME{key:value,...}<tool_call|>`, the schema's properties in schema order,
/// the required ones present, values by type -- strings between `<|"|>` markers (text without
/// `<`), numerals, literals, string enums, and other values in the dialect's nested
/// `{key:value}` / `[...]` form. Markers that are control tokens are written as llguidance
/// special tokens (`control`).
fn gemma4_grammar(tools: &[Value], params: impl Fn(&Value) -> Value, control: &dyn Fn(&str) -> bool) -> Option<String> {
    use super::gemma4::{CLOSE, OPEN, QUOTE};
    let (open, close, quote) = (mark(OPEN, control), mark(CLOSE, control), mark(QUOTE, control));
    let mut rules = vec![
        format!("gstr: {quote} /[^<]+/ {quote}"),
        format!("gnum: {}", NUMBER_RE),
        "gval: gstr | gnum | \"true\" | \"false\" | \"null\" | gobj | garr".to_owned(),
        "gobj: \"{\" (gkey \":\" gval (\",\" gkey \":\" gval)*)? \"}\"".to_owned(),
        "garr: \"[\" (gval (\",\" gval)*)? \"]\"".to_owned(),
        "gkey: /[A-Za-z0-9_.-]+/".to_owned(),
    ];
    let quoted = |o: &str| format!("{quote} {} {quote}", lit(o));
    let values = ValueSyntax {
        string: "gstr",
        number: "gnum",
        boolean: "(\"true\" | \"false\")",
        object: "gobj",
        array: "garr",
        any: "gval",
        enum_option: &quoted,
    };
    let mut calls = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let Some(name) = tool_name(t) else { continue };
        let required = property_rules(i, &params(t), &mut rules, |key, ps| {
            format!("{} {}", lit(&format!("{key}:")), values.of(ps))
        });
        let body = ordered_members(i, &required, "\",\"", &mut rules);
        rules.push(format!("call{i}: {open} {} \"{{\" {body} \"}}\" {close}", lit(&format!("call:{name}"))));
        calls.push(format!("call{i}"));
    }
    one_call_of(&calls, "", "", &rules)
}

/// A JSON-style integer.
const INTEGER_RE: &str = "/-?(0|[1-9][0-9]{0,17})/";

/// A JSON-style number.
const NUMBER_RE: &str = "/-?(0|[1-9][0-9]{0,17})(\\.[0-9]{1,17})?([eE][-+]?[0-9]{1,3})?/";

/// How a dialect writes typed argument values: the grammar expression of each JSON-schema
/// type, and of one string-enum option.
struct ValueSyntax<'a> {
    string: &'a str,
    number: &'a str,
    boolean: &'a str,
    object: &'a str,
    array: &'a str,
    /// Any value (no or another type).
    any: &'a str,
    enum_option: &'a dyn Fn(&str) -> String,
}

impl ValueSyntax<'_> {
    /// The grammar of one argument value for its JSON `schema`: a string enum's options,
    /// else the expression of its type (integers as JSON integers in every dialect).
    fn of(&self, schema: &Value) -> String {
        if let Some(options) = schema.get("enum").and_then(Value::as_array) {
            let alts: Vec<String> = options.iter().filter_map(Value::as_str).map(self.enum_option).collect();
            if !alts.is_empty() && alts.len() == options.len() {
                return format!("({})", alts.join(" | "));
            }
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("string") => self.string,
            Some("integer") => INTEGER_RE,
            Some("number") => self.number,
            Some("boolean") => self.boolean,
            Some("object") => self.object,
            Some("array") => self.array,
            _ => self.any,
        }
        .to_owned()
    }
}

/// The members of call `i`'s arguments for its properties (`required[j]` per property, rules
/// `p{i}_{j}`), in order with the required ones present and `sep` (a grammar literal) between
/// them; adds the rules it needs and returns the expression (empty for no properties).
/// `f{i}_{j}`: members from `j` on, the first one; `n{i}_{j}`: from `j` on after a member;
/// both non-empty, made optional where every property from `j` on is.
fn ordered_members(i: usize, required: &[bool], sep: &str, rules: &mut Vec<String>) -> String {
    let n = required.len();
    let use_at = |kind: char, j: usize| -> String {
        if j >= n {
            String::new()
        } else if required[j..].iter().any(|&r| r) {
            format!("{kind}{i}_{j}")
        } else {
            format!("{kind}{i}_{j}?")
        }
    };
    for j in 0..n {
        let mut first = vec![format!("p{i}_{j} {}", use_at('n', j + 1))];
        let mut next = vec![format!("{sep} p{i}_{j} {}", use_at('n', j + 1))];
        if !required[j] && j + 1 < n {
            first.push(format!("f{i}_{}", j + 1));
            next.push(format!("n{i}_{}", j + 1));
        }
        rules.push(format!("f{i}_{j}: {}", first.join(" | ")));
        rules.push(format!("n{i}_{j}: {}", next.join(" | ")));
    }
    use_at('f', 0)
}

/// gpt-oss's harmony call of one of `tools`, as the model writes it after the template's
/// `<|start|>assistant`: a commentary message addressed to the function, constrained to JSON
/// arguments by its schema, ended by `<|call|>`. llama.cpp (and our tokenizer) keep `<|call|>`
/// a control token but make `<|channel|>`, `<|message|>` and `<|constrain|>` plain text (so they
/// render), hence `control` decides how each marker is written.
fn harmony_grammar(
    tools: &[Value],
    params: impl Fn(&Value) -> Value,
    control: &dyn Fn(&str) -> bool,
) -> Option<String> {
    let m = |marker: &str| mark(marker, control);
    let (channel, constrain, message, call) = (m("<|channel|>"), m("<|constrain|>"), m("<|message|>"), m("<|call|>"));
    let mut rules = Vec::new();
    let mut calls = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let Some(name) = tool_name(t) else { continue };
        let header = lit(&format!("commentary to=functions.{name} "));
        rules.push(format!("call{i}: {channel} {header} {constrain} \"json\" {message} args{i} {call}"));
        // Compact JSON (as the model's own calls are): flexible whitespace let a weak model
        // pad its arguments until max_tokens.
        let mut schema = params(t);
        if let Some(o) = schema.as_object_mut() {
            o.insert("x-guidance".into(), json!({"whitespace_flexible": false}));
        }
        rules.push(format!("args{i}: %json {schema}"));
        calls.push(format!("call{i}"));
    }
    one_call_of(&calls, "", "", &rules)
}

/// A Lark string literal of `text`.
fn lit(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// A dialect's marker in a grammar: an llguidance special token where the vocabulary has it
/// as a control token (`control`), else its text.
fn mark(marker: &str, control: &dyn Fn(&str) -> bool) -> String {
    if control(marker) {
        marker.to_owned()
    } else {
        lit(marker)
    }
}

/// The grammar whose start is one of `calls` (rule names), between `open` and `close`
/// (grammar expressions; none when `open` is empty), with `rules`; `None` without calls.
fn one_call_of(calls: &[String], open: &str, close: &str, rules: &[String]) -> Option<String> {
    if calls.is_empty() {
        return None;
    }
    let alts = calls.join(" | ");
    let start = if open.is_empty() { alts } else { format!("{open} ({alts}) {close}") };
    Some(format!("start: {start}\n{}\n", rules.join("\n")))
}

/// The grammar of one Qwen3-Coder XML parameter value for its JSON schema: plain text
/// without `<` for strings, bounded numerals, literals for booleans and string enums, and
/// JSON (by the schema) for objects, arrays and anything else.
fn xml_value(schema: &Value) -> String {
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        let alts: Vec<String> = options
            .iter()
            .map(|o| match o {
                Value::String(s) => lit(s),
                other => lit(&other.to_string()),
            })
            .collect();
        if !alts.is_empty() {
            return format!("({})", alts.join(" | "));
        }
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => "/[^<]+/".into(),
        Some("integer") => INTEGER_RE.into(),
        Some("number") => NUMBER_RE.into(),
        Some("boolean") => "(\"true\" | \"false\")".into(),
        _ => format!("%json {schema}"),
    }
}

/// Qwen3-Coder's XML call of one of `tools`: the declared function name, then its parameters
/// in schema order, the required ones present, each value as its type allows.
fn qwen_xml_grammar(tools: &[Value], params: impl Fn(&Value) -> Value) -> Option<String> {
    let mut rules = Vec::new();
    let mut calls = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let Some(name) = tool_name(t) else { continue };
        let required = property_rules(i, &params(t), &mut rules, |key, ps| {
            format!("{} {} \"\\n</parameter>\\n\"", lit(&format!("<parameter={key}>\n")), xml_value(ps))
        });
        // Parameters follow each other with nothing between them.
        let seq: Vec<String> = required
            .iter()
            .enumerate()
            .map(|(j, &r)| if r { format!("p{i}_{j}") } else { format!("p{i}_{j}?") })
            .collect();
        let open = lit(&format!("<tool_call>\n<function={name}>\n"));
        rules.push(format!("call{i}: {open} {} \"</function>\\n</tool_call>\"", seq.join(" ")));
        calls.push(format!("call{i}"));
    }
    one_call_of(&calls, "", "", &rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(template: &str, choice: ToolChoice) -> ToolSetup {
        let tools = vec![
            json!({"type": "function", "function": {"name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}),
            json!({"type": "function", "function": {"name": "noop"}}),
        ];
        ToolSetup::new(tools, choice, template).unwrap().unwrap()
    }

    #[test]
    fn grammars_per_dialect() {
        let none = |_: &str| false;
        let tool_grammar = |s: &ToolSetup| super::tool_grammar(s, &none);
        assert!(tool_grammar(&setup("<tool_call>", ToolChoice::Auto)).is_none());
        let g = tool_grammar(&setup("<tool_call>", ToolChoice::Required)).unwrap();
        assert!(g.starts_with("start: \"<tool_call>\\n\" call"), "{g}");
        assert!(g.contains("\"const\":\"get_weather\"") && g.contains("\"const\":\"noop\""), "{g}");
        let g = tool_grammar(&setup("<tool_call>", ToolChoice::Named("noop".into()))).unwrap();
        assert!(!g.contains("get_weather"), "{g}");
        let g = tool_grammar(&setup("ipython", ToolChoice::Required)).unwrap();
        assert!(g.contains("\"parameters\""), "{g}");
        let g = tool_grammar(&setup("<tool_call><function=x><parameter=y>", ToolChoice::Required)).unwrap();
        assert!(g.starts_with("start: call0 | call1\n"), "{g}");
        assert!(g.contains("call0: \"<tool_call>\\n<function=get_weather>\\n\" p0_0 \"</function>"), "{g}");
        assert!(g.contains("p0_0: \"<parameter=city>\\n\" /[^<]+/"), "{g}");
        assert!(g.contains("call1: \"<tool_call>\\n<function=noop>\\n\"  \"</function>"), "{g}");
        let g = tool_grammar(&setup("<start_of_turn>", ToolChoice::Required)).unwrap();
        assert!(g.starts_with("start: \"[\" (call0 | call1) \"]\"\n"), "{g}");
        assert!(g.contains(r#"call0: "get_weather(" f0_0 ")""#) && g.contains(r#"p0_0: "city=" pstr"#), "{g}");
        let g = tool_grammar(&setup("[TOOL_CALLS]", ToolChoice::Named("get_weather".into()))).unwrap();
        assert!(g.starts_with("start: \"[TOOL_CALLS]\" call\ncall: %json {"), "{g}");
        assert!(g.contains("\"maxItems\":1") && !g.contains("noop"), "{g}");
        let harmony = setup("<|channel|> to=functions. <|call|>", ToolChoice::Named("get_weather".into()));
        let g = super::tool_grammar(&harmony, &|m: &str| m == "<|call|>").unwrap();
        assert!(g.starts_with("start: call0\n"), "{g}");
        let want = r#"call0: "<|channel|>" "commentary to=functions.get_weather " "<|constrain|>" "json" "<|message|>" args0 <|call|>"#;
        assert!(g.contains(want), "{g}");
    }

    #[test]
    fn gemma4_members_keep_order_and_required_ones() {
        let q = |m: &str| m == super::super::gemma4::QUOTE;
        let g = super::tool_grammar(&setup("<|tool_call>", ToolChoice::Required), &q).unwrap();
        assert!(g.starts_with("start: call0 | call1\n"), "{g}");
        assert!(g.contains(r#"call0: "<|tool_call>" "call:get_weather" "{" f0_0 "}" "<tool_call|>""#), "{g}");
        assert!(g.contains(r#"p0_0: "city:" gstr"#) && g.contains(r#"gstr: <|"|> /[^<]+/ <|"|>"#), "{g}");
        // A tool without parameters takes an empty object.
        assert!(g.contains(r#"call1: "<|tool_call>" "call:noop" "{"  "}""#), "{g}");
        // Optional, required, optional: the required one is always there, commas between.
        let mut rules = Vec::new();
        assert_eq!(super::ordered_members(3, &[false, true, false], "\",\"", &mut rules), "f3_0");
        let want = [
            "f3_0: p3_0 n3_1 | f3_1",
            "n3_0: \",\" p3_0 n3_1 | n3_1",
            "f3_1: p3_1 n3_2?",
            "n3_1: \",\" p3_1 n3_2?",
            "f3_2: p3_2 ",
            "n3_2: \",\" p3_2 ",
        ];
        assert_eq!(rules, want);
        assert_eq!(super::ordered_members(0, &[false, false], "\",\"", &mut Vec::new()), "f0_0?");
    }
}
