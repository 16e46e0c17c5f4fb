//! OpenAI's `response_format`: `{"type": "text"}` (no constraint), `{"type": "json_object"}`
//! (the reply is a JSON object) and `{"type": "json_schema", "json_schema": {"name", "schema",
//! "strict"}}` (the reply validates against `schema`), enforced with a grammar (llguidance's
//! `%json`), as a forced tool call is (see [`crate::tools::grammar`]).

use serde_json::{json, Value};

use crate::errors::ApiError;

const PARAM: &str = "response_format";

/// The JSON schema the reply must follow for `response_format`, or `None` (absent, `null` or
/// `text`). Malformed values are a 400 naming `response_format`.
pub fn schema(format: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let Some(format) = format.filter(|v| !v.is_null()) else { return Ok(None) };
    let Some(obj) = format.as_object() else {
        return Err(ApiError::bad("response_format must be an object", PARAM));
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({ "type": "object" }))),
        Some("json_schema") => {
            let spec = obj.get("json_schema").and_then(Value::as_object).ok_or_else(|| {
                ApiError::bad("response_format of type json_schema needs a json_schema object", PARAM)
            })?;
            match spec.get("schema") {
                Some(s) if s.is_object() => Ok(Some(s.clone())),
                Some(_) => Err(ApiError::bad("response_format.json_schema.schema must be an object", PARAM)),
                None => Err(ApiError::bad("response_format.json_schema needs a schema", PARAM)),
            }
        }
        Some(other) => Err(ApiError::bad(
            format!("unknown response_format type '{other}' (expected text, json_object or json_schema)"),
            PARAM,
        )),
        None => Err(ApiError::bad("response_format needs a type", PARAM)),
    }
}

/// The Lark grammar for a reply that is one JSON value of `schema`. Whitespace between tokens
/// is allowed but bounded (so a model cannot pad forever), unless the schema sets its own
/// `x-guidance` options.
pub fn json_grammar(schema: &Value) -> String {
    let mut schema = schema.clone();
    if let Some(obj) = schema.as_object_mut() {
        obj.entry("x-guidance").or_insert_with(|| json!({ "whitespace_pattern": "[\\x20\\x0A\\x0D\\x09]{1,16}" }));
    }
    format!("start: %json {schema}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_formats() {
        assert_eq!(schema(None).unwrap(), None);
        assert_eq!(schema(Some(&Value::Null)).unwrap(), None);
        assert_eq!(schema(Some(&json!({"type": "text"}))).unwrap(), None);
        assert_eq!(schema(Some(&json!({"type": "json_object"}))).unwrap(), Some(json!({"type": "object"})));
        let s = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let f = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": s, "strict": true}});
        assert_eq!(schema(Some(&f)).unwrap(), Some(s));
        for bad in [
            json!("json_object"),
            json!({}),
            json!({"type": "yaml"}),
            json!({"type": "json_schema"}),
            json!({"type": "json_schema", "json_schema": {"name": "x"}}),
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": 3}}),
        ] {
            match schema(Some(&bad)) {
                Err(ApiError::BadRequest { param, .. }) => assert_eq!(param.as_deref(), Some(PARAM), "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn grammar_embeds_schema() {
        let g = json_grammar(&json!({"type": "object"}));
        assert!(g.starts_with("start: %json {"), "{g}");
        assert!(g.contains("\"type\":\"object\"") && g.contains("whitespace_pattern"), "{g}");
        let g = json_grammar(&json!({"type": "object", "x-guidance": {"whitespace_flexible": false}}));
        assert!(!g.contains("whitespace_pattern"), "{g}");
    }
}
