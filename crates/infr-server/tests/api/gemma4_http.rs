//! Gemma 4's own chat template (`testdata/templates/google-gemma-4-31B-it.jinja`, as the model
//! ships it) with the Gemma 4 synth model: tool declarations, calls and responses render in
//! its `<|tool_call>call:f{...}` dialect, thinking is switched by `enable_thinking`, and a
//! conversation with a call in its history completes over HTTP.

use crate::server;

use serde_json::{json, Value};
use server::{assert_forecast_call, forecast_tool, post, start_server_custom};

fn template() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/templates/google-gemma-4-31B-it.jinja");
    std::fs::read_to_string(path).expect("template file")
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }})
}

fn history() -> Value {
    json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"},
        {"role": "user", "content": "Thanks. And Berlin?"},
    ])
}

#[test]
fn template_renders_the_gemma4_dialect() {
    use infr_server::tools::Dialect;
    use infr_tokenizer::chat::{ChatMessage, ChatRequest, ChatTemplate};
    let src = template();
    assert_eq!(Dialect::detect(&src), Dialect::Gemma4);
    let t = ChatTemplate::new(&src, "<bos>", "<eos>").expect("template parses");
    let messages: Vec<ChatMessage> = serde_json::from_value(history()).expect("messages");
    let render = |thinking: bool| {
        let mut kwargs = serde_json::Map::new();
        kwargs.insert("enable_thinking".into(), json!(thinking));
        let req = ChatRequest {
            messages: messages.clone(),
            tools: Some(vec![weather_tool()]),
            add_generation_prompt: true,
            kwargs,
        };
        t.render(&req).expect("renders")
    };
    let text = render(false);
    for want in [
        "<|turn>system\nBe brief.<|tool>declaration:get_weather{description:<|\"|>Current weather of a city<|\"|>",
        "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
        "<|tool_response>response:get_weather{value:<|\"|>sunny, 21 C<|\"|>}<tool_response|>",
        "<|turn>user\nThanks. And Berlin?<turn|>",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    assert!(text.ends_with("<|turn>model\n<|channel>thought\n<channel|>"), "{text}");
    let text = render(true);
    assert!(text.starts_with("<bos><|turn>system\n<|think|>"), "{text}");
    assert!(text.ends_with("<|turn>model\n"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_with_calls_completes() {
    let Some(base) = start_server_custom("synth:gemma4", 1, 2048, Some(&template()), |_| {}) else { return };
    for thinking in [false, true] {
        let body = json!({
            "messages": history(),
            "tools": [weather_tool()],
            "chat_template_kwargs": {"enable_thinking": thinking},
            "max_tokens": 8,
            "temperature": 0,
        });
        let (status, v) = post(format!("{base}/v1/chat/completions"), &body).await;
        assert_eq!(status, 200, "{v}");
        assert!(v["usage"]["completion_tokens"].as_u64().unwrap() > 0, "{v}");
    }
}

/// `tool_choice` required / named on Gemma 4 is grammar-enforced in its own call syntax: even
/// the random-weight synth model answers with exactly one call of the tool, its required
/// arguments present and typed (an enum string between `<|"|>` markers, an integer), parsed
/// back into JSON arguments. (Without the grammar it writes no call at all.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_calls_follow_the_gemma4_grammar() {
    let Some(base) = start_server_custom("synth:gemma4", 1, 2048, Some(&template()), |_| {}) else { return };
    let forecast = forecast_tool();
    // Bounded value types: a random-weight model must still end the call (a free string, as
    // get_weather's city, it would go on to max_tokens), so `required` offers forecast alone;
    // the named choice offers both.
    let named = json!({"type": "function", "function": {"name": "forecast"}});
    for (choice, tools) in [(json!("required"), json!([forecast])), (named, json!([weather_tool(), forecast]))] {
        let body = json!({
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": tools,
            "tool_choice": choice,
            "chat_template_kwargs": {"enable_thinking": false},
            "max_tokens": 200,
            "temperature": 0,
        });
        let (status, v) = post(format!("{base}/v1/chat/completions"), &body).await;
        assert_forecast_call(status, &v, "gemma4");
    }
}
