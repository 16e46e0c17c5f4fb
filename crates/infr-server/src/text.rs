//! Text in and out: chat rendering, tokenization and streaming detokenization, over
//! `infr_tokenizer`.

use std::sync::OnceLock;

use infr_engine::TokenConstraint;
use infr_tokenizer::chat::{ChatMessage, ChatRequest, ChatTemplate};
use infr_tokenizer::{StreamDecoder, Tokenizer};
use serde_json::{Map, Value};

use crate::errors::ApiError;
use crate::reasoning::prompt_opens_reasoning;
use crate::tools::grammar::{self, GrammarEnv};
use crate::tools::polyfill::{self, TemplateCaps};
use crate::tools::ToolSetup;

/// A rendered, tokenized chat prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatPrompt {
    /// The prompt's tokens.
    pub ids: Vec<u32>,
    /// Whether the prompt ends with an open `<think>` (the reply starts inside reasoning).
    pub reasoning_open: bool,
}

/// The model's tokenizer and chat template.
pub struct TextModel {
    tok: Tokenizer,
    template: ChatTemplate,
    caps: TemplateCaps,
    eog: Vec<u32>,
    grammar: OnceLock<Result<GrammarEnv, String>>,
}

impl TextModel {
    /// Wrap a tokenizer and the chat template to render conversations with.
    pub fn new(tok: Tokenizer, template: ChatTemplate) -> Self {
        let eog = tok.eog_ids().to_vec();
        let caps = TemplateCaps::of(template.source());
        Self { tok, template, caps, eog, grammar: OnceLock::new() }
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tok
    }

    /// The chat template.
    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// End-of-generation token ids (generation stops on them).
    pub fn stop_ids(&self) -> Vec<u32> {
        self.eog.clone()
    }

    /// Render a conversation with the generation prompt and tokenize it (the template's
    /// special tokens parsed, the client's text never; BOS added unless the template already
    /// wrote it). Tool definitions, calls and results are adapted to templates that cannot
    /// render them (see [`polyfill`]).
    pub fn chat_prompt(&self, messages: Vec<ChatMessage>, tools: Option<Vec<Value>>) -> Result<Vec<u32>, ApiError> {
        Ok(self.chat_prompt_with(messages, tools, Map::new())?.ids)
    }

    /// [`Self::chat_prompt`] with extra template variables (`chat_template_kwargs`, e.g.
    /// `enable_thinking`), also saying whether the prompt leaves reasoning open.
    pub fn chat_prompt_with(
        &self,
        messages: Vec<ChatMessage>,
        tools: Option<Vec<Value>>,
        kwargs: Map<String, Value>,
    ) -> Result<ChatPrompt, ApiError> {
        // Client text never becomes control tokens: only the template's own markers are
        // parsed as special tokens (see `ChatTemplate::render_tokens`).
        let req = ChatRequest { messages, tools, add_generation_prompt: true, kwargs };
        let caps = self.caps;
        let p = self
            .template
            .render_tokens(&self.tok, req, |r| polyfill::adapt(&mut r.messages, r.tools.as_deref(), caps))
            .map_err(|e| ApiError::BadRequest {
                message: format!("chat template: {e}"),
                param: Some("messages".into()),
            })?;
        Ok(ChatPrompt { reasoning_open: prompt_opens_reasoning(&p.text), ids: p.ids })
    }

    /// The grammar constraint that forces a tool call for `setup` (`tool_choice` required or
    /// named), or `None` (auto, or a dialect without a grammar: then the reply is only parsed).
    /// A forced call whose grammar cannot be built (a parameter schema the grammar engine
    /// rejects) is a 400 naming `tools`, not a reply that silently ignores `tool_choice`.
    pub fn tool_constraint(&self, setup: Option<&ToolSetup>) -> Result<Option<Box<dyn TokenConstraint>>, ApiError> {
        let control = |m: &str| self.tok.token_id(m).is_some_and(|id| self.tok.is_control(id));
        let Some(lark) = setup.and_then(|s| grammar::tool_grammar(s, &control)) else { return Ok(None) };
        let env = self.grammar.get_or_init(|| GrammarEnv::new(&self.tok));
        let env = env.as_ref().map_err(|e| ApiError::Internal(format!("grammar engine: {e}")))?;
        match env.constraint(&lark) {
            Ok(c) => Ok(Some(Box::new(c))),
            Err(e) => Err(ApiError::bad(
                format!("tool_choice cannot be enforced: a tool's parameter schema is not supported: {e}"),
                "tools",
            )),
        }
    }

    /// The grammar constraint that makes the reply one JSON value of `schema` (OpenAI's
    /// `response_format`); a schema the grammar engine rejects is a 400 naming `response_format`.
    pub fn json_constraint(&self, schema: &Value) -> Result<Box<dyn TokenConstraint>, ApiError> {
        let env = self.grammar.get_or_init(|| GrammarEnv::new(&self.tok));
        let env = env.as_ref().map_err(|e| ApiError::Internal(format!("grammar engine: {e}")))?;
        let c = env
            .constraint(&crate::response_format::json_grammar(schema))
            .map_err(|e| ApiError::bad(format!("response_format: unsupported schema: {e}"), "response_format"))?;
        Ok(Box::new(c))
    }

    /// Tokenize a raw completion prompt (BOS added where the model wants it, special tokens
    /// parsed, as llama.cpp's `/completion` does).
    pub fn encode_prompt(&self, text: &str) -> Vec<u32> {
        self.tok.encode(text, true, true)
    }

    /// A streaming decoder that only returns complete UTF-8 text; control tokens are not
    /// rendered (as llama.cpp's server does by default).
    pub fn decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(&self.tok).with_special(false)
    }
}
