//! Reasoning over HTTP with a real model: smollm2 never writes `<think>` itself, so its server
//! here renders prompts with a Qwen3-style template that ends the generation prompt with an
//! open `<think>` (unless `chat_template_kwargs.enable_thinking` is false). The reply then
//! starts inside reasoning, which must come back as `reasoning_content` / a `thinking` block,
//! streamed and not. The splitter itself and the builders are unit-tested in the crate
//! (`reasoning`, `reply`).

use crate::server;

use std::sync::OnceLock;

use serde_json::{json, Value};
use server::{post, sse, start_server_custom};

const MODEL: &str = "smollm2-135m-instruct-q4_1";

/// ChatML whose generation prompt opens reasoning, as Qwen3's template does with thinking on.
const THINKING_CHATML: &str = "{% for message in messages %}<|im_start|>{{ message.role }}\n\
{{ message.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n\
{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}\
{% endif %}";

fn base() -> Option<&'static str> {
    static S: OnceLock<Option<String>> = OnceLock::new();
    S.get_or_init(|| start_server_custom(MODEL, 1, 1024, Some(THINKING_CHATML), |_| {})).as_deref()
}

fn body(extra: Value) -> Value {
    let mut b = json!({
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 8,
        "temperature": 0,
    });
    if let (Some(b), Some(e)) = (b.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_reasoning_content_plain_and_streamed() {
    let Some(base) = base() else { return };
    let url = format!("{base}/v1/chat/completions");
    // Extra reasoning fields of other servers are accepted.
    let (status, v) = post(url.clone(), &body(json!({"reasoning_effort": "high"}))).await;
    assert_eq!(status, 200, "{v}");
    let m = &v["choices"][0]["message"];
    let reasoning = m["reasoning_content"].as_str().expect("reasoning_content").to_owned();
    assert!(!reasoning.is_empty());
    // The model never closes the reasoning: all of it is reasoning, none of it content.
    assert_eq!(m["content"], "", "{v}");
    // Reasoning tokens are completion tokens.
    assert!((1..=8).contains(&v["usage"]["completion_tokens"].as_u64().unwrap()), "{v}");

    let events = sse(url.clone(), &body(json!({"stream": true}))).await;
    let mut streamed = String::new();
    let mut content = String::new();
    for (_, data) in &events {
        if data == "[DONE]" {
            continue;
        }
        let c: Value = serde_json::from_str(data).unwrap();
        let d = &c["choices"][0]["delta"];
        streamed.push_str(d["reasoning_content"].as_str().unwrap_or(""));
        content.push_str(d["content"].as_str().unwrap_or(""));
    }
    assert_eq!(events.last().map(|e| e.1.as_str()), Some("[DONE]"));
    assert_eq!(streamed, reasoning);
    assert_eq!(content, "");

    // `reasoning_format: none` leaves the reply as generated.
    let (status, v) = post(url.clone(), &body(json!({"reasoning_format": "none"}))).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["choices"][0]["message"].get("reasoning_content").is_none());
    assert_eq!(v["choices"][0]["message"]["content"].as_str().unwrap().trim(), reasoning);
    let (status, v) = post(url, &body(json!({"reasoning_format": "sideways"}))).await;
    assert_eq!(status, 400);
    assert_eq!(v["error"]["param"], "reasoning_format");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_template_kwargs_turn_thinking_off() {
    let Some(base) = base() else { return };
    let url = format!("{base}/v1/chat/completions");
    let (status, v) = post(url, &body(json!({"chat_template_kwargs": {"enable_thinking": false}}))).await;
    assert_eq!(status, 200, "{v}");
    let m = &v["choices"][0]["message"];
    assert!(m.get("reasoning_content").is_none(), "{v}");
    assert!(!m["content"].as_str().unwrap().is_empty(), "{v}");
    let (status, v) = post(format!("{base}/v1/chat/completions"), &body(json!({"chat_template_kwargs": "yes"}))).await;
    assert_eq!(status, 400);
    assert_eq!(v["error"]["param"], "chat_template_kwargs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_thinking_block_plain_and_streamed() {
    let Some(base) = base() else { return };
    let url = format!("{base}/v1/messages");
    let req = body(json!({"thinking": {"type": "enabled", "budget_tokens": 1024}}));
    let (status, v) = post(url.clone(), &req).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["content"][0]["type"], "thinking", "{v}");
    assert_eq!(v["content"][0]["signature"], "");
    let thinking = v["content"][0]["thinking"].as_str().unwrap().to_owned();
    assert!(!thinking.is_empty());
    assert_eq!(v["content"].as_array().unwrap().len(), 1, "{v}");

    let mut sreq = req.clone();
    sreq["stream"] = json!(true);
    let events = sse(url.clone(), &sreq).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_deref().unwrap_or("")).collect();
    assert_eq!(names[..2], ["message_start", "content_block_start"]);
    assert_eq!(names[names.len() - 3..], ["content_block_stop", "message_delta", "message_stop"]);
    let start: Value = serde_json::from_str(&events[1].1).unwrap();
    assert_eq!(start["content_block"], json!({"type": "thinking", "thinking": "", "signature": ""}));
    let mut streamed = String::new();
    for (name, data) in &events {
        if name.as_deref() == Some("content_block_delta") {
            let d: Value = serde_json::from_str(data).unwrap();
            assert_eq!(d["delta"]["type"], "thinking_delta");
            streamed.push_str(d["delta"]["thinking"].as_str().unwrap());
        }
    }
    assert_eq!(streamed, thinking);

    // Thinking disabled reaches the template as enable_thinking = false: a text answer.
    let (status, v) = post(url, &body(json!({"thinking": {"type": "disabled"}}))).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["content"][0]["type"], "text", "{v}");
}
