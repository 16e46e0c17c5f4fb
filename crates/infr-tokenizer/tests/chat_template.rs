//! Chat-template rendering tests.
//!
//! * `gguf_templates_match_llama_cpp`: each real GGUF's own template (or the built-in fallback
//!   for models without one) must reproduce llama.cpp's `prompt_text` from
//!   `testdata/oracle/logits/*__chat.json` byte for byte.
//! * Hand-written templates in the style of real ones. Every `*_EXPECTED` string below was
//!   produced by Python jinja2 3.1.6 configured like transformers' `apply_chat_template`
//!   (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
//!   `tojson = json.dumps(ensure_ascii=False, ...)`, `strftime_now` fixed at
//!   2024-02-29 13:05:09), rendering the same templates on the same conversations.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, UNIX_EPOCH};

use infr_tokenizer::chat::{ChatMessage, ChatRequest, ChatTemplate, ChatTemplateError, ChatTemplateOptions};
use serde_json::{json, Value as Json};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn models_dir() -> PathBuf {
    std::env::var_os("INFR_TEST_MODELS").map(PathBuf::from).unwrap_or_else(|| repo().join("models"))
}

const QUESTION: &str = "What is the boiling point of water at sea level in Celsius?";

#[test]
fn gguf_templates_match_llama_cpp() -> TestResult {
    let require = std::env::var_os("INFR_REQUIRE_MODELS").is_some();
    let mut oracles: Vec<PathBuf> = std::fs::read_dir(repo().join("testdata/oracle/logits"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with("__chat.json"))
        .collect();
    oracles.sort();
    assert!(!oracles.is_empty(), "no *__chat.json oracles found");
    let mut checked = 0;
    for oracle in oracles {
        let data: Json = serde_json::from_str(&std::fs::read_to_string(&oracle)?)?;
        let model = data["model"].as_str().ok_or("oracle without model")?;
        let want = data["prompt_text"].as_str().ok_or("oracle without prompt_text")?;
        let path = models_dir().join(format!("{model}.gguf"));
        if !path.exists() {
            assert!(!require, "missing model {} (INFR_REQUIRE_MODELS is set)", path.display());
            eprintln!("note: skipping {model}: {} not found (set INFR_TEST_MODELS)", path.display());
            continue;
        }
        let gguf = infr_gguf::GgufModel::open(&path)?;
        let meta = gguf.metadata();
        let has_own = meta.get("tokenizer.chat_template").is_some();
        // The oracle says which template llama.cpp used; make sure we pick the same kind.
        let used = data["chat_template"].as_str().unwrap_or_default();
        assert_eq!(has_own, used.starts_with("tokenizer.chat_template"), "{model}: {used}");
        let tmpl = ChatTemplate::for_model(meta)?;
        let got = tmpl.render(&ChatRequest::new(vec![ChatMessage::user(QUESTION)]))?;
        assert_eq!(got, want, "{model}: rendered prompt differs from llama.cpp's");
        if has_own {
            let bos =
                infr_tokenizer::chat::special_token_text(meta, "tokenizer.ggml.bos_token_id")?.unwrap_or_default();
            let eos =
                infr_tokenizer::chat::special_token_text(meta, "tokenizer.ggml.eos_token_id")?.unwrap_or_default();
            let own = ChatTemplate::from_metadata(meta, &bos, &eos)?.ok_or("template vanished")?;
            assert_eq!(own.source(), tmpl.source());
        }
        checked += 1;
    }
    eprintln!("checked {checked} GGUF chat templates against llama.cpp");
    Ok(())
}

fn at_fixed_time(src: &str) -> Result<ChatTemplate, ChatTemplateError> {
    // 2024-02-29T13:05:09Z, the time the jinja2 expectations were rendered with.
    let opts = ChatTemplateOptions { now: Some(UNIX_EPOCH + Duration::from_secs(1_709_211_909)), ..Default::default() };
    ChatTemplate::with_options(src, "<s>", "</s>", opts)
}

/// The tool conversation in OpenAI request shape: arguments as JSON strings, content null.
fn tool_request() -> Result<ChatRequest, serde_json::Error> {
    serde_json::from_value(json!({
        "messages": [
            {"role": "system", "content": "  You are a weather bot.  "},
            {"role": "user", "content": "What's the weather in Paris? Use °C."},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}},
                {"id": "call_2", "type": "function",
                 "function": {"name": "get_weather", "arguments": {"city": "Lyon", "days": 2}}}]},
            {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call_1"},
            {"role": "tool", "content": "{\"temp\": 19}", "tool_call_id": "call_2"},
            {"role": "assistant", "content": "Paris: 21 °C, Lyon: 19 °C."},
            {"role": "user", "content": "Thanks!"}
        ],
        // Keys in sorted order, so the expectation holds with or without `preserve_order`.
        "tools": [{"function": {"description": "Get the weather for a city", "name": "get_weather",
                   "parameters": {"properties": {"city": {"description": "City name, e.g. Paris", "type": "string"},
                                                 "unit": {"enum": ["celsius", "fahrenheit"], "type": "string"}},
                                  "required": ["city"], "type": "object"}},
                   "type": "function"}],
        "add_generation_prompt": true
    }))
}

#[test]
fn tools_tool_calls_and_tool_results() -> TestResult {
    let tmpl = ChatTemplate::new(TOOLS_TEMPLATE, "<s>", "</s>")?;
    assert_eq!(tmpl.render(&tool_request()?)?, TOOLS_EXPECTED);
    // Without tools (`tools` is none) and without the generation prompt.
    let mut req = ChatRequest::new(vec![ChatMessage::user("What's the weather in Paris? Use °C.")]);
    req.add_generation_prompt = false;
    assert_eq!(tmpl.render(&req)?, TOOLS_NO_TOOLS_EXPECTED);
    Ok(())
}

#[test]
fn raise_exception_surfaces_as_typed_error() -> TestResult {
    let tmpl = ChatTemplate::new(TOOLS_TEMPLATE, "<s>", "</s>")?;
    let err = tmpl.render(&ChatRequest::new(vec![ChatMessage::new("critic", "x")]));
    match err {
        Err(ChatTemplateError::Raised { message }) => assert_eq!(message, "Unknown role: critic"),
        other => panic!("expected Raised, got {other:?}"),
    }
    Ok(())
}

#[test]
fn python_methods_filters_and_tojson() -> TestResult {
    let tmpl = ChatTemplate::new(PYTHONIC_TEMPLATE, "<s>", "</s>")?;
    let mut req = ChatRequest::new(vec![
        ChatMessage::system(" hello world, how are you? "),
        ChatMessage::user("Hello, wonderful world?  "),
        ChatMessage::assistant("foo bar"),
        ChatMessage::user("x"),
    ]);
    let meta = json!({"empty": {}, "name": "infr", "nested": {"a": "é\"q\"", "z": [1, {"y": null}]},
                      "tags": ["a", "b"], "version": 2});
    req.kwargs.insert("meta".into(), meta);
    req.kwargs.insert("enable_thinking".into(), Json::Bool(false));
    assert_eq!(tmpl.render(&req)?, PYTHONIC_EXPECTED);
    Ok(())
}

#[test]
fn reasoning_kwargs_and_strftime_now() -> TestResult {
    let tmpl = at_fixed_time(REASONING_TEMPLATE)?;
    let mut last = ChatMessage::assistant("Sure.");
    last.reasoning_content = Some("\nthink more\n".into());
    let messages = vec![
        ChatMessage::user("Hi"),
        ChatMessage::assistant("<think>\nhmm\n</think>\n\nHello!"),
        ChatMessage::user("Again"),
        last,
    ];
    let mut req = ChatRequest::new(messages.clone());
    req.add_generation_prompt = false;
    assert_eq!(tmpl.render(&req)?, REASONING_REPLAY_EXPECTED);
    let mut req = ChatRequest::new(messages[..3].to_vec());
    req.kwargs.insert("enable_thinking".into(), Json::Bool(false));
    assert_eq!(tmpl.render(&req)?, REASONING_NO_THINK_EXPECTED);
    // With the real clock: today's UTC date in ISO form.
    let live = ChatTemplate::new("{{ strftime_now('%Y-%m-%d') }}", "", "")?.render(&req)?;
    let want = infr_tokenizer::chat::strftime("%Y-%m-%d", std::time::SystemTime::now());
    assert_eq!(live.len(), 10);
    assert_eq!(live, want);
    Ok(())
}

#[test]
fn endless_loops_run_out_of_fuel_quickly() -> TestResult {
    let req = ChatRequest::new(vec![ChatMessage::user("x")]);
    let sources = [
        "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}",
        "{% set ns = namespace(n=0) %}{% for m in range(100000) %}{% for k in range(100000) %}{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}{{ ns.n }}",
    ];
    for src in sources {
        let tmpl = ChatTemplate::new(src, "", "")?;
        let start = Instant::now();
        let err = tmpl.render(&req);
        let took = start.elapsed();
        assert!(matches!(err, Err(ChatTemplateError::OutOfFuel { .. })), "{err:?}");
        assert!(took < Duration::from_secs(1), "fuel exhaustion took {took:?}");
    }
    // Endless recursion stops at the recursion limit instead of overflowing the stack.
    let tmpl = ChatTemplate::new("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "", "")?;
    assert!(matches!(tmpl.render(&req), Err(ChatTemplateError::RecursionLimit { .. })));
    // A smaller configured budget is honoured, and enough fuel lets the same loop finish.
    let small = ChatTemplateOptions { fuel: Some(1000), ..Default::default() };
    let tmpl = ChatTemplate::with_options("{% for i in range(10000) %}{% endfor %}", "", "", small.clone())?;
    assert!(matches!(tmpl.render(&req), Err(ChatTemplateError::OutOfFuel { fuel: 1000 })));
    let tmpl = ChatTemplate::with_options("{% for i in range(100) %}{% endfor %}ok", "", "", small)?;
    assert_eq!(tmpl.render(&req)?, "ok");
    Ok(())
}

#[test]
fn syntax_errors_name_the_line() {
    let src = "{%- for message in messages %}\n{{ message.content }}\n{%- if message.role == 'user' %}\n{{ 'x' }\n{%- endif %}\n{%- endfor %}";
    match ChatTemplate::new(src, "", "") {
        Err(e @ ChatTemplateError::Syntax { line: 4, .. }) => assert!(e.to_string().contains("line 4"), "{e}"),
        other => panic!("expected a syntax error on line 4, got {other:?}"),
    }
    match ChatTemplate::new("ok\n{% for x in y %}\nunclosed", "", "") {
        Err(ChatTemplateError::Syntax { line, .. }) => assert!((2..=3).contains(&line), "line {line}"),
        other => panic!("expected a syntax error, got {other:?}"),
    }
}

#[test]
fn runtime_errors_are_typed_not_panics() -> TestResult {
    let req = ChatRequest::new(vec![ChatMessage::assistant_tool_calls(vec![])]);
    // `'...' + none` is a type error in jinja2 too.
    let tmpl = ChatTemplate::new("line one\n{{ 'a' + messages[0].content }}", "", "")?;
    match tmpl.render(&req) {
        Err(ChatTemplateError::Render { line: Some(2), .. }) => {}
        other => panic!("expected a render error at line 2, got {other:?}"),
    }
    let tmpl = ChatTemplate::new("{{ messages | no_such_filter }}", "", "");
    assert!(tmpl.is_err() || tmpl.is_ok_and(|t| t.render(&req).is_err()));
    Ok(())
}

#[test]
fn dict_order_follows_the_input_when_maps_preserve_order() -> TestResult {
    // Python keeps insertion order; so do we iff serde_json and minijinja are built with
    // `preserve_order`. Check which is the case and assert the matching behaviour.
    let tools: Json = serde_json::from_str(r#"{"type": "function", "function": {"name": "f", "description": "d"}}"#)?;
    let ordered_json = tools.as_object().and_then(|o| o.keys().next()).is_some_and(|k| k == "type");
    let mut req = ChatRequest::new(vec![ChatMessage::user("x")]);
    req.tools = Some(vec![tools]);
    let tmpl = ChatTemplate::new("{{ tools[0] | tojson }}|{{ tools[0] | tojson(sort_keys=true) }}", "", "")?;
    let got = tmpl.render(&req)?;
    let sorted = r#"{"function": {"description": "d", "name": "f"}, "type": "function"}"#;
    let python = r#"{"type": "function", "function": {"name": "f", "description": "d"}}"#;
    // jinja2: json.dumps keeps insertion order unless sort_keys=True.
    if got.starts_with(python) {
        assert!(ordered_json);
    } else {
        eprintln!("note: map key order is not preserved (enable `preserve_order` on serde_json and minijinja)");
        assert!(got.starts_with(sorted), "{got}");
    }
    assert!(got.ends_with(&format!("|{sorted}")), "{got}");
    Ok(())
}

#[test]
fn named_templates_from_metadata() -> TestResult {
    use infr_gguf::{Metadata, Value};
    let mut meta = Metadata::new();
    meta.insert("tokenizer.chat_template", Value::String("default:{{ messages[0].content }}".into()));
    meta.insert("tokenizer.chat_template.tool_use", Value::String("tools:{{ (tools or []) | length }}".into()));
    meta.insert(
        "tokenizer.chat_templates",
        Value::Array(infr_gguf::ValueType::String, vec![Value::String("tool_use".into())]),
    );
    assert_eq!(infr_tokenizer::chat::template_names(&meta)?, vec!["tool_use".to_owned()]);
    let mut req = tool_request()?;
    let d = ChatTemplate::from_metadata(&meta, "", "")?.ok_or("no default")?;
    assert_eq!(d.render(&req)?, "default:  You are a weather bot.  ");
    let t = ChatTemplate::from_metadata_named(&meta, "tool_use", "", "")?.ok_or("no tool_use")?;
    assert_eq!(t.render(&req)?, "tools:1");
    req.tools = None;
    assert_eq!(t.render(&req)?, "tools:0");
    assert!(ChatTemplate::from_metadata(&Metadata::new(), "", "")?.is_none());
    Ok(())
}

// ---- Templates and jinja2-rendered expectations ----

const TOOLS_TEMPLATE: &str = r#"{%- if messages[0].role == 'system' %}
    {%- set system_message = messages[0].content | trim %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system_message = 'You are a helpful assistant.' %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}
{{- '<|system|>\n' + system_message }}
{%- if tools is not none and tools | length > 0 %}
    {{- '\n\nYou can call these functions:\n' }}
    {%- for tool in tools %}
        {{- tool | tojson }}
        {{- '\n' }}
    {%- endfor %}
    {{- 'To call one, reply with <call>{"name": ..., "arguments": {...}}</call>.' }}
{%- endif %}
{{- '<|end|>\n' }}
{%- for message in loop_messages %}
    {%- if message.role == 'user' %}
        {{- '<|user|>\n' + message['content'] + '<|end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|assistant|>\n' }}
        {%- if message.content %}
            {{- message.content }}
        {%- endif %}
        {%- if message.tool_calls is defined and message.tool_calls %}
            {%- for call in message.tool_calls %}
                {%- set fn = call.function %}
                {{- '<call>{"name": "' + fn.name + '", "arguments": ' + fn.arguments | tojson + '}</call>' }}
                {%- if fn.arguments is mapping %}
                    {%- for key, value in fn.arguments.items() %}
                        {{- '\n# ' + key + ' = ' + value | string }}
                    {%- endfor %}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.previtem is not defined or loop.previtem.role != 'tool' %}
            {{- '<|tool|>\n' }}
        {%- endif %}
        {{- '[' + message.tool_call_id + '] ' + message.content + '\n' }}
        {%- if loop.nextitem is not defined or loop.nextitem.role != 'tool' %}
            {{- '<|end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- raise_exception('Unknown role: ' + message.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|assistant|>\n' }}
{%- endif %}
"#;

const PYTHONIC_TEMPLATE: &str = r#"{%- set ns = namespace(users=0, found=-1) %}
{%- set users = messages | selectattr('role', 'equalto', 'user') | list %}
{%- set others = messages | rejectattr('role', 'equalto', 'user') | map(attribute='role') | list %}
roles: {{ messages | map(attribute='role') | join(',') }}
users: {{ users | length }}, others: {{ others }}, first: {{ (messages | first).role }}, last: {{ (messages | last).role }}
{% for message in messages %}
{%- set text = message.content if message.content is string else '' %}
{%- set ns.users = ns.users + (1 if message.role == 'user' else 0) %}
{{ loop.index }}/{{ loop.length }} {{ message.role.upper() }}{% if loop.previtem is defined %} (after {{ loop.previtem.role }}){% endif %}: [{{ text.strip() }}] [{{ text.lstrip() }}] [{{ text.rstrip() }}]
  split={{ text.split() }} comma={{ text.split(',') }} title={{ text.title() }} cap={{ text.strip().capitalize() }}
  lower={{ text.lower() }} repl={{ text.replace('o', '0') }} count_o={{ text.count('o') }} find_w={{ text.find('w') }}
  starts={{ text.strip().startswith('Hello') }} ends={{ text.rstrip().endswith('?') }} trimmed={{ text | trim }}
{% endfor %}
user turns: {{ ns.users }}
{%- for key, value in meta.items() %}
{{ key }} -> {{ value }} ({{ value is string }}, {{ value is mapping }}, {{ value is iterable }}, {{ value is none }})
{%- endfor %}
keys={{ meta.keys() | list }} values={{ meta.values() | list | length }} get={{ meta.get('missing', 'dflt') }} get2={{ meta.get('name') }}
items={{ meta | items | list | length }} int={{ '42' | int + 1 }} string={{ 7 | string + '!' }} none={{ nothing is defined }} {{ nothing is none }} {{ meta.nothing is none }}
json={{ meta | tojson }}
sorted={{ meta | tojson(sort_keys=true) }}
indented={{ meta.nested | tojson(indent=2) }}
compact={{ meta.nested | tojson(separators=(',', ':')) }}
thinking={{ enable_thinking if enable_thinking is defined else 'unset' }}
floats={{ [1.0, 0.5, 1e20, 3] | tojson }} {{ 2.5 }} {{ none }} {{ true }} {{ [none, false] }}
"#;

const REASONING_TEMPLATE: &str = r#"{{- 'Date: ' + strftime_now('%d %b %Y') + ' (' + strftime_now('%A, %-d %B, %H:%M') + ')\n' }}
{%- for message in messages %}
    {%- if message.role == 'assistant' %}
        {%- set content = message.content %}
        {%- set reasoning = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.last and reasoning %}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') + '<|im_end|>\n' }}
        {%- else %}
            {{- '<|im_start|>assistant\n' + content + '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"#;

const TOOLS_EXPECTED: &str = "<s><|system|>\nYou are a weather bot.\n\nYou can call these functions:\n{\"function\": {\"description\": \"Get the weather for a city\", \"name\": \"get_weather\", \"parameters\": {\"properties\": {\"city\": {\"description\": \"City name, e.g. Paris\", \"type\": \"string\"}, \"unit\": {\"enum\": [\"celsius\", \"fahrenheit\"], \"type\": \"string\"}}, \"required\": [\"city\"], \"type\": \"object\"}}, \"type\": \"function\"}\nTo call one, reply with <call>{\"name\": ..., \"arguments\": {...}}</call>.<|end|>\n<|user|>\nWhat's the weather in Paris? Use °C.<|end|>\n<|assistant|>\n<call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}</call>\n# city = Paris\n# unit = celsius<call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\", \"days\": 2}}</call>\n# city = Lyon\n# days = 2<|end|>\n<|tool|>\n[call_1] {\"temp\": 21}\n[call_2] {\"temp\": 19}\n<|end|>\n<|assistant|>\nParis: 21 °C, Lyon: 19 °C.<|end|>\n<|user|>\nThanks!<|end|>\n<|assistant|>\n";
const TOOLS_NO_TOOLS_EXPECTED: &str =
    "<s><|system|>\nYou are a helpful assistant.<|end|>\n<|user|>\nWhat's the weather in Paris? Use °C.<|end|>\n";
const PYTHONIC_EXPECTED: &str = "roles: system,user,assistant,user\nusers: 2, others: ['system', 'assistant'], first: system, last: user\n1/4 SYSTEM: [hello world, how are you?] [hello world, how are you? ] [ hello world, how are you?]\n  split=['hello', 'world,', 'how', 'are', 'you?'] comma=[' hello world', ' how are you? '] title= Hello World, How Are You?  cap=Hello world, how are you?\n  lower= hello world, how are you?  repl= hell0 w0rld, h0w are y0u?  count_o=4 find_w=7\n  starts=False ends=True trimmed=hello world, how are you?\n2/4 USER (after system): [Hello, wonderful world?] [Hello, wonderful world?  ] [Hello, wonderful world?]\n  split=['Hello,', 'wonderful', 'world?'] comma=['Hello', ' wonderful world?  '] title=Hello, Wonderful World?   cap=Hello, wonderful world?\n  lower=hello, wonderful world?   repl=Hell0, w0nderful w0rld?   count_o=3 find_w=7\n  starts=True ends=True trimmed=Hello, wonderful world?\n3/4 ASSISTANT (after user): [foo bar] [foo bar] [foo bar]\n  split=['foo', 'bar'] comma=['foo bar'] title=Foo Bar cap=Foo bar\n  lower=foo bar repl=f00 bar count_o=2 find_w=-1\n  starts=False ends=False trimmed=foo bar\n4/4 USER (after assistant): [x] [x] [x]\n  split=['x'] comma=['x'] title=X cap=X\n  lower=x repl=x count_o=0 find_w=-1\n  starts=False ends=False trimmed=x\nuser turns: 2empty -> {} (False, True, True, False)name -> infr (True, False, True, False)nested -> {'a': 'é\"q\"', 'z': [1, {'y': None}]} (False, True, True, False)tags -> ['a', 'b'] (False, False, True, False)version -> 2 (False, False, False, False)keys=['empty', 'name', 'nested', 'tags', 'version'] values=5 get=dflt get2=infr\nitems=5 int=43 string=7! none=False False False\njson={\"empty\": {}, \"name\": \"infr\", \"nested\": {\"a\": \"é\\\"q\\\"\", \"z\": [1, {\"y\": null}]}, \"tags\": [\"a\", \"b\"], \"version\": 2}\nsorted={\"empty\": {}, \"name\": \"infr\", \"nested\": {\"a\": \"é\\\"q\\\"\", \"z\": [1, {\"y\": null}]}, \"tags\": [\"a\", \"b\"], \"version\": 2}\nindented={\n  \"a\": \"é\\\"q\\\"\",\n  \"z\": [\n    1,\n    {\n      \"y\": null\n    }\n  ]\n}\ncompact={\"a\":\"é\\\"q\\\"\",\"z\":[1,{\"y\":null}]}\nthinking=False\nfloats=[1.0, 0.5, 1e+20, 3] 2.5 None True [None, False]";
const REASONING_REPLAY_EXPECTED: &str = "Date: 29 Feb 2024 (Thursday, 29 February, 13:05)\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n<think>\nthink more\n</think>\n\nSure.<|im_end|>\n";
const REASONING_NO_THINK_EXPECTED: &str = "Date: 29 Feb 2024 (Thursday, 29 February, 13:05)\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

/// Found by fuzzing (fuzz/fuzz_targets/chat_template.rs): reversing an empty string made the
/// template engine panic. Untrusted templates must give an error instead.
#[test]
fn engine_panic_is_an_error() {
    for src in ["{{ ''[::-1] }}", "{%set text='' %} {{text[::-1].r}}"] {
        let r = infr_tokenizer::chat::ChatTemplate::new(src, "<s>", "</s>")
            .and_then(|t| t.render(&infr_tokenizer::chat::ChatRequest::new(vec![])));
        let e = r.expect_err("the engine's panic surfaces as an error");
        assert!(e.to_string().contains("template engine failure"), "{src}: {e}");
    }
}

/// Found by fuzzing: fuel allows building a list 40,000 levels deep, and comparing two such
/// lists recursed past the caller's stack (a process abort, not an error). Rendering runs on a
/// large-stack thread now: the template renders (or fails) without crashing.
#[test]
fn deeply_nested_values_do_not_overflow_the_stack() {
    let src = "{% set ns = namespace(x=[], y=[]) %}{% for i in range(40000) %}{% set ns.x = [ns.x] %}\
               {% set ns.y = [ns.y] %}{% endfor %}{{ ns.x == ns.y }}{{ ns.x|lower|length }}";
    let r = infr_tokenizer::chat::ChatTemplate::new(src, "<s>", "</s>")
        .and_then(|t| t.render(&infr_tokenizer::chat::ChatRequest::new(vec![])));
    if let Ok(text) = &r {
        assert!(text.starts_with("True"), "{text}");
    }
}

/// Found by fuzzing: `pprint` of a deeply nested value took minutes (cubic, not bounded by
/// fuel); it is the depth-capped Python repr now.
#[test]
fn pprint_of_deep_nesting_is_fast() {
    let src = "{% set ns = namespace(x=[]) %}{% for i in range(2000) %}{% set ns.x = [ns.x] %}{% endfor %}\
               {{ ns.x|pprint|length }} {{ debug(ns.x)|length }}";
    let t0 = std::time::Instant::now();
    let r = infr_tokenizer::chat::ChatTemplate::new(src, "<s>", "</s>")
        .and_then(|t| t.render(&infr_tokenizer::chat::ChatRequest::new(vec![])));
    assert!(t0.elapsed() < std::time::Duration::from_secs(5), "took {:?}", t0.elapsed());
    assert!(r.is_ok(), "{r:?}");
}
