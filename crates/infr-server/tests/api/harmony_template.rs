//! gpt-oss's own chat template (`testdata/templates/openai-gpt-oss-120b.jinja`, as the model
//! ships it) renders tools, a call and its result in the harmony format, and the server picks
//! the harmony reasoning split and tool dialect for it; a forced call (`tool_choice`) from a
//! random-weight gpt-oss comes back as an OpenAI tool call.

use crate::server;

use serde_json::{json, Value};

#[test]
fn gpt_oss_template_renders_harmony_turns() {
    use infr_server::tools::Dialect;
    use infr_tokenizer::chat::{ChatMessage, ChatRequest, ChatTemplate};
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/templates/openai-gpt-oss-120b.jinja");
    let src = std::fs::read_to_string(path).expect("template");
    assert_eq!(Dialect::detect(&src), Dialect::Harmony);
    assert_eq!(infr_server::reasoning::Tags::for_template(&src), infr_server::reasoning::HARMONY);
    let t = ChatTemplate::new(&src, "<|startoftext|>", "<|return|>").expect("template parses");
    let messages: Vec<ChatMessage> = serde_json::from_value(json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        // The server passes a call's null content as "" (tools::polyfill), as here.
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]))
    .unwrap();
    let tool = json!({"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}});
    let req = ChatRequest { messages, tools: Some(vec![tool]), add_generation_prompt: true, ..ChatRequest::default() };
    let text = t.render(&req).expect("renders");
    for want in [
        "<|start|>system<|message|>",
        "namespace functions",
        "type get_weather",
        "<|start|>user<|message|>Weather in Paris?<|end|>",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>",
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"sunny\"<|end|>",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    assert!(text.ends_with("<|start|>assistant"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_call_comes_back_as_a_tool_call() {
    use infr_models::synth::{self, Shape, SynthPlan, SynthQuant};
    // `infr synth`'s tiny gpt-oss has harmony's control tokens in its vocabulary.
    let dir = std::env::temp_dir().join(format!("infr-harmony-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny-gpt-oss.gguf");
    let quant = SynthQuant::from_name("Q4_K_M").unwrap();
    let plan = SynthPlan::new(Shape::by_name("tiny-gpt-oss").unwrap(), quant, None).unwrap();
    synth::write(&plan, 7, &path, &mut |_, _| {}).unwrap();
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/templates/openai-gpt-oss-120b.jinja"
    ))
    .expect("template");
    let name = format!("file:{}", path.display());
    let Some(base) = server::start_server_custom(&name, 1, 2048, Some(&src), |_| {}) else { return };
    // A bounded string keeps a random model's argument short.
    let tool = json!({"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
            "required": ["city"], "additionalProperties": false}}});
    let noop = json!({"type": "function", "function": {"name": "noop", "description": "Nothing",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": false}}});
    for choice in [json!("required"), json!({"type": "function", "function": {"name": "get_weather"}})] {
        let body = json!({
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [tool, noop],
            "tool_choice": choice,
            "max_tokens": 64,
            "temperature": 0,
        });
        let (status, v) = server::post(format!("{base}/v1/chat/completions"), &body).await;
        assert_eq!(status, 200, "{v}");
        let choice0 = &v["choices"][0];
        assert_eq!(choice0["finish_reason"], "tool_calls", "{v}");
        let calls = choice0["message"]["tool_calls"].as_array().expect("tool calls");
        assert_eq!(calls.len(), 1, "{v}");
        let f = &calls[0]["function"];
        let args: Value = serde_json::from_str(f["arguments"].as_str().unwrap()).expect("JSON arguments");
        match f["name"].as_str() {
            Some("get_weather") => assert!(args["city"].as_str().is_some_and(|c| c.chars().count() <= 8), "{v}"),
            Some("noop") if choice == json!("required") => assert!(args.is_object(), "{v}"),
            other => panic!("unexpected call {other:?}: {v}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
