//! gpt-oss's own chat template (`testdata/templates/openai-gpt-oss-120b.jinja`, as the model
//! ships it) renders tools, a call and its result in the harmony format, and the server picks
//! the harmony reasoning split and tool dialect for it.

use serde_json::json;

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
