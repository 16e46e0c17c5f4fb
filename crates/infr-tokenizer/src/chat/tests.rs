//! Unit tests of the chat module's internals. Expected strings of template behaviour were
//! produced with Python jinja2 3.1 configured like transformers (trim_blocks, lstrip_blocks,
//! tojson = json.dumps(ensure_ascii=False)).

use super::*;

fn render(src: &str, req: &ChatRequest) -> Result<String, ChatTemplateError> {
    ChatTemplate::new(src, "<s>", "</s>")?.render(req)
}

fn one_user(text: &str) -> ChatRequest {
    ChatRequest::new(vec![ChatMessage::user(text)])
}

#[test]
fn builtins_parse_and_render() {
    let req = ChatRequest::new(vec![
        ChatMessage::system(" Be brief. "),
        ChatMessage::user(" Hi "),
        ChatMessage::assistant("Hello!"),
    ]);
    let got = ChatTemplate::gemma().render(&req).ok();
    let want = "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>model\n";
    assert_eq!(got.as_deref(), Some(want));
    let got = ChatTemplate::chatml().render(&req).ok();
    let want = "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>assistant\n";
    assert_eq!(got.as_deref(), Some(want));
    assert_eq!(builtin_for_arch("gemma3").source(), GEMMA_TEMPLATE);
    assert_eq!(builtin_for_arch("qwen2").source(), CHATML_TEMPLATE);
}

#[test]
fn generation_tags_are_neutralised() {
    assert_eq!(preprocess("a{%- generation -%}b{% endgeneration %}c"), "a{%- if true -%}b{% endif %}c");
    let src = "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}";
    assert_eq!(render(src, &one_user("x")).ok().as_deref(), Some("x"));
}

#[test]
fn python_printing_and_methods() {
    // jinja2: {{ none }}|{{ true }}|{{ [1, 'a'] }}|{{ {'k': 2.0} }}|{{ 3 | string }}|...
    let src = "{{ none }}|{{ true }}|{{ [1, 'a'] }}|{{ {'k': 2.0} }}|{{ 3 | string }}|\
               {{ '  x y  '.strip().upper() }}|{{ 'a,b'.split(',') }}|{{ {'q': 1}.get('q') }}|{{ {'q': 1}.get('z', 5) }}";
    assert_eq!(render(src, &one_user("x")).ok().as_deref(), Some("None|True|[1, 'a']|{'k': 2.0}|3|X Y|['a', 'b']|1|5"));
}

#[test]
fn typed_content_probe() {
    let plain = "{% for m in messages %}{{ m.content }}{% endfor %}";
    let typed = "{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}";
    let t = ChatTemplate::new(plain, "", "").ok();
    assert_eq!(t.as_ref().map(|t| t.requires_typed_content()), Some(false));
    let t = ChatTemplate::new(typed, "", "").ok();
    assert_eq!(t.as_ref().map(|t| t.requires_typed_content()), Some(true));
    // String content is wrapped for the typed template, part lists flattened for the plain one.
    assert_eq!(t.and_then(|t| t.render(&one_user("hey")).ok()).as_deref(), Some("hey"));
    let msg = ChatMessage {
        role: "user".into(),
        content: Some(ChatContent::Parts(vec![ContentPart::text("a"), ContentPart::text("b")])),
        ..ChatMessage::default()
    };
    assert_eq!(render(plain, &ChatRequest::new(vec![msg])).ok().as_deref(), Some("a\nb"));
}

#[test]
fn reserved_kwargs_rejected() {
    let mut req = one_user("x");
    req.kwargs.insert("messages".into(), Json::Null);
    assert!(matches!(render("{{ 1 }}", &req), Err(ChatTemplateError::Request(_))));
}

#[test]
fn output_limit() {
    let opts = ChatTemplateOptions { max_output_bytes: 1000, ..ChatTemplateOptions::default() };
    let t = ChatTemplate::with_options("{% for i in range(100) %}{{ 'x' * 100 }}{% endfor %}", "", "", opts);
    let err = t.and_then(|t| t.render(&one_user("x")));
    assert!(matches!(err, Err(ChatTemplateError::OutputTooLarge { limit: 1000 })), "{err:?}");
}

#[test]
fn recursion_limit() {
    let src = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
    let err = render(src, &one_user("x"));
    assert!(matches!(err, Err(ChatTemplateError::RecursionLimit { .. })), "{err:?}");
}

#[test]
fn metadata_helpers() {
    use infr_gguf::{Metadata, Value as GV, ValueType};
    let mut meta = Metadata::new();
    let toks = ["<unk>", "<s>", "</s>"].iter().map(|s| GV::String((*s).into())).collect();
    meta.insert("tokenizer.ggml.tokens", GV::Array(ValueType::String, toks));
    meta.insert("tokenizer.ggml.bos_token_id", GV::U32(1));
    meta.insert("tokenizer.ggml.eos_token_id", GV::U32(7));
    meta.insert("general.architecture", GV::String("gemma3".into()));
    assert_eq!(special_token_text(&meta, "tokenizer.ggml.bos_token_id").ok().flatten().as_deref(), Some("<s>"));
    assert_eq!(special_token_text(&meta, "tokenizer.ggml.eos_token_id").ok().flatten(), None);
    assert_eq!(ChatTemplate::for_model(&meta).ok().map(|t| t.source().to_owned()).as_deref(), Some(GEMMA_TEMPLATE));
    meta.insert("tokenizer.chat_template", GV::String("{{ bos_token }}main".into()));
    meta.insert("tokenizer.chat_template.tool_use", GV::String("{{ bos_token }}tools".into()));
    assert_eq!(template_names(&meta).ok(), Some(vec!["tool_use".to_owned()]));
    let r = one_user("x");
    let main = ChatTemplate::for_model(&meta).and_then(|t| t.render(&r)).ok();
    assert_eq!(main.as_deref(), Some("<s>main"));
    let named = ChatTemplate::from_metadata_named(&meta, "tool_use", "B", "E").ok().flatten();
    assert_eq!(named.and_then(|t| t.render(&r).ok()).as_deref(), Some("Btools"));
    assert!(matches!(ChatTemplate::from_metadata_named(&meta, "rag", "", ""), Ok(None)));
}

#[test]
fn loop_controls_need_the_minijinja_feature() {
    // transformers enables jinja2's `loopcontrols`; minijinja needs its `loop_controls` feature.
    let got = render("{% for m in messages %}{{ m.content }}{% break %}{% endfor %}", &one_user("x"));
    match got {
        Ok(s) => assert_eq!(s, "x"),
        Err(e) => assert!(matches!(e, ChatTemplateError::Syntax { line: 1, .. }), "{e}"),
    }
}
