//! OpenAI `response_format` over HTTP with SmolLM2 on the CPU: `json_object` and
//! `json_schema` replies are forced (by a grammar) to be JSON of the schema and end when the
//! JSON closes; malformed formats are 400s naming `response_format`.

use crate::server;

use std::sync::OnceLock;

use serde_json::{json, Value};
use server::{post, sse, start_server};

const SMOL: &str = "smollm2-135m-instruct-q4_1";

fn smol() -> Option<&'static str> {
    static S: OnceLock<Option<String>> = OnceLock::new();
    S.get_or_init(|| start_server(SMOL)).as_deref()
}

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": false,
    })
}

fn chat_body(format: Value, stream: bool) -> Value {
    let prompt = if format["type"] == "json_object" {
        "Reply with a JSON object with one key \"ok\" set to true."
    } else {
        "Describe a person called Ana, aged 31, as JSON."
    };
    json!({
        "messages": [{"role": "user", "content": prompt}],
        "response_format": format,
        "max_tokens": 64,
        "temperature": 0,
        "stream": stream,
    })
}

fn json_schema_format() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "person", "schema": person_schema(), "strict": true}})
}

fn check_person(content: &str) {
    let v: Value = serde_json::from_str(content).unwrap_or_else(|e| panic!("{content:?}: {e}"));
    let obj = v.as_object().unwrap_or_else(|| panic!("{content:?}"));
    assert!(obj["name"].is_string(), "{content}");
    assert!(obj["age"].is_i64() || obj["age"].is_u64(), "{content}");
    assert!(obj.keys().all(|k| k == "name" || k == "age"), "{content}");
}

/// Content and finish reason of a streamed chat completion.
async fn stream_chat(base: &str, body: &Value) -> (String, String) {
    let events = sse(format!("{base}/v1/chat/completions"), body).await;
    let mut content = String::new();
    let mut finish = String::new();
    for (_, data) in events {
        if data == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(&data).unwrap();
        let choice = &v["choices"][0];
        if let Some(t) = choice["delta"]["content"].as_str() {
            content.push_str(t);
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_owned();
        }
    }
    (content, finish)
}

#[tokio::test]
async fn json_object_chat() {
    let Some(base) = smol() else { return };
    let (status, v) =
        post(format!("{base}/v1/chat/completions"), &chat_body(json!({"type": "json_object"}), false)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    let content = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(serde_json::from_str::<Value>(content).unwrap().is_object(), "{content:?}");

    let (content, finish) = stream_chat(base, &chat_body(json!({"type": "json_object"}), true)).await;
    assert_eq!(finish, "stop", "{content:?}");
    assert!(serde_json::from_str::<Value>(&content).unwrap().is_object(), "{content:?}");
}

#[tokio::test]
async fn json_schema_chat() {
    let Some(base) = smol() else { return };
    let (status, v) = post(format!("{base}/v1/chat/completions"), &chat_body(json_schema_format(), false)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    check_person(v["choices"][0]["message"]["content"].as_str().unwrap());

    let (content, finish) = stream_chat(base, &chat_body(json_schema_format(), true)).await;
    assert_eq!(finish, "stop", "{content:?}");
    check_person(&content);
}

#[tokio::test]
async fn json_schema_completions() {
    let Some(base) = smol() else { return };
    let body = json!({
        "prompt": "A person as JSON:",
        "response_format": json_schema_format(),
        "max_tokens": 64,
        "temperature": 0,
    });
    let (status, v) = post(format!("{base}/v1/completions"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    check_person(v["choices"][0]["text"].as_str().unwrap());
}

#[tokio::test]
async fn text_format_is_plain() {
    let Some(base) = smol() else { return };
    let mut body = chat_body(json!({"type": "text"}), false);
    body["max_tokens"] = json!(4);
    let (status, v) = post(format!("{base}/v1/chat/completions"), &body).await;
    assert_eq!(status, 200, "{v}");
}

#[tokio::test]
async fn bad_formats_are_400() {
    let Some(base) = smol() else { return };
    let weather = json!({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}});
    let mut cases = vec![
        chat_body(json!({"type": "yaml"}), false),
        chat_body(json!({"type": "json_schema"}), false),
        chat_body(json!({"type": "json_schema", "json_schema": {"name": "x"}}), false),
        chat_body(json!("json_object"), false),
        // A schema the grammar engine cannot compile.
        chat_body(json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nowhere"}}}), false),
    ];
    let mut forced = chat_body(json!({"type": "json_object"}), false);
    forced["tools"] = json!([weather]);
    forced["tool_choice"] = json!("required");
    cases.push(forced);
    for body in cases {
        let (status, v) = post(format!("{base}/v1/chat/completions"), &body).await;
        assert_eq!(status, 400, "{body} -> {v}");
        assert_eq!(v["error"]["param"], "response_format", "{body} -> {v}");
    }
    let body = json!({"prompt": "x", "response_format": {"type": "nope"}, "max_tokens": 4});
    let (status, v) = post(format!("{base}/v1/completions"), &body).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "response_format", "{v}");
}
