//! API-key check: `Authorization: Bearer KEY` or `x-api-key: KEY`, compared in constant time.
//! `/health` is never gated; errors on `/v1/messages*` use Anthropic's shape.

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::errors::{AnthropicError, ApiError, OpenAiError};
use crate::state::SharedState;

/// The key a request presents, if any.
fn presented(headers: &HeaderMap) -> Option<&[u8]> {
    if let Some(v) = headers.get(axum::http::header::AUTHORIZATION) {
        let v = v.as_bytes();
        let bearer = b"Bearer ";
        if v.len() > bearer.len() && v[..bearer.len()].eq_ignore_ascii_case(bearer) {
            return Some(&v[bearer.len()..]);
        }
    }
    headers.get("x-api-key").map(|v| v.as_bytes())
}

/// Whether `headers` carry `key` (constant time in the key's contents).
pub fn authorized(headers: &HeaderMap, key: &str) -> bool {
    presented(headers).is_some_and(|p| bool::from(p.ct_eq(key.as_bytes())))
}

/// Middleware rejecting requests without the server's key (when one is set).
pub async fn require_key(State(st): State<SharedState>, req: Request, next: Next) -> Response {
    if let Some(key) = &st.opts.api_key {
        if !authorized(req.headers(), key) {
            return if req.uri().path().starts_with("/v1/messages") {
                AnthropicError(ApiError::Unauthorized).into_response()
            } else {
                OpenAiError(ApiError::Unauthorized).into_response()
            };
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn bearer_or_x_api_key() {
        assert!(authorized(&headers(&[("authorization", "Bearer sk-1")]), "sk-1"));
        assert!(authorized(&headers(&[("authorization", "bearer sk-1")]), "sk-1"));
        assert!(authorized(&headers(&[("x-api-key", "sk-1")]), "sk-1"));
        assert!(!authorized(&headers(&[("authorization", "Bearer sk-2")]), "sk-1"));
        assert!(!authorized(&headers(&[("authorization", "sk-1")]), "sk-1"));
        assert!(!authorized(&headers(&[("x-api-key", "sk-10")]), "sk-1"));
        assert!(!authorized(&headers(&[]), "sk-1"));
    }
}
