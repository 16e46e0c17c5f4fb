//! API errors and their two wire shapes: OpenAI's `{"error":{message,type,param,code}}` and
//! Anthropic's `{"type":"error","error":{type,message}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use infr_engine::RequestError;
use serde_json::json;

/// Why a request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed or has an invalid value (400).
    #[error("{message}")]
    BadRequest {
        /// What is wrong.
        message: String,
        /// The offending field, where known.
        param: Option<String>,
    },
    /// The prompt does not fit the context (400); `param` names the field that holds it
    /// (`messages`, or `prompt` for completions).
    #[error("{message}")]
    ContextExceeded {
        /// The engine's message, with the numbers.
        message: String,
        /// The request field holding the prompt.
        param: &'static str,
        /// Prompt tokens, and the most a prompt may have.
        tokens: usize,
        limit: usize,
    },
    /// The request body is larger than the server accepts (413).
    #[error("{0}")]
    TooLarge(String),
    /// The request body did not arrive in time (408).
    #[error("{0}")]
    BodyTimeout(String),
    /// Missing or wrong API key (401).
    #[error("invalid or missing API key")]
    Unauthorized,
    /// No such route or object (404).
    #[error("{0}")]
    NotFound(String),
    /// Too many requests waiting (503).
    #[error("{0}")]
    Busy(String),
    /// The request ran past its time limit (503).
    #[error("{0}")]
    Timeout(String),
    /// The engine failed (500).
    #[error("{0}")]
    Internal(String),
    /// A feature this server was started without (501), e.g. `/metrics` without `--metrics`.
    #[error("{0}")]
    NotSupported(String),
}

impl ApiError {
    /// A 400 error naming a field.
    pub fn bad(message: impl Into<String>, param: impl Into<String>) -> Self {
        Self::BadRequest { message: message.into(), param: Some(param.into()) }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } | Self::ContextExceeded { .. } => StatusCode::BAD_REQUEST,
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Busy(_) | Self::Timeout(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::NotSupported(_) => StatusCode::NOT_IMPLEMENTED,
        }
    }

    /// The OpenAI error body.
    pub fn openai_body(&self) -> serde_json::Value {
        let (ty, code, param) = match self {
            Self::BadRequest { param, .. } => ("invalid_request_error", serde_json::Value::Null, param.clone()),
            Self::ContextExceeded { param, .. } => {
                ("invalid_request_error", json!("context_length_exceeded"), Some((*param).to_owned()))
            }
            Self::TooLarge(_) => ("invalid_request_error", json!("request_too_large"), None),
            Self::BodyTimeout(_) => ("invalid_request_error", json!("request_timeout"), None),
            Self::Unauthorized => ("authentication_error", json!("invalid_api_key"), None),
            Self::NotFound(_) => ("not_found_error", serde_json::Value::Null, None),
            Self::Busy(_) => ("unavailable_error", json!("server_busy"), None),
            Self::Timeout(_) => ("unavailable_error", json!("timeout"), None),
            Self::Internal(_) => ("server_error", serde_json::Value::Null, None),
            Self::NotSupported(_) => ("not_supported_error", serde_json::Value::Null, None),
        };
        json!({ "error": { "message": self.to_string(), "type": ty, "param": param, "code": code } })
    }

    /// The Anthropic error body.
    pub fn anthropic_body(&self) -> serde_json::Value {
        let ty = match self {
            Self::BadRequest { .. } | Self::ContextExceeded { .. } => "invalid_request_error",
            Self::TooLarge(_) => "request_too_large",
            Self::BodyTimeout(_) => "invalid_request_error",
            Self::Unauthorized => "authentication_error",
            Self::NotFound(_) => "not_found_error",
            Self::Busy(_) | Self::Timeout(_) => "overloaded_error",
            Self::Internal(_) | Self::NotSupported(_) => "api_error",
        };
        // The wording Anthropic clients parse to shrink their context and retry.
        let message = match self {
            Self::ContextExceeded { tokens, limit, .. } => {
                format!("prompt is too long: {tokens} tokens > {limit} maximum")
            }
            e => e.to_string(),
        };
        json!({ "type": "error", "error": { "type": ty, "message": message } })
    }
}

impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> Self {
        let msg = e.to_string();
        match e {
            RequestError::QueueFull { .. } | RequestError::ShutDown => Self::Busy(msg),
            RequestError::PromptTooLong { tokens, n_ctx } => {
                Self::ContextExceeded { message: msg, param: "messages", tokens, limit: n_ctx.saturating_sub(1) }
            }
            RequestError::EmptyPrompt | RequestError::InvalidToken { .. } => {
                Self::BadRequest { message: msg, param: None }
            }
            RequestError::InvalidSampling(m) => Self::BadRequest { message: m, param: None },
            RequestError::Timeout => Self::Timeout(msg),
            RequestError::Engine(_) | RequestError::Constraint(_) => Self::Internal(msg),
        }
    }
}

impl ApiError {
    /// The same error naming `field` as the one holding the prompt (completions say `prompt`).
    pub fn with_prompt_field(self, field: &'static str) -> Self {
        match self {
            Self::ContextExceeded { message, tokens, limit, .. } => {
                Self::ContextExceeded { message, param: field, tokens, limit }
            }
            e => e,
        }
    }
}

/// How long a request body may take to arrive once its headers have.
pub const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Read a request body of at most [`crate::MAX_BODY_BYTES`] within [`BODY_READ_TIMEOUT`]:
/// 413 (in the API's JSON shape; axum's own rejection is plain text) when it is larger, 408
/// when it trickles.
pub async fn read_body(body: axum::body::Body) -> Result<axum::body::Bytes, ApiError> {
    read_body_within(body, crate::MAX_BODY_BYTES, BODY_READ_TIMEOUT).await
}

/// [`read_body`] with explicit limits.
pub async fn read_body_within(
    body: axum::body::Body,
    max_bytes: usize,
    timeout: std::time::Duration,
) -> Result<axum::body::Bytes, ApiError> {
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, max_bytes)).await {
        Err(_) => Err(ApiError::BodyTimeout(format!("request body not received within {} s", timeout.as_secs_f32()))),
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) => {
            // `to_bytes` reports its limit as http-body-util's `LengthLimitError`, in the source chain.
            let too_large = std::iter::successors(Some(&e as &(dyn std::error::Error + 'static)), |c| c.source())
                .any(|c| c.is::<http_body_util::LengthLimitError>());
            if too_large {
                Err(ApiError::TooLarge(format!("request body is larger than {max_bytes} bytes")))
            } else {
                Err(ApiError::BadRequest { message: format!("cannot read the request body: {e}"), param: None })
            }
        }
    }
}

/// An [`ApiError`] answered in OpenAI's shape.
#[derive(Debug)]
pub struct OpenAiError(pub ApiError);

impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        (self.0.status(), Json(self.0.openai_body())).into_response()
    }
}

/// An [`ApiError`] answered in Anthropic's shape.
#[derive(Debug)]
pub struct AnthropicError(pub ApiError);

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        (self.0.status(), Json(self.0.anthropic_body())).into_response()
    }
}

/// Parse a JSON request body, naming the offending field on a type error.
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data if path != "." => {
                ApiError::BadRequest { message: format!("invalid value for '{path}': {inner}"), param: Some(path) }
            }
            serde_json::error::Category::Data => {
                ApiError::BadRequest { message: format!("invalid request body: {inner}"), param: None }
            }
            _ => ApiError::BadRequest { message: format!("malformed JSON in the request body: {inner}"), param: None },
        }
    })?;
    de.end().map_err(|e| ApiError::BadRequest {
        message: format!("malformed JSON in the request body: {e}"),
        param: None,
    })?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct T {
        temperature: Option<f32>,
        messages: Vec<M>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct M {
        role: String,
    }

    #[test]
    fn json_errors_name_the_field() {
        let e = parse_json::<T>(br#"{"temperature":"hot","messages":[]}"#).unwrap_err();
        assert!(e.to_string().contains("'temperature'"), "{e}");
        let e = parse_json::<T>(br#"{"messages":[{"role":3}]}"#).unwrap_err();
        assert!(e.to_string().contains("messages[0].role"), "{e}");
        let e = parse_json::<T>(br#"{"messages":[}"#).unwrap_err();
        assert!(e.to_string().contains("malformed JSON"), "{e}");
        let e = parse_json::<T>(br#"{}"#).unwrap_err();
        assert!(e.to_string().contains("messages"), "{e}");
        assert!(parse_json::<T>(br#"{"messages":[], "extra": {"x": 1}}"#).is_ok());
    }
}
