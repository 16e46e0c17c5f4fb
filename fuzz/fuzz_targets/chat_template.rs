//! Fuzz chat templates: any template source (UTF-8) must parse or fail with an error, and a
//! parsed template must render a fixed conversation or fail with an error — never panic, hang
//! or run away. Rendering keeps the default fuel, recursion and output limits.
//!
//! Known bug: minijinja 2.24.0 panics on negative-step slices of empty sequences
//! (`{{ ''[::-1] }}`, index out of bounds) and, with overflow checks, on `'abc'[0:2:-1]`
//! (`range_step_backwards` in `src/value/ops.rs`). Set `INFR_FUZZ_SKIP_MINIJINJA_SLICE=1` to
//! treat panics there as uninteresting and keep fuzzing for other bugs; unset, they crash.
#![no_main]

#[path = "common/altstack.rs"]
mod altstack;

use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::OnceLock;
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

thread_local! {
    static KNOWN_PANIC: Cell<bool> = const { Cell::new(false) };
}

/// With `INFR_FUZZ_SKIP_MINIJINJA_SLICE` set, wrap libFuzzer's panic hook (which aborts) so that
/// panics inside minijinja 2.24.0's slice code are only recorded. Returns whether it is active.
fn skip_known_slice_panics() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        if std::env::var_os("INFR_FUZZ_SKIP_MINIJINJA_SLICE").is_none() {
            return false;
        }
        let prev = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let known = info.location().is_some_and(|l| {
                l.file().contains("minijinja-2.24.0") && l.file().ends_with("src/value/ops.rs") && (110..=232).contains(&l.line())
            });
            if known {
                KNOWN_PANIC.with(|k| k.set(true));
            } else {
                prev(info);
            }
        }));
        true
    })
}

fn run(src: &str) {
    // A fixed clock keeps `strftime_now` deterministic; everything else is the default.
    let opts = ChatTemplateOptions { now: Some(UNIX_EPOCH + Duration::from_secs(1_709_211_900)), ..Default::default() };
    let Ok(tmpl) = ChatTemplate::with_options(src, "<s>", "</s>", opts) else { return };
    for req in requests() {
        let _ = tmpl.render(req);
    }
}

fuzz_target!(|data: &[u8]| {
    altstack::install();
    let Ok(src) = std::str::from_utf8(data) else { return };
    if !skip_known_slice_panics() {
        return run(src);
    }
    KNOWN_PANIC.with(|k| k.set(false));
    if panic::catch_unwind(AssertUnwindSafe(|| run(src))).is_err() && !KNOWN_PANIC.with(|k| k.get()) {
        std::process::abort();
    }
});
