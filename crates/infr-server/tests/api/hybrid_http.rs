//! A hybrid (DeltaNet + attention) model behind the HTTP API: the second turn of a
//! conversation resumes the recurrent state the first one left (the answer reports cached
//! prompt tokens) and gives the same completion as a cold server.

use crate::server;

use serde_json::{json, Value};
use server::*;

const MODEL: &str = "synth:qwen35";

fn chat(messages: Value) -> Value {
    json!({"model": MODEL, "messages": messages, "max_tokens": 8, "temperature": 0})
}

async fn ask(base: &str, body: &Value) -> (String, Value) {
    let (status, v) = post(format!("{base}/v1/chat/completions"), body).await;
    assert_eq!(status, 200, "{v}");
    (v["choices"][0]["message"]["content"].as_str().unwrap_or("").to_owned(), v["usage"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_turn_reuses_the_recurrent_state() {
    let Some(warm) = start_server(MODEL) else { return };
    let first = json!([{"role": "user", "content": "The quick brown fox jumps over the lazy dog."}]);
    let (reply, usage1) = ask(&warm, &chat(first.clone())).await;
    let prompt1 = usage1["prompt_tokens"].as_u64().unwrap();
    let mut second = first.as_array().unwrap().clone();
    second.push(json!({"role": "assistant", "content": reply}));
    second.push(json!({"role": "user", "content": "And then? 1 2 3"}));
    let body2 = chat(Value::Array(second));
    let (answer_warm, usage2) = ask(&warm, &body2).await;
    let cached = usage2["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    eprintln!("turn 1: {prompt1} prompt tokens; turn 2: {} prompt tokens, {cached} cached", usage2["prompt_tokens"]);
    assert!(cached >= prompt1, "the second turn reused only {cached} of the first turn's {prompt1} tokens");

    let Some(cold) = start_server(MODEL) else { return };
    let (answer_cold, usage_cold) = ask(&cold, &body2).await;
    assert_eq!(usage_cold["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(answer_warm, answer_cold, "resuming the state changed the completion");
}
