//! Tool use over HTTP with real models on the CPU: requests with tools and with tool calls and
//! results in the history render and complete with well-formed responses, on a template with
//! tool support (Qwen2.5-Coder) and one without (SmolLM2, through the polyfill). Whether a tiny
//! model actually calls a tool is up to the model; the parsing and streaming of calls is
//! unit-tested on canned replies in `src/tools/`.

use crate::server;

use std::sync::OnceLock;

use serde_json::{json, Value};
use server::{assert_forecast_call, forecast_tool, post, sse, start_server, start_server_custom};

const QWEN: &str = "qwen2.5-coder-0.5b-instruct-awq-q4_k_m";
const SMOL: &str = "smollm2-135m-instruct-q4_1";

fn qwen() -> Option<&'static str> {
    static S: OnceLock<Option<String>> = OnceLock::new();
    S.get_or_init(|| start_server(QWEN)).as_deref()
}

fn smol() -> Option<&'static str> {
    static S: OnceLock<Option<String>> = OnceLock::new();
    S.get_or_init(|| start_server(SMOL)).as_deref()
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }})
}

/// An OpenAI conversation with a call and its result in the history.
fn openai_body(stream: bool) -> Value {
    json!({
        "messages": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature_c\": 21, \"sky\": \"clear\"}"},
        ],
        "tools": [weather_tool()],
        "max_tokens": 24,
        "temperature": 0,
        "stream": stream,
    })
}

fn check_openai_message(v: &Value) {
    let choice = &v["choices"][0];
    let msg = &choice["message"];
    assert_eq!(msg["role"], "assistant", "{v}");
    let finish = choice["finish_reason"].as_str().unwrap();
    assert!(["stop", "length", "tool_calls"].contains(&finish), "{v}");
    if let Some(calls) = msg.get("tool_calls").and_then(Value::as_array) {
        // A reply cut by max_tokens after its calls says so.
        assert!(["tool_calls", "length"].contains(&finish), "{v}");
        for c in calls {
            assert!(c["id"].as_str().unwrap().starts_with("call_"), "{c}");
            assert_eq!(c["type"], "function");
            let args = c["function"]["arguments"].as_str().expect("arguments is a string");
            assert!(serde_json::from_str::<Value>(args).unwrap().is_object());
        }
    } else {
        assert!(msg["content"].is_string(), "{v}");
    }
}

async fn openai_round_trip(base: &str) {
    let url = format!("{base}/v1/chat/completions");
    let (status, v) = post(url.clone(), &openai_body(false)).await;
    assert_eq!(status, 200, "{v}");
    check_openai_message(&v);
    let events = sse(url, &openai_body(true)).await;
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
    let finishes: Vec<&Value> =
        chunks.iter().map(|c| &c["choices"][0]["finish_reason"]).filter(|f| !f.is_null()).collect();
    assert_eq!(finishes.len(), 1);
    assert_eq!(*finishes[0], v["choices"][0]["finish_reason"], "greedy stream and non-stream agree");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_tools_with_history_on_a_tool_template() {
    let Some(base) = qwen() else { return };
    openai_round_trip(base).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_tools_with_history_on_a_plain_template() {
    let Some(base) = smol() else { return };
    openai_round_trip(base).await;
}

fn anthropic_body(stream: bool) -> Value {
    json!({
        "max_tokens": 24,
        "temperature": 0,
        "stream": stream,
        "tools": [{"name": "get_weather", "description": "Current weather of a city",
                   "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "messages": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "21 C, clear"}]},
                {"type": "text", "text": "Thanks. Summarize."},
            ]},
        ],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_tools_with_history() {
    let Some(base) = qwen() else { return };
    let url = format!("{base}/v1/messages");
    let (status, v) = post(url.clone(), &anthropic_body(false)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["type"], "message");
    let stop = v["stop_reason"].as_str().unwrap();
    assert!(["end_turn", "max_tokens", "tool_use"].contains(&stop), "{v}");
    for b in v["content"].as_array().unwrap() {
        match b["type"].as_str().unwrap() {
            "text" => assert!(b["text"].is_string()),
            "tool_use" => {
                assert!(b["id"].as_str().unwrap().starts_with("toolu_"));
                assert!(b["input"].is_object());
            }
            other => panic!("unexpected block {other}"),
        }
    }
    // The stream: every block starts, gets deltas and stops, in index order.
    let events = sse(url.clone(), &anthropic_body(true)).await;
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_deref().unwrap_or("")).collect();
    assert_eq!(names[0], "message_start");
    assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
    let mut open: Option<u64> = None;
    let mut next = 0;
    for (name, data) in &events[1..events.len() - 2] {
        let d: Value = serde_json::from_str(data).unwrap();
        let index = d["index"].as_u64().unwrap();
        match name.as_deref().unwrap() {
            "content_block_start" => {
                assert!(open.is_none());
                assert_eq!(index, next);
                open = Some(index);
                next += 1;
            }
            "content_block_delta" => assert_eq!(Some(index), open),
            "content_block_stop" => {
                assert_eq!(Some(index), open);
                open = None;
            }
            other => panic!("unexpected event {other}"),
        }
    }
    assert!(open.is_none() && next >= 1);
    let last: Value = serde_json::from_str(&events[events.len() - 2].1).unwrap();
    assert_eq!(last["delta"]["stop_reason"], v["stop_reason"]);

    // Tools are rendered into the prompt; `tool_choice: none` leaves them out.
    let count = |body: Value| {
        let url = format!("{base}/v1/messages/count_tokens");
        async move {
            let (status, v) = post(url, &body).await;
            assert_eq!(status, 200, "{v}");
            v["input_tokens"].as_u64().unwrap()
        }
    };
    let mut no_tools = anthropic_body(false);
    no_tools.as_object_mut().unwrap().remove("tools");
    let mut none = anthropic_body(false);
    none["tool_choice"] = json!({"type": "none"});
    let (with, without, chose_none) = (count(anthropic_body(false)).await, count(no_tools).await, count(none).await);
    assert!(with > without + 20, "{with} vs {without}");
    assert_eq!(chose_none, without);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_request_errors() {
    let Some(base) = smol() else { return };
    let mut body = openai_body(false);
    body["tool_choice"] = json!({"type": "function", "function": {"name": "not_declared"}});
    let (status, v) = post(format!("{base}/v1/chat/completions"), &body).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "tool_choice");
    let mut body = anthropic_body(false);
    body["messages"][1]["content"][1]["type"] = json!("tool_result");
    let (status, v) = post(format!("{base}/v1/messages"), &body).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error");

    // Hardening issue, defect 6: a forced call that cannot be enforced is a 400, not a 200
    // with plain text that ignores tool_choice.
    let mut body = openai_body(false);
    body["tool_choice"] = json!("required");
    body.as_object_mut().unwrap().remove("tools");
    let (status, v) = post(format!("{base}/v1/chat/completions"), &body).await;
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("tool_choice")), "{v}");
    let mut body = openai_body(false);
    body["tool_choice"] = json!("required");
    body["tools"][0]["function"]["parameters"] =
        json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}});
    let (status, v) = post(format!("{base}/v1/chat/completions"), &body).await;
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("tools")), "{v}");
}

/// `tool_choice` required / named is enforced with a grammar: even a prompt that needs no tool
/// gets a well-formed call of a declared tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_tool_calls() {
    let Some(base) = smol() else { return };
    let body = json!({
        "messages": [{"role": "user", "content": "Hi there, how are you?"}],
        "tools": [weather_tool()],
        "tool_choice": "required",
        "max_tokens": 80,
        "temperature": 0,
    });
    let (status, v) = post(format!("{base}/v1/chat/completions"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string(), "{args}");

    let body = json!({
        "messages": [{"role": "user", "content": "Hi there, how are you?"}],
        "tools": [{"name": "noop", "input_schema": {"type": "object", "properties": {}}},
                  {"name": "get_weather", "input_schema": weather_tool()["function"]["parameters"].clone()}],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "max_tokens": 80,
        "temperature": 0,
        "stream": true,
    });
    let events = sse(format!("{base}/v1/messages"), &body).await;
    let data: Vec<Value> = events.iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
    let start = data.iter().find(|d| d["type"] == "content_block_start").unwrap();
    assert_eq!(start["content_block"]["type"], "tool_use", "{data:?}");
    assert_eq!(start["content_block"]["name"], "get_weather");
    let json_delta = data.iter().find(|d| d["delta"]["type"] == "input_json_delta").unwrap();
    let input: Value = serde_json::from_str(json_delta["delta"]["partial_json"].as_str().unwrap()).unwrap();
    assert!(input["city"].is_string(), "{input}");
    let stop = data.iter().find(|d| d["type"] == "message_delta").unwrap();
    assert_eq!(stop["delta"]["stop_reason"], "tool_use");
}

/// Forced calls in Mistral's `[TOOL_CALLS]` JSON list and in the Python-style list of Gemma
/// (and other pythonic) templates are grammar-enforced too: the tiny synth Qwen3 model with a
/// template of each dialect answers `tool_choice` required with one typed call of the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_calls_in_the_mistral_and_pythonic_dialects() {
    let templates = [
        // The marker in a comment is enough for the dialect's detection.
        "{#- [TOOL_CALLS] -#}{%- for m in messages %}[INST] {{ m.content }} [/INST]{%- endfor %}",
        "{%- for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n{%- endfor %}<start_of_turn>model\n",
    ];
    for template in templates {
        let Some(base) = start_server_custom("synth:qwen3", 1, 2048, Some(template), |_| {}) else { return };
        let body = json!({
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [forecast_tool()],
            "tool_choice": "required",
            "max_tokens": 120,
            "temperature": 0,
        });
        let (status, v) = post(format!("{base}/v1/chat/completions"), &body).await;
        assert_forecast_call(status, &v, template);
    }
}
