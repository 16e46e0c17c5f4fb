//! Chat templates: render a conversation into a prompt with the model's own Jinja template
//! (`tokenizer.chat_template` in GGUF metadata), the way HF transformers' `apply_chat_template`
//! and llama.cpp's `--jinja` do.
//!
//! # Environment
//!
//! The template runs in minijinja configured like transformers' sandbox: `trim_blocks` and
//! `lstrip_blocks` on, a single trailing newline dropped, no auto-escaping. Variables are
//! `messages`, `tools` (`none` when absent), `add_generation_prompt`, `bos_token`, `eos_token`
//! plus the request's kwargs (e.g. `enable_thinking`). Extras real templates rely on:
//!
//! * `raise_exception(msg)` → [`ChatTemplateError::Raised`];
//! * `strftime_now(fmt)` → the current date/time, UTC (see [`strftime`]);
//! * `tojson` as transformers defines it: Python `json.dumps` with `", "`/`": "` separators,
//!   `ensure_ascii=False`, and the options `indent`, `separators`, `sort_keys`, `ensure_ascii`;
//! * Python string/dict methods (`.strip()`, `.split()`, `.startswith()`, `.items()`,
//!   `.get()`, ...) through `minijinja_contrib::pycompat`;
//! * values print like Python's `str()`: `None`, `True`, `{'a': 1}`; `|string` likewise;
//! * `{% generation %}` / `{% endgeneration %}` (transformers' assistant-mask tags) are
//!   accepted and ignored.
//!
//! Undefined values are *chainable*: printing one gives `""`, iterating one gives nothing, and
//! `undefined.attr` is undefined again. jinja2 would raise on the last; being more lenient
//! never changes the output of a template that works under jinja2, and it keeps templates
//! alive that probe fields a request does not have.
//!
//! # Input adaptation (as llama.cpp does)
//!
//! * Tool-call `arguments` given as a string holding a JSON object are passed as that object
//!   (templates do `arguments | tojson` or iterate `arguments.items()`).
//! * When the template is constructed it is probed with a one-message conversation: if it only
//!   shows the content when given as typed parts (`[{"type": "text", ...}]`), string content is
//!   wrapped into such a part; otherwise all-text part lists are flattened to one string
//!   (parts joined with `"\n"`). Lists containing non-text parts are passed unchanged.
//!
//! # Limits
//!
//! Rendering is bounded by fuel (minijinja instructions, [`DEFAULT_FUEL`]), a recursion limit
//! and an output size limit; all are set through [`ChatTemplateOptions`]. A template whose
//! *intermediate* values grow without bound (a list or string doubled in a loop or a macro)
//! can still exhaust memory before fuel runs out: minijinja has no allocation hook. A program
//! rendering untrusted templates installs a [`sandbox::RenderSandbox`] so that renders run in a
//! memory-capped worker process (the `infr` binary does).
//!
//! # Map key order
//!
//! Python dicts keep insertion order and `tojson` prints keys in that order. Whether this crate
//! does depends on the `preserve_order` features of `serde_json` (tool JSON parsed by the
//! caller) and `minijinja` (its maps); without them keys come out sorted.
//!
//! # Models without a template
//!
//! [`builtin_for_arch`] gives llama.cpp's built-in fallbacks: Gemma's turn format for `gemma*`
//! architectures and ChatML for everything else. [`ChatTemplate::for_model`] picks the GGUF's
//! own template when there is one and the fallback otherwise.

mod builtin;
mod error;
mod pyfmt;
pub mod sandbox;
mod time;
mod types;
mod untrusted;

use std::io;
use std::time::SystemTime;

use minijinja::value::Value;
use minijinja::{AutoEscape, Environment, ErrorKind, UndefinedBehavior};
use serde_json::{Map, Value as Json};

pub use builtin::{builtin_for_arch, special_token_text, template_names, CHATML_TEMPLATE, GEMMA_TEMPLATE};
pub use error::ChatTemplateError;
pub use pyfmt::{python_float_repr, python_repr, python_str, to_python_json, JsonOptions};
pub use time::{format_datetime, strftime, UtcDateTime};
pub use types::{ChatContent, ChatMessage, ChatRequest, ContentPart, FunctionCall, ToolCall};

use error::{from_parse_error, from_render_error, RaisedException};
use types::{message_json, ContentStyle};

/// Default fuel: minijinja instructions one render may execute. Qwen2.5's template spends
/// about 50 per message (2000 messages with tool calls and 10 tools: ~99k), so this allows
/// conversations of many thousands of messages while an endless loop stops after roughly a
/// quarter of a second.
pub const DEFAULT_FUEL: u64 = 5_000_000;
/// Default recursion limit (macro calls, nested blocks).
pub const DEFAULT_RECURSION_LIMIT: usize = 200;
/// Default limit on the rendered prompt's size in bytes.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 64 << 20;
/// Fuel for the construction-time probe renders.
const PROBE_FUEL: u64 = 1_000_000;
/// Name of the template inside its environment (shows up in nothing user-facing).
const TEMPLATE_NAME: &str = "chat_template";
/// Variables a request's kwargs may not replace.
const RESERVED: [&str; 3] = ["messages", "tools", "add_generation_prompt"];

/// Limits and settings of a [`ChatTemplate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatTemplateOptions {
    /// Instruction budget per render; `None` disables the limit (not advisable for templates
    /// from untrusted files).
    pub fuel: Option<u64>,
    /// Maximum nesting of macro calls and blocks (minijinja caps this at 500).
    pub recursion_limit: usize,
    /// Maximum size of a rendered prompt in bytes.
    pub max_output_bytes: usize,
    /// The time `strftime_now` reports; `None` means the clock at render time. Fix it for
    /// reproducible prompts and tests.
    pub now: Option<SystemTime>,
}

impl Default for ChatTemplateOptions {
    fn default() -> Self {
        ChatTemplateOptions {
            fuel: Some(DEFAULT_FUEL),
            recursion_limit: DEFAULT_RECURSION_LIMIT,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            now: None,
        }
    }
}

/// A rendered and tokenized chat prompt ([`ChatTemplate::render_tokens`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptTokens {
    /// The prompt's token ids.
    pub ids: Vec<u32>,
    /// The rendered text, with client strings' control-token texts still as placeholders
    /// (for inspecting the template's own markers, e.g. an open `<think>`).
    pub text: String,
}

/// A parsed chat template with its special tokens, ready to render conversations.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
    options: ChatTemplateOptions,
    typed_content: bool,
}

impl ChatTemplate {
    /// Parses `source` with default [`ChatTemplateOptions`]. `bos_token` / `eos_token` are the
    /// texts of the special tokens, passed to the template as `bos_token` / `eos_token`.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, ChatTemplateError> {
        Self::with_options(source, bos_token, eos_token, ChatTemplateOptions::default())
    }

    /// Parses `source` with explicit options. A syntax error is reported as
    /// [`ChatTemplateError::Syntax`] naming the line.
    pub fn with_options(
        source: &str,
        bos_token: &str,
        eos_token: &str,
        options: ChatTemplateOptions,
    ) -> Result<Self, ChatTemplateError> {
        let mut tmpl = Self::unprobed(source, bos_token, eos_token, options)?;
        tmpl.typed_content = tmpl.probe_typed_content();
        Ok(tmpl)
    }

    /// Parses `source` without probing how it wants message content.
    fn unprobed(
        source: &str,
        bos_token: &str,
        eos_token: &str,
        options: ChatTemplateOptions,
    ) -> Result<Self, ChatTemplateError> {
        let mut env = build_env(&options);
        env.add_template_owned(TEMPLATE_NAME, preprocess(source)).map_err(|e| from_parse_error(&e))?;
        Ok(ChatTemplate {
            env,
            source: source.to_owned(),
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
            options,
            typed_content: false,
        })
    }

    /// The template in `tokenizer.chat_template`, or `None` when the file has none.
    pub fn from_metadata(
        meta: &infr_gguf::Metadata,
        bos_text: &str,
        eos_text: &str,
    ) -> Result<Option<Self>, ChatTemplateError> {
        Self::from_metadata_named(meta, "default", bos_text, eos_text)
    }

    /// A named template: `"default"` is `tokenizer.chat_template`, any other name `n` is
    /// `tokenizer.chat_template.n` (e.g. `tool_use`, `rag`; see [`template_names`]).
    /// `None` when that key is absent.
    pub fn from_metadata_named(
        meta: &infr_gguf::Metadata,
        name: &str,
        bos_text: &str,
        eos_text: &str,
    ) -> Result<Option<Self>, ChatTemplateError> {
        let key = if name == "default" {
            "tokenizer.chat_template".to_owned()
        } else {
            format!("tokenizer.chat_template.{name}")
        };
        match meta.str(&key)? {
            Some(src) => Self::new(src, bos_text, eos_text).map(Some),
            None => Ok(None),
        }
    }

    /// The template a model should use: its own `tokenizer.chat_template` with the
    /// vocabulary's BOS/EOS texts, else [`builtin_for_arch`] of `general.architecture`.
    pub fn for_model(meta: &infr_gguf::Metadata) -> Result<Self, ChatTemplateError> {
        let bos = special_token_text(meta, "tokenizer.ggml.bos_token_id")?.unwrap_or_default();
        let eos = special_token_text(meta, "tokenizer.ggml.eos_token_id")?.unwrap_or_default();
        match Self::from_metadata(meta, &bos, &eos)? {
            Some(t) => Ok(t),
            None => {
                let arch = meta.str("general.architecture")?.unwrap_or("");
                Ok(builtin_for_arch(arch))
            }
        }
    }

    /// The built-in ChatML template ([`CHATML_TEMPLATE`]).
    pub fn chatml() -> Self {
        Self::builtin(CHATML_TEMPLATE)
    }

    /// The built-in Gemma turn template ([`GEMMA_TEMPLATE`]).
    pub fn gemma() -> Self {
        Self::builtin(GEMMA_TEMPLATE)
    }

    fn builtin(source: &str) -> Self {
        // Both sources are constants covered by unit tests; parsing them cannot fail.
        Self::new(source, "", "").expect("built-in chat template parses")
    }

    /// The template source as given (before `{% generation %}` tags were neutralised).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The text passed as `bos_token`.
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// The text passed as `eos_token`.
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    /// The options the template was built with.
    pub fn options(&self) -> &ChatTemplateOptions {
        &self.options
    }

    /// Whether the probe found that the template only renders typed content parts
    /// (string content is then wrapped into a text part).
    pub fn requires_typed_content(&self) -> bool {
        self.typed_content
    }

    /// Renders `req` and tokenizes the prompt so that only the template's own text yields
    /// special tokens: every string of the request (messages, tools, kwargs) goes through a
    /// [`crate::SpecialGuard`] first, so control-token text a client wrote (`<|im_end|>`,
    /// `<start_of_turn>`) is tokenized as plain text. `adapt` runs on the guarded request
    /// before rendering (the server rewrites tool conversations there). A BOS that the
    /// template wrote itself is not doubled (llama.cpp drops the extra one).
    pub fn render_tokens(
        &self,
        tok: &crate::Tokenizer,
        mut req: ChatRequest,
        adapt: impl FnOnce(&mut ChatRequest),
    ) -> Result<PromptTokens, ChatTemplateError> {
        let mut guard = tok.guard();
        req.map_strings(&mut |s| guard.protect(s));
        adapt(&mut req);
        let text = self.render(&req)?;
        let mut ids = tok.encode_guarded(&text, true, &guard);
        if let Some(bos) = tok.bos() {
            if ids.len() >= 2 && ids[0] == bos && ids[1] == bos {
                ids.remove(0);
            }
        }
        Ok(PromptTokens { ids, text })
    }

    /// Renders `req` into the prompt text.
    pub fn render(&self, req: &ChatRequest) -> Result<String, ChatTemplateError> {
        let style = if self.typed_content { ContentStyle::Typed } else { ContentStyle::String };
        let messages = req
            .messages
            .iter()
            .map(|m| message_json(m, style))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ChatTemplateError::Request(e.to_string()))?;
        let mut ctx = Map::new();
        ctx.insert("bos_token".into(), Json::String(self.bos_token.clone()));
        ctx.insert("eos_token".into(), Json::String(self.eos_token.clone()));
        for (k, v) in &req.kwargs {
            if RESERVED.contains(&k.as_str()) {
                return Err(ChatTemplateError::Request(format!(
                    "kwarg '{k}' would replace a reserved template variable"
                )));
            }
            ctx.insert(k.clone(), v.clone());
        }
        ctx.insert("messages".into(), Json::Array(messages));
        ctx.insert("tools".into(), req.tools.clone().map(Json::Array).unwrap_or(Json::Null));
        ctx.insert("add_generation_prompt".into(), Json::Bool(req.add_generation_prompt));
        self.render_context(&Json::Object(ctx), self.options.fuel)
    }

    /// Render the prepared context: in the installed [`sandbox::RenderSandbox`] if there is one,
    /// else here.
    fn render_context(&self, ctx: &Json, fuel: Option<u64>) -> Result<String, ChatTemplateError> {
        match sandbox::sandbox() {
            Some(s) => {
                let options = ChatTemplateOptions { fuel, ..self.options.clone() };
                s.render(&sandbox::RenderJob::new(&self.source, &self.bos_token, &self.eos_token, &options, ctx))
            }
            None => self.render_context_here(ctx, fuel),
        }
    }

    /// Render the prepared context in this process.
    fn render_context_here(&self, ctx: &Json, fuel: Option<u64>) -> Result<String, ChatTemplateError> {
        let opts = &self.options;
        let tmpl = self.env.get_template(TEMPLATE_NAME).map_err(|e| from_parse_error(&e))?;
        let render = || {
            let mut out = CappedWriter { buf: Vec::new(), limit: opts.max_output_bytes, hit: false };
            // A template is untrusted input: a panic inside the template engine (one was found
            // by fuzzing: `{{ ''[::-1] }}`) must become an error, not take the process down.
            let rendered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                tmpl.render_captured_to(ctx, &mut out).map(|_| ())
            }));
            (rendered, out)
        };
        // The engine compares and sorts nested values recursively, and fuel allows building
        // lists tens of thousands of levels deep: render on a thread with a large stack (reserved,
        // not committed) so such a template cannot overflow the caller's stack.
        let (rendered, out) = std::thread::scope(|scope| {
            match std::thread::Builder::new()
                .name("chat-template".into())
                .stack_size(RENDER_STACK)
                .spawn_scoped(scope, render)
            {
                Ok(handle) => handle.join().unwrap_or_else(|_| (Err(Box::new("render thread failed")), empty_writer())),
                Err(_) => render(),
            }
        });
        let result = match rendered {
            Ok(r) => r,
            Err(payload) => {
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown failure".into());
                return Err(ChatTemplateError::Render {
                    line: None,
                    message: format!("template engine failure: {what}"),
                });
            }
        };
        if let Err(e) = result {
            if out.hit {
                return Err(ChatTemplateError::OutputTooLarge { limit: opts.max_output_bytes });
            }
            return Err(from_render_error(&e, fuel, self.env.recursion_limit()));
        }
        String::from_utf8(out.buf).map_err(|e| ChatTemplateError::Render { line: None, message: e.to_string() })
    }

    /// Renders a one-user-message conversation with string and with typed content; the
    /// template "requires typed content" when only the latter shows the text.
    fn probe_typed_content(&mut self) -> bool {
        const NEEDLE: &str = "<__infr_content_probe__>";
        let real_fuel = self.options.fuel;
        let probe_fuel = Some(real_fuel.map_or(PROBE_FUEL, |f| f.min(PROBE_FUEL)));
        self.env.set_fuel(probe_fuel);
        let probe = |content: Json| {
            let ctx = serde_json::json!({
                "bos_token": self.bos_token, "eos_token": self.eos_token, "tools": null,
                "add_generation_prompt": false, "messages": [{"role": "user", "content": content}],
            });
            self.render_context(&ctx, probe_fuel).map(|s| s.contains(NEEDLE)).unwrap_or(false)
        };
        let with_string = probe(Json::String(NEEDLE.into()));
        let with_parts = !with_string && probe(serde_json::json!([{"type": "text", "text": NEEDLE}]));
        self.env.set_fuel(real_fuel);
        with_parts
    }
}

/// Collects output, refusing to grow past `limit` bytes.
struct CappedWriter {
    buf: Vec<u8>,
    limit: usize,
    hit: bool,
}

impl io::Write for CappedWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len().saturating_add(data.len()) > self.limit {
            self.hit = true;
            return Err(io::Error::other("chat template output limit reached"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Stack reserved for a render thread (address space only; pages are committed as used).
const RENDER_STACK: usize = 1 << 30;

fn empty_writer() -> CappedWriter {
    CappedWriter { buf: Vec::new(), limit: 0, hit: false }
}

/// The minijinja environment: transformers-like whitespace handling, Python-flavoured
/// printing, and the functions and filters chat templates use.
fn build_env(options: &ChatTemplateOptions) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    env.set_undefined_behavior(UndefinedBehavior::Chainable);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_fuel(options.fuel);
    env.set_recursion_limit(options.recursion_limit);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_formatter(|out, _state, value| {
        let text = match value.as_str() {
            Some(s) => std::borrow::Cow::Borrowed(s),
            None => std::borrow::Cow::Owned(python_str(value)),
        };
        out.write_str(&text).map_err(minijinja::Error::from)
    });
    env.add_function("raise_exception", |msg: Option<Value>| -> Result<Value, minijinja::Error> {
        let msg = msg.map(|m| python_str(&m)).unwrap_or_default();
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, format!("raise_exception: {msg}"))
            .with_source(RaisedException(msg)))
    });
    let now = options.now;
    env.add_function("strftime_now", move |fmt: &str| strftime(fmt, now.unwrap_or_else(SystemTime::now)));
    env.add_filter("tojson", pyfmt::tojson_filter);
    env.add_filter("string", |v: &Value| python_str(v));
    // minijinja's `pprint` filter and `debug` function nest pretty-printers with cubic cost on
    // deeply nested values (fuzzing: seconds to minutes, not bounded by fuel); use the
    // depth-capped Python repr instead.
    env.add_filter("pprint", |v: &Value| python_repr(v));
    env.add_function("debug", |args: minijinja::value::Rest<Value>| -> String {
        args.iter().map(python_repr).collect::<Vec<_>>().join(", ")
    });
    env
}

/// Turns transformers' `{% generation %}` / `{% endgeneration %}` tags (which only mark the
/// assistant's tokens for training masks) into an always-true `if` block, keeping whitespace
/// control markers and line numbers intact.
fn preprocess(source: &str) -> String {
    if !source.contains("generation") {
        return source.to_owned();
    }
    let Ok(re) = regex::Regex::new(r"\{%([-+]?)(\s*)(end)?generation(\s*)([-+]?)%\}") else {
        return source.to_owned();
    };
    re.replace_all(source, |c: &regex::Captures<'_>| {
        let body = if c.get(3).is_some() { "endif" } else { "if true" };
        format!("{{%{}{}{}{}{}%}}", &c[1], &c[2], body, &c[4], &c[5])
    })
    .into_owned()
}

#[cfg(test)]
mod tests;
