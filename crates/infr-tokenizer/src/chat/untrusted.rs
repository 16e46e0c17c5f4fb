//! Rewriting every client-supplied string of a chat request, for [`crate::SpecialGuard`].

use serde_json::{Map, Value as Json};

use super::types::{ChatContent, ChatMessage, ChatRequest};

/// Every string of a JSON value, object keys included.
fn json_strings(v: &mut Json, f: &mut dyn FnMut(&str) -> String) {
    match v {
        Json::String(s) => *s = f(s),
        Json::Array(items) => items.iter_mut().for_each(|x| json_strings(x, f)),
        Json::Object(map) => object_strings(map, f),
        _ => {}
    }
}

fn object_strings(map: &mut Map<String, Json>, f: &mut dyn FnMut(&str) -> String) {
    let old = std::mem::take(map);
    for (k, mut v) in old {
        json_strings(&mut v, f);
        map.insert(f(&k), v);
    }
}

impl ChatMessage {
    /// Apply `f` to every string of the message: role, content (text and every field of
    /// typed parts), tool calls (ids, names, arguments), tool-call id, name, reasoning.
    pub fn map_strings(&mut self, f: &mut dyn FnMut(&str) -> String) {
        self.role = f(&self.role);
        match &mut self.content {
            Some(ChatContent::Text(s)) => *s = f(s),
            Some(ChatContent::Parts(parts)) => {
                for p in parts {
                    p.kind = f(&p.kind);
                    if let Some(t) = &mut p.text {
                        *t = f(t);
                    }
                    object_strings(&mut p.extra, f);
                }
            }
            None => {}
        }
        for call in self.tool_calls.iter_mut().flatten() {
            if let Some(id) = &mut call.id {
                *id = f(id);
            }
            call.kind = f(&call.kind);
            call.function.name = f(&call.function.name);
            json_strings(&mut call.function.arguments, f);
        }
        for s in [&mut self.tool_call_id, &mut self.name, &mut self.reasoning_content].into_iter().flatten() {
            *s = f(s);
        }
    }
}

impl ChatRequest {
    /// Apply `f` to every string a client supplied: the messages, the tool definitions and the
    /// template variables of `kwargs` (keys and values).
    pub fn map_strings(&mut self, f: &mut dyn FnMut(&str) -> String) {
        for m in &mut self.messages {
            m.map_strings(f);
        }
        for t in self.tools.iter_mut().flatten() {
            json_strings(t, f);
        }
        object_strings(&mut self.kwargs, f);
    }
}
