//! Qwen3.5's own chat template (`testdata/templates/Qwen3.5-4B.jinja`, as the model ships it)
//! behind the HTTP API with the Qwen3.5 synth model: tool definitions, calls and results in
//! the history render in its XML dialect, a forced call comes back parsed, and thinking is on
//! by default and off with `chat_template_kwargs: {"enable_thinking": false}`.

use crate::server;

use std::sync::OnceLock;

use serde_json::{json, Value};
use server::{assert_forecast_call, forecast_tool, post, start_server_custom};

fn template() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/templates/Qwen3.5-4B.jinja");
    std::fs::read_to_string(path).expect("template file")
}

fn base() -> Option<&'static str> {
    static S: OnceLock<Option<String>> = OnceLock::new();
    S.get_or_init(|| start_server_custom("synth:qwen35", 1, 2048, Some(&template()), |_| {})).as_deref()
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }})
}

#[test]
fn template_renders_the_xml_tool_dialect() {
    use infr_tokenizer::chat::{ChatMessage, ChatRequest, ChatTemplate};
    let t = ChatTemplate::new(&template(), "", "").expect("template parses");
    assert_eq!(infr_server::tools::Dialect::detect(&template()), infr_server::tools::Dialect::QwenXml);
    let messages: Vec<ChatMessage> = serde_json::from_value(json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "{\"temperature_c\": 21}"},
    ]))
    .expect("messages");
    let mut kwargs = serde_json::Map::new();
    kwargs.insert("enable_thinking".into(), json!(false));
    let req = ChatRequest { messages, tools: Some(vec![weather_tool()]), add_generation_prompt: true, kwargs };
    let text = t.render(&req).expect("renders");
    for want in [
        "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n{",
        "\"name\": \"get_weather\"",
        "Be brief.<|im_end|>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
        "<|im_start|>user\n<tool_response>\n{\"temperature_c\": 21}\n</tool_response><|im_end|>",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    assert!(text.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_call_and_history_through_the_xml_dialect() {
    let Some(base) = base() else { return };
    let url = format!("{base}/v1/chat/completions");
    // Bounded value types (an enum, an integer): a random-weight model must still end the call.
    let body = json!({
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [forecast_tool()],
        "tool_choice": "required",
        "chat_template_kwargs": {"enable_thinking": false},
        "max_tokens": 200,
        "temperature": 0,
    });
    let (status, v) = post(url.clone(), &body).await;
    let call = &assert_forecast_call(status, &v, "xml");

    // The call and its result go back in the history (arguments as the JSON string OpenAI
    // clients send).
    let forecast = body["tools"][0].clone();
    let body = json!({
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [call.clone()]},
            {"role": "tool", "tool_call_id": call["id"].clone(), "content": "{\"temperature_c\": 21}"},
        ],
        "tools": [weather_tool(), forecast],
        "max_tokens": 8,
        "temperature": 0,
    });
    let (status, v) = post(url, &body).await;
    assert_eq!(status, 200, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_on_by_default_and_off_on_request() {
    let Some(base) = base() else { return };
    let url = format!("{base}/v1/chat/completions");
    let ask = |kwargs: Value| {
        json!({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6, "temperature": 0,
               "chat_template_kwargs": kwargs})
    };
    // The prompt opens `<think>`: a random model never closes it, so all it says is reasoning.
    let (status, v) = post(url.clone(), &ask(json!({}))).await;
    assert_eq!(status, 200, "{v}");
    let msg = &v["choices"][0]["message"];
    assert!(msg["reasoning_content"].as_str().is_some_and(|r| !r.is_empty()), "{v}");
    let (status, v) = post(url, &ask(json!({"enable_thinking": false}))).await;
    assert_eq!(status, 200, "{v}");
    let msg = &v["choices"][0]["message"];
    assert!(msg.get("reasoning_content").is_none_or(Value::is_null), "{v}");
    assert!(msg["content"].as_str().is_some_and(|c| !c.is_empty()), "{v}");
}
