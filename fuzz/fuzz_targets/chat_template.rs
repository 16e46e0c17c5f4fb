//! Fuzz chat templates: any template source (UTF-8) must parse or fail with an error, and a
//! parsed template must render a fixed conversation or fail with an error — never panic, hang
//! or run away. Rendering keeps the default fuel, recursion and output limits.
//!
//! Known bug: minijinja 2.24.0 panics on negative-step slices of empty sequences
//! (`{{ ''[::-1] }}`, index out of bounds) and, with overflow checks, on `'abc'[0:2:-1]`
//! (`range_step_backwards` in `src/value/ops.rs`). `ChatTemplate` turns that panic into an
//! error; this target lets exactly those panics through (see `tolerate_known_panics`) and
//! reports every other one.
#![no_main]

#[path = "common/altstack.rs"]
mod altstack;

use std::panic;
use std::sync::{Once, OnceLock};
use std::time::{Duration, UNIX_EPOCH};

use infr_tokenizer::chat::{ChatMessage, ChatRequest, ChatTemplate, ChatTemplateOptions, ContentPart, ToolCall};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fn requests() -> &'static [ChatRequest; 2] {
    static REQS: OnceLock<[ChatRequest; 2]> = OnceLock::new();
    REQS.get_or_init(|| {
        let call = ToolCall::function(Some("call_1".into()), "get_weather", json!("{\"city\": \"Paris\"}"));
        let mut typed = ChatMessage::user("");
        typed.content = Some(infr_tokenizer::chat::ChatContent::Parts(vec![
            ContentPart::text("look"),
            ContentPart::text("here"),
        ]));
        let mut thinking = ChatMessage::assistant("Sure.");
        thinking.reasoning_content = Some("think more".into());
        let mut full = ChatRequest::new(vec![
            ChatMessage::system("You are a bot."),
            ChatMessage::user("Weather in Paris? °C"),
            ChatMessage::assistant_tool_calls(vec![call]),
            ChatMessage::tool("call_1", "{\"temp\": 21}"),
            thinking,
            typed,
        ]);
        full.tools = Some(vec![json!({"type": "function", "function": {
            "name": "get_weather", "description": "Get the weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})]);
        full.kwargs.insert("enable_thinking".into(), json!(false));
        let mut plain = ChatRequest::new(vec![ChatMessage::user("Hi")]);
        plain.add_generation_prompt = false;
        [full, plain]
    })
}

/// libFuzzer's panic hook aborts before unwinding, so a panic that `ChatTemplate` catches and
/// turns into an error (it wraps rendering in `catch_unwind`) would still count as a crash. Wrap
/// the hook once: panics at the known minijinja slice bug unwind normally (and must come back as
/// an error); every other panic is still reported, even one the library would catch, because a
/// panic inside the template engine is a bug worth knowing about.
fn tolerate_known_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let known = info.location().is_some_and(|l| {
                l.file().contains("minijinja-2.24.0") && l.file().ends_with("src/value/ops.rs") && (110..=232).contains(&l.line())
            });
            if !known {
                prev(info);
            }
        }));
    });
}

fuzz_target!(|data: &[u8]| {
    altstack::install();
    tolerate_known_panics();
    let Ok(src) = std::str::from_utf8(data) else { return };
    // A fixed clock keeps `strftime_now` deterministic; everything else is the default.
    let opts = ChatTemplateOptions { now: Some(UNIX_EPOCH + Duration::from_secs(1_709_211_900)), ..Default::default() };
    let Ok(tmpl) = ChatTemplate::with_options(src, "<s>", "</s>", opts) else { return };
    for req in requests() {
        let _ = tmpl.render(req);
    }
});
