//! Tool conversations for chat templates that do not know about tools (SmolLM2, Gemma 3...):
//! the tool list goes into the system message, earlier calls are written into the assistant's
//! text in the `<tool_call>` form, and tool results become user turns when the template has no
//! `tool` role. Templates that handle these themselves get the conversation unchanged (except
//! that an assistant message with calls and no text gets empty text, which templates that
//! concatenate `content` need).

use infr_tokenizer::chat::{ChatContent, ChatMessage};
use serde_json::Value;

/// What a template's source shows it can render.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplateCaps {
    /// Reads the `tools` variable.
    pub tools: bool,
    /// Renders `message.tool_calls`.
    pub tool_calls: bool,
    /// Has a `tool` role (mentions `tool` as a role or tool responses).
    pub tool_role: bool,
    /// Renders a system message anywhere in the conversation: writes each message's role
    /// generically (ChatML-style) and raises no errors about roles.
    pub system_anywhere: bool,
}

impl TemplateCaps {
    /// Capabilities read off a template's source.
    pub fn of(source: &str) -> Self {
        Self {
            tools: source.contains("tools"),
            tool_calls: source.contains("tool_calls"),
            tool_role: source.contains("\"tool\"") || source.contains("'tool'") || source.contains("tool_response"),
            system_anywhere: (source.contains("message.role") || source.contains("message['role']"))
                && !source.contains("raise_exception"),
        }
    }
}

/// Adapt `messages` (and the tool list) to what the template renders.
pub fn adapt(messages: &mut Vec<ChatMessage>, tools: Option<&[Value]>, caps: TemplateCaps) {
    if !caps.system_anywhere {
        fold_late_system_messages(messages);
    }
    for m in messages.iter_mut() {
        let Some(calls) = m.tool_calls.take() else { continue };
        if caps.tool_calls {
            if m.content.is_none() {
                m.content = Some(ChatContent::Text(String::new()));
            }
            m.tool_calls = Some(calls);
            continue;
        }
        let mut text = m.text();
        for c in &calls {
            let args = match &c.function.arguments {
                Value::String(s) => serde_json::from_str::<Value>(s).unwrap_or_else(|_| Value::String(s.clone())),
                v => v.clone(),
            };
            let call = serde_json::json!({ "name": c.function.name, "arguments": args });
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&format!("<tool_call>\n{call}\n</tool_call>"));
        }
        m.content = Some(ChatContent::Text(text));
    }
    if !caps.tool_role {
        let old = std::mem::take(messages);
        for m in old {
            if m.role != "tool" {
                messages.push(m);
                continue;
            }
            let block = format!("<tool_response>\n{}\n</tool_response>", m.text());
            match messages.last_mut() {
                Some(prev) if prev.role == "user" && prev.text().ends_with("</tool_response>") => {
                    let merged = format!("{}\n{block}", prev.text());
                    prev.content = Some(ChatContent::Text(merged));
                }
                _ => messages.push(ChatMessage::user(block)),
            }
        }
    }
    if let Some(tools) = tools.filter(|t| !t.is_empty() && !caps.tools) {
        let prompt = system_prompt(tools);
        match messages.first_mut() {
            Some(first) if first.role == "system" => {
                let text = format!("{}\n\n{prompt}", first.text());
                first.content = Some(ChatContent::Text(text));
            }
            _ => messages.insert(0, ChatMessage::system(prompt)),
        }
    }
}

/// System messages after the first message go into the next user turn (or the previous one
/// when none follows), as the hosted APIs do for models without mid-conversation system
/// turns; a leading system message stays where templates expect it.
fn fold_late_system_messages(messages: &mut Vec<ChatMessage>) {
    if messages.iter().skip(1).all(|m| m.role != "system") {
        return;
    }
    let old = std::mem::take(messages);
    let mut pending: Vec<String> = Vec::new();
    for (i, m) in old.into_iter().enumerate() {
        if i > 0 && m.role == "system" {
            pending.push(m.text());
            continue;
        }
        let mut m = m;
        if m.role == "user" && !pending.is_empty() {
            let text = format!("{}\n\n{}", pending.join("\n\n"), m.text());
            m.content = Some(ChatContent::Text(text));
            pending.clear();
        }
        messages.push(m);
    }
    if !pending.is_empty() {
        match messages.iter_mut().rev().find(|m| m.role == "user") {
            Some(last) => {
                let text = format!("{}\n\n{}", last.text(), pending.join("\n\n"));
                last.content = Some(ChatContent::Text(text));
            }
            None => messages.push(ChatMessage::user(pending.join("\n\n"))),
        }
    }
}

/// The tool instructions for templates that do not write them.
pub fn system_prompt(tools: &[Value]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou can call functions to help answer. The available functions, one JSON \
         signature a line:\n<tools>\n",
    );
    for t in tools {
        s.push_str(&t.to_string());
        s.push('\n');
    }
    s.push_str(
        "</tools>\n\nTo call a function, reply with a JSON object holding its name and arguments \
         between <tool_call> and </tool_call>:\n<tool_call>\n{\"name\": \"function_name\", \
         \"arguments\": {\"arg\": \"value\"}}\n</tool_call>",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use infr_tokenizer::chat::ToolCall;
    use serde_json::json;

    /// Agents issue, defect 1: a system message mid-conversation stays a system turn where the
    /// template writes roles generically, and goes into the next user turn where it cannot.
    #[test]
    fn late_system_messages_are_kept_or_folded() {
        let chatml =
            "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>{% endfor %}";
        let strict = "{% if messages[1].role == 'system' %}{{ raise_exception('roles must alternate') }}{% endif %}";
        assert!(TemplateCaps::of(chatml).system_anywhere);
        assert!(!TemplateCaps::of(strict).system_anywhere);
        let convo = || {
            vec![
                ChatMessage::system("be brief"),
                ChatMessage::user("hi"),
                ChatMessage::assistant("hello"),
                ChatMessage::system("the user is in a hurry"),
                ChatMessage::user("what time is it?"),
                ChatMessage::system("answer in French"),
            ]
        };
        let mut kept = convo();
        adapt(&mut kept, None, TemplateCaps::of(chatml));
        assert_eq!(kept, convo());
        let mut folded = convo();
        adapt(&mut folded, None, TemplateCaps::of(strict));
        let roles: Vec<&str> = folded.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        assert_eq!(folded[3].text(), "the user is in a hurry\n\nwhat time is it?\n\nanswer in French");
    }

    fn convo() -> Vec<ChatMessage> {
        vec![
            ChatMessage::user("Weather in Paris?"),
            ChatMessage::assistant_tool_calls(vec![ToolCall::function(
                Some("call_1".into()),
                "get_weather",
                json!("{\"city\": \"Paris\"}"),
            )]),
            ChatMessage::tool("call_1", "{\"temp\": 21}"),
        ]
    }

    #[test]
    fn templates_without_tools_get_text() {
        let mut m = convo();
        let tools = [json!({"type": "function", "function": {"name": "get_weather"}})];
        adapt(&mut m, Some(&tools), TemplateCaps::of("{{ message['content'] }}"));
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].role, "system");
        assert!(m[0].text().contains("\"get_weather\""));
        assert_eq!(
            m[2].text(),
            "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>"
        );
        assert!(m[2].tool_calls.is_none());
        assert_eq!(
            (m[3].role.as_str(), m[3].text().as_str()),
            ("user", "<tool_response>\n{\"temp\": 21}\n</tool_response>")
        );
    }

    #[test]
    fn tool_aware_templates_keep_the_shape() {
        let mut m = convo();
        let src = "{% if tools %}{% for c in message.tool_calls %}{% elif message.role == \"tool\" %}";
        adapt(&mut m, None, TemplateCaps::of(src));
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].text(), "");
        assert!(m[1].tool_calls.is_some());
        assert_eq!(m[2].role, "tool");
    }
}
