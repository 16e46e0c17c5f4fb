//! The reply builders driven with synthetic generations, through the same [`Piece`] path the
//! routes use: whole bodies and streamed event sequences, with and without reasoning and tools.

use std::time::Duration;

use infr_engine::StartInfo;
use serde_json::{json, Value};

use super::*;
use crate::generate::FinishKind;
use crate::reasoning::ReasoningFormat;
use crate::tools::ToolChoice;

const HERMES: &str = "{% if tools %}<tool_call>{% endif %}";
const CALL: &str = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
const THOUGHT: &str = "<think>\nThe user wants the weather. I call get_weather.\n</think>\n\n";

fn env() -> Envelope {
    Envelope { id: "id-1".into(), created: 7, model: "m".into() }
}

fn ids() -> IdSource {
    let mut n = 0;
    Box::new(move || {
        n += 1;
        format!("x{n}")
    })
}

fn tools() -> Option<ToolSetup> {
    let t = vec![json!({"type": "function", "function": {"name": "get_weather", "parameters": {}}})];
    ToolSetup::new(t, ToolChoice::Auto, HERMES).ok().flatten()
}

fn split(open: bool) -> Option<ReasoningSplit> {
    ReasoningFormat::Auto.splitter("<think>", open)
}

fn outcome(completion_tokens: usize) -> Outcome {
    Outcome {
        finish: FinishKind::Stop,
        prompt_tokens: 20,
        cached_tokens: 4,
        completion_tokens,
        queue_wait: Duration::ZERO,
        prompt_time: Duration::from_millis(5),
        decode_time: Duration::from_millis(50),
    }
}

/// A generation of `text` as pieces of `step` chars, as the driver sends them.
fn pieces(text: &str, step: usize, completion_tokens: usize) -> Vec<Piece> {
    let start = StartInfo { slot: 0, prompt_tokens: 20, cached_tokens: 4, queue_wait: Duration::ZERO };
    let chars: Vec<char> = text.chars().collect();
    let mut v = vec![Piece::Started(start)];
    v.extend(chars.chunks(step).map(|c| Piece::Text(c.iter().collect())));
    v.push(Piece::End(outcome(completion_tokens)));
    v
}

fn openai_stream(mut r: OpenAiChat, text: &str, step: usize) -> Vec<Out> {
    pieces(text, step, 30).into_iter().flat_map(|p| r.event(p)).collect()
}

/// Concatenated `delta.FIELD` of the data chunks.
fn joined(evs: &[Out], field: &str) -> String {
    evs.iter()
        .filter_map(|e| match e {
            Out::Data(v) => v["choices"][0]["delta"][field].as_str().map(str::to_owned),
            _ => None,
        })
        .collect()
}

#[test]
fn openai_whole_reply_with_reasoning_and_a_call() {
    let r = OpenAiChat::new(env(), tools(), split(false), false, ids());
    let v = r.body(format!("{THOUGHT}{CALL}"), &outcome(30));
    let m = &v["choices"][0]["message"];
    assert_eq!(m["reasoning_content"], "The user wants the weather. I call get_weather.");
    assert_eq!(m["content"], Value::Null);
    assert_eq!(m["tool_calls"][0]["function"]["name"], "get_weather");
    assert_eq!(m["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    // Reasoning tokens are completion tokens.
    assert_eq!(v["usage"]["completion_tokens"], 30);
    assert_eq!(v["usage"]["total_tokens"], 50);
    assert_eq!(v["object"], "chat.completion");

    // Forced open (the prompt ended with `<think>`): only the closer is generated.
    let r = OpenAiChat::new(env(), None, split(true), false, ids());
    let v = r.body("Hmm, Paris.\n</think>\n\nParis.".into(), &outcome(9));
    assert_eq!(v["choices"][0]["message"]["reasoning_content"], "Hmm, Paris.");
    assert_eq!(v["choices"][0]["message"]["content"], "Paris.");

    // No reasoning: no field. `--reasoning-format none`: the tags stay in the content.
    let r = OpenAiChat::new(env(), None, split(false), false, ids());
    let v = r.body("Paris.".into(), &outcome(2));
    assert!(v["choices"][0]["message"].get("reasoning_content").is_none());
    let r = OpenAiChat::new(env(), None, None, false, ids());
    let v = r.body("<think>a</think>b".into(), &outcome(2));
    assert_eq!(v["choices"][0]["message"]["content"], "<think>a</think>b");
}

#[test]
fn openai_stream_splits_reasoning_at_any_chunking() {
    let text = format!("{THOUGHT}Sure. {CALL}");
    for step in [1, 2, 3, 5, 8, 1000] {
        let evs = openai_stream(OpenAiChat::new(env(), tools(), split(false), true, ids()), &text, step);
        assert_eq!(joined(&evs, "reasoning_content"), "The user wants the weather. I call get_weather.");
        let content = joined(&evs, "content");
        assert_eq!(content, "Sure. ", "step {step}");
        let calls: Vec<&Value> = evs
            .iter()
            .filter_map(|e| match e {
                Out::Data(v) => v["choices"][0]["delta"].get("tool_calls"),
                _ => None,
            })
            .collect();
        assert_eq!(calls[0][0]["function"]["name"], "get_weather");
        // The role chunk first, the finish chunk, the usage chunk, then [DONE].
        let n = evs.len();
        assert_eq!(evs[n - 1], Out::Done);
        let Out::Data(usage) = &evs[n - 2] else { panic!("usage chunk") };
        assert_eq!(usage["usage"]["completion_tokens"], 30);
        let Out::Data(fin) = &evs[n - 3] else { panic!("finish chunk") };
        assert_eq!(fin["choices"][0]["finish_reason"], "tool_calls");
        let Out::Data(first) = &evs[0] else { panic!("role chunk") };
        assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(first["object"], "chat.completion.chunk");
    }
}

#[test]
fn openai_stream_forced_open_and_unterminated() {
    let evs = openai_stream(OpenAiChat::new(env(), None, split(true), false, ids()), "a b c\n</think>\nanswer", 1);
    assert_eq!(joined(&evs, "reasoning_content"), "a b c");
    assert_eq!(joined(&evs, "content"), "answer");
    // Cut off inside the reasoning: everything is reasoning, nothing leaks as content.
    let evs = openai_stream(OpenAiChat::new(env(), None, split(false), false, ids()), "<think>never done </thi", 1);
    assert_eq!(joined(&evs, "reasoning_content"), "never done </thi");
    assert_eq!(joined(&evs, "content"), "");
    // Plain replies are unchanged.
    let evs = openai_stream(OpenAiChat::new(env(), None, split(false), false, ids()), "<b>Paris</b>", 1);
    assert_eq!(joined(&evs, "content"), "<b>Paris</b>");
    assert_eq!(joined(&evs, "reasoning_content"), "");
}

#[test]
fn anthropic_whole_reply_with_thinking() {
    let r = AnthropicMessage::new(env(), tools(), split(false), ids());
    let v = r.body(format!("{THOUGHT}Sure. {CALL}"), &outcome(30));
    assert_eq!(
        v["content"][0],
        json!({"type": "thinking", "thinking": "The user wants the weather. I call get_weather.", "signature": ""})
    );
    assert_eq!(v["content"][1], json!({"type": "text", "text": "Sure."}));
    assert_eq!(v["content"][2]["type"], "tool_use");
    assert_eq!(v["content"][2]["input"], json!({"city": "Paris"}));
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(v["usage"]["output_tokens"], 30);
    // Reasoning only (cut off): just the thinking block.
    let r = AnthropicMessage::new(env(), None, split(false), ids());
    let v = r.body("<think>still".into(), &outcome(3));
    assert_eq!(v["content"], json!([{"type": "thinking", "thinking": "still", "signature": ""}]));
    // No reasoning: one text block, as before.
    let r = AnthropicMessage::new(env(), None, split(false), ids());
    assert_eq!(r.body("Hi".into(), &outcome(1))["content"], json!([{"type": "text", "text": "Hi"}]));
}

/// `(event name, block type or delta type, index)` of each event, deltas of one block merged.
fn shape(evs: &[Out]) -> Vec<(String, String, i64)> {
    let mut out: Vec<(String, String, i64)> = Vec::new();
    for e in evs {
        let Out::Named(name, v) = e else { panic!("anthropic events are named") };
        assert_eq!(v["type"], *name);
        let kind = v["content_block"]["type"].as_str().or(v["delta"]["type"].as_str()).unwrap_or("");
        let item = (name.to_string(), kind.to_owned(), v["index"].as_i64().unwrap_or(-1));
        if out.last() != Some(&item) || *name != "content_block_delta" {
            out.push(item);
        }
    }
    out
}

fn sv(items: &[(&str, &str, i64)]) -> Vec<(String, String, i64)> {
    items.iter().map(|(a, b, c)| (a.to_string(), b.to_string(), *c)).collect()
}

/// Concatenated `delta.FIELD` of the content_block_delta events.
fn block_text(evs: &[Out], field: &str) -> String {
    evs.iter()
        .filter_map(|e| match e {
            Out::Named("content_block_delta", v) => v["delta"][field].as_str().map(str::to_owned),
            _ => None,
        })
        .collect()
}

#[test]
fn anthropic_stream_thinking_then_text_and_calls() {
    let text = format!("{THOUGHT}Sure. {CALL}");
    for step in [1, 4, 1000] {
        let mut r = AnthropicMessage::new(env(), tools(), split(false), ids());
        let evs: Vec<Out> = pieces(&text, step, 30).into_iter().flat_map(|p| r.event(p)).collect();
        assert_eq!(
            shape(&evs),
            sv(&[
                ("message_start", "", -1),
                ("content_block_start", "thinking", 0),
                ("content_block_delta", "thinking_delta", 0),
                ("content_block_stop", "", 0),
                ("content_block_start", "text", 1),
                ("content_block_delta", "text_delta", 1),
                ("content_block_stop", "", 1),
                ("content_block_start", "tool_use", 2),
                ("content_block_delta", "input_json_delta", 2),
                ("content_block_stop", "", 2),
                ("message_delta", "", -1),
                ("message_stop", "", -1),
            ]),
            "step {step}"
        );
        assert_eq!(block_text(&evs, "thinking"), "The user wants the weather. I call get_weather.");
        assert_eq!(block_text(&evs, "text").trim(), "Sure.");
        let Out::Named(_, start) = &evs[1] else { panic!() };
        assert_eq!(start["content_block"], json!({"type": "thinking", "thinking": "", "signature": ""}));
        let Out::Named(_, delta) = &evs[evs.len() - 2] else { panic!() };
        assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    }
}

#[test]
fn anthropic_stream_without_reasoning_and_reasoning_only() {
    // Splitter on, plain reply: one text block.
    let mut r = AnthropicMessage::new(env(), None, split(false), ids());
    let evs: Vec<Out> = pieces("Paris.", 2, 2).into_iter().flat_map(|p| r.event(p)).collect();
    assert_eq!(
        shape(&evs),
        sv(&[
            ("message_start", "", -1),
            ("content_block_start", "text", 0),
            ("content_block_delta", "text_delta", 0),
            ("content_block_stop", "", 0),
            ("message_delta", "", -1),
            ("message_stop", "", -1),
        ])
    );
    assert_eq!(block_text(&evs, "text"), "Paris.");
    // `--reasoning-format none`: the text block opens with message_start, tags stay text.
    let mut r = AnthropicMessage::new(env(), None, None, ids());
    let evs: Vec<Out> = pieces("<think>a</think>b", 3, 2).into_iter().flat_map(|p| r.event(p)).collect();
    assert_eq!(shape(&evs)[1], ("content_block_start".into(), "text".into(), 0));
    assert_eq!(block_text(&evs, "text"), "<think>a</think>b");
    // Forced open and never closed: only a thinking block.
    let mut r = AnthropicMessage::new(env(), None, split(true), ids());
    let evs: Vec<Out> = pieces("pondering", 2, 2).into_iter().flat_map(|p| r.event(p)).collect();
    assert_eq!(
        shape(&evs),
        sv(&[
            ("message_start", "", -1),
            ("content_block_start", "thinking", 0),
            ("content_block_delta", "thinking_delta", 0),
            ("content_block_stop", "", 0),
            ("message_delta", "", -1),
            ("message_stop", "", -1),
        ])
    );
    assert_eq!(block_text(&evs, "thinking"), "pondering");
    // Nothing generated: still one empty text block.
    let mut r = AnthropicMessage::new(env(), None, split(false), ids());
    let evs: Vec<Out> = pieces("", 1, 0).into_iter().flat_map(|p| r.event(p)).collect();
    assert_eq!(shape(&evs)[1], ("content_block_start".into(), "text".into(), 0));
}

/// Agent-clients issue, defect 4: a reply cut by `max_tokens` after a complete call says
/// `length` / `max_tokens`, and the cut-off rest reaches the client as text.
#[test]
fn a_cut_reply_with_calls_reports_the_limit_and_keeps_the_rest() {
    let cut = format!("{CALL}\n<tool_call>\n{{\"name\": \"get_weather\", \"argu");
    let o = Outcome { finish: FinishKind::Length, ..outcome(30) };
    let v = OpenAiChat::new(env(), tools(), split(false), false, ids()).body(cut.clone(), &o);
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    assert_eq!(v["choices"][0]["message"]["tool_calls"].as_array().map(Vec::len), Some(1), "{v}");
    assert!(v["choices"][0]["message"]["content"].as_str().unwrap_or("").contains("\"argu"), "{v}");
    let v = AnthropicMessage::new(env(), tools(), split(false), ids()).body(cut, &o);
    assert_eq!(v["stop_reason"], "max_tokens", "{v}");
    let text: String = v["content"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str()).collect();
    assert!(text.contains("\"argu"), "{v}");
}

/// gpt-oss's harmony replies: the analysis channel is the reasoning, the final channel the
/// answer, a message to `functions.f` a call; whole and streamed at any piece size.
#[test]
fn harmony_replies() {
    const TEMPLATE: &str = "<|channel|>analysis<|message|> <|channel|>commentary";
    let tools = || {
        let t = vec![json!({"type": "function", "function": {"name": "get_weather", "parameters": {}}})];
        ToolSetup::new(t, ToolChoice::Auto, TEMPLATE).ok().flatten()
    };
    let harmony = || ReasoningFormat::Auto.splitter(TEMPLATE, false);
    let call = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary \
                to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}";
    let v = OpenAiChat::new(env(), tools(), harmony(), false, ids()).body(call.into(), &outcome(20));
    let m = &v["choices"][0]["message"];
    assert_eq!(m["reasoning_content"], "Need the weather.", "{v}");
    assert_eq!(m["tool_calls"][0]["function"]["name"], "get_weather", "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    let answer = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Paris.";
    let v = OpenAiChat::new(env(), tools(), harmony(), false, ids()).body(answer.into(), &outcome(20));
    assert_eq!(v["choices"][0]["message"]["content"], "Paris.", "{v}");
    for step in [1, 3, 7, 100] {
        let evs = openai_stream(OpenAiChat::new(env(), tools(), harmony(), false, ids()), answer, step);
        assert_eq!(joined(&evs, "content"), "Paris.", "step {step}");
        assert_eq!(joined(&evs, "reasoning_content"), "Easy.", "step {step}");
        let evs = openai_stream(OpenAiChat::new(env(), tools(), harmony(), false, ids()), call, step);
        let names: Vec<&str> = evs
            .iter()
            .filter_map(|e| match e {
                Out::Data(v) => v["choices"][0]["delta"]["tool_calls"][0]["function"]["name"].as_str(),
                _ => None,
            })
            .collect();
        assert_eq!(names, ["get_weather"], "step {step}");
        assert_eq!(joined(&evs, "content"), "", "step {step}");
    }
}
