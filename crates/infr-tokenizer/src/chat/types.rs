//! The conversation handed to a chat template, in the OpenAI chat-completions shape, and how it
//! is turned into the JSON the template sees.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};

/// One message of a conversation (OpenAI chat-completions shape).
///
/// Fields that are `None` are *absent* in the template (`message.tool_calls is defined` is
/// false), except `content`, which is always present and `none` when unset — OpenAI sends
/// `"content": null` for assistant messages that only call tools.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, or whatever the template understands.
    pub role: String,
    /// The text, or a list of typed parts; `None` renders as `none`.
    #[serde(default)]
    pub content: Option<ChatContent>,
    /// Tool calls made by an assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// For `tool` messages: the id of the call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Optional name of the author (for `tool` messages: the function's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The model's reasoning ("thinking") for assistant messages, for templates that replay it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

impl ChatMessage {
    /// A message with plain-text content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage { role: role.into(), content: Some(ChatContent::Text(content.into())), ..Self::default() }
    }

    /// A `system` message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }

    /// A `user` message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }

    /// An `assistant` message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }

    /// An assistant message that calls tools (content `none`).
    pub fn assistant_tool_calls(tool_calls: Vec<ToolCall>) -> Self {
        ChatMessage { role: "assistant".into(), tool_calls: Some(tool_calls), ..Self::default() }
    }

    /// A `tool` message answering the call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage { tool_call_id: Some(tool_call_id.into()), ..Self::new("tool", content) }
    }

    /// The text of the content: the string itself, or the `text` of all text parts joined
    /// with `"\n"` (as llama.cpp does for templates that want plain strings).
    pub fn text(&self) -> String {
        match &self.content {
            None => String::new(),
            Some(ChatContent::Text(s)) => s.clone(),
            Some(ChatContent::Parts(parts)) => {
                parts.iter().filter_map(|p| p.text.as_deref()).collect::<Vec<_>>().join("\n")
            }
        }
    }
}

/// Message content: a string, or a list of typed parts (`[{"type": "text", "text": ...}]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ChatContent {
    /// Plain text.
    Text(String),
    /// Typed parts (text, images, ...).
    Parts(Vec<ContentPart>),
}

impl From<&str> for ChatContent {
    fn from(s: &str) -> Self {
        ChatContent::Text(s.to_owned())
    }
}

impl From<String> for ChatContent {
    fn from(s: String) -> Self {
        ChatContent::Text(s)
    }
}

/// One typed content part; unknown fields (e.g. `image_url`) are kept as they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentPart {
    /// The part type: `text`, `image_url`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// All other fields of the part.
    #[serde(flatten)]
    pub extra: Map<String, Json>,
}

impl ContentPart {
    /// A `{"type": "text", "text": ...}` part.
    pub fn text(text: impl Into<String>) -> Self {
        ContentPart { kind: "text".into(), text: Some(text.into()), extra: Map::new() }
    }
}

/// A tool call of an assistant message (OpenAI shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call id, echoed back by the `tool` message answering it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Always `function` today.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// The function called.
    pub function: FunctionCall,
}

fn function_kind() -> String {
    "function".into()
}

impl ToolCall {
    /// A function call; `arguments` may be a JSON object or a string holding JSON.
    pub fn function(id: Option<String>, name: impl Into<String>, arguments: Json) -> Self {
        ToolCall { id, kind: function_kind(), function: FunctionCall { name: name.into(), arguments } }
    }
}

/// The function part of a [`ToolCall`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// Function name.
    pub name: String,
    /// Arguments: OpenAI sends a string holding a JSON object; an object is accepted too.
    /// Templates receive the parsed object whenever the string parses to a JSON object
    /// (as HF transformers users pass them, and as llama.cpp does), else the string itself.
    #[serde(default)]
    pub arguments: Json,
}

/// Everything a chat template renders: the conversation plus options.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Tool definitions in OpenAI JSON (`{"type": "function", "function": {...}}`); `None`
    /// is passed to the template as `none`, like transformers does.
    #[serde(default)]
    pub tools: Option<Vec<Json>>,
    /// Append the header of the assistant's next turn.
    #[serde(default)]
    pub add_generation_prompt: bool,
    /// Extra template variables (`enable_thinking`, `date_string`, ...); they may override
    /// `bos_token`/`eos_token` but not `messages`, `tools` or `add_generation_prompt`.
    #[serde(default)]
    pub kwargs: Map<String, Json>,
}

impl ChatRequest {
    /// A request for `messages` with the generation prompt added and no tools.
    pub fn new(messages: Vec<ChatMessage>) -> Self {
        ChatRequest { messages, add_generation_prompt: true, ..Self::default() }
    }
}

/// How message content is adapted to what the template can render.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContentStyle {
    /// Template concatenates `message.content` as a string: all-text part lists are
    /// flattened into one string (parts joined with `"\n"`).
    String,
    /// Template iterates typed parts: string content becomes `[{"type": "text", ...}]`.
    Typed,
}

/// The JSON a message is given to the template as.
pub(crate) fn message_json(msg: &ChatMessage, style: ContentStyle) -> Result<Json, serde_json::Error> {
    let mut v = serde_json::to_value(msg)?;
    let Some(obj) = v.as_object_mut() else { return Ok(v) };
    match (&msg.content, style) {
        (Some(ChatContent::Parts(parts)), ContentStyle::String) if parts.iter().all(|p| p.kind == "text") => {
            obj.insert("content".into(), Json::String(msg.text()));
        }
        (Some(ChatContent::Text(s)), ContentStyle::Typed) => {
            obj.insert("content".into(), serde_json::to_value(vec![ContentPart::text(s.clone())])?);
        }
        _ => {}
    }
    if let Some(Json::Array(calls)) = obj.get_mut("tool_calls") {
        for call in calls {
            let Some(args) = call.get_mut("function").and_then(|f| f.get_mut("arguments")) else { continue };
            if let Json::String(s) = args {
                if let Ok(parsed @ Json::Object(_)) = serde_json::from_str::<Json>(s) {
                    *args = parsed;
                }
            }
        }
    }
    Ok(v)
}
