//! Several models behind one listener (`infr multi`): each model keeps its own state and
//! routes ([`crate::router`]: scheduler, tokenizer, template, key check, metrics), and this
//! front routes a request to one of them by the `model` of its JSON body (the path for
//! `/v1/models/{id}`, the `model` query parameter for `GET /props` and `/metrics`). The model
//! list and health cover them all; an unknown model gets a 404 naming the served ones.

use axum::body::{to_bytes, Body};
use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::errors::{AnthropicError, ApiError, OpenAiError};
use crate::SharedState;

/// The models of one server: their ids (as requests name them) and states.
#[derive(Clone)]
struct Models(std::sync::Arc<Vec<(String, SharedState, Router)>>);

impl Models {
    fn ids(&self) -> String {
        self.0.iter().map(|(id, _, _)| format!("'{id}'")).collect::<Vec<_>>().join(", ")
    }

    fn find(&self, id: &str) -> Option<&(String, SharedState, Router)> {
        self.0.iter().find(|(m, _, _)| m == id)
    }
}

/// The front router over `models` (id, state); ids must be distinct.
pub fn multi_router(models: Vec<(String, SharedState)>) -> Router {
    let models =
        Models(std::sync::Arc::new(models.into_iter().map(|(id, st)| (id, st.clone(), crate::router(st))).collect()));
    Router::new().fallback(move |req: Request| dispatch(models.clone(), req))
}

/// The error for `e` in the shape of the API `path` belongs to.
fn error(path: &str, e: ApiError) -> Response {
    if path.starts_with("/v1/messages") {
        AnthropicError(e).into_response()
    } else {
        OpenAiError(e).into_response()
    }
}

async fn dispatch(models: Models, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    let anthropic = req.headers().contains_key("anthropic-version");
    if req.method() == Method::GET && (path == "/health" || path == "/v1/health") {
        return health(&models).await;
    }
    // The key check comes before anything is read or named (every model shares the key).
    if let Some(key) = &models.0[0].1.opts.api_key {
        if !crate::auth::authorized(req.headers(), key) {
            return error(&path, ApiError::Unauthorized);
        }
    }
    if req.method() == Method::GET && (path == "/v1/models" || path == "/models") {
        return list(&models, req, anthropic).await;
    }
    // `GET /v1/models/{id}` goes to that model.
    if let Some(id) = path.strip_prefix("/v1/models/") {
        return match models.find(id) {
            Some((_, _, r)) => forward(r.clone(), req).await,
            None => {
                let e = ApiError::NotFound(format!("the model '{id}' does not exist (served: {})", models.ids()));
                if anthropic {
                    AnthropicError(e).into_response()
                } else {
                    OpenAiError(e).into_response()
                }
            }
        };
    }
    if req.method() != Method::POST {
        // `GET /props`, `/metrics`, `/`: the model of the `model` query parameter, else the first.
        let wanted = req.uri().query().and_then(|q| {
            q.split('&').find_map(|kv| kv.strip_prefix("model=")).map(|v| v.replace("%2F", "/").replace('+', " "))
        });
        let target = match wanted {
            Some(id) => match models.find(&id) {
                Some(m) => m,
                None => {
                    let e = ApiError::NotFound(format!("the model '{id}' does not exist (served: {})", models.ids()));
                    return error(&path, e);
                }
            },
            None => &models.0[0],
        };
        return forward(target.2.clone(), req).await;
    }
    // A generation request: read the body (bounded as the model routes bound it) for its model.
    let (parts, body) = req.into_parts();
    let bytes = match crate::errors::read_body(body).await {
        Ok(b) => b,
        Err(e) => return error(&path, e),
    };
    let named = serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| v.get("model")?.as_str().map(str::to_owned));
    let target = match named {
        Some(id) => match models.find(&id) {
            Some(m) => m,
            None => {
                let e = ApiError::NotFound(format!("the model '{id}' does not exist (served: {})", models.ids()));
                return error(&path, e);
            }
        },
        // One model needs no name; a malformed body gets its error from the model's route.
        None if models.0.len() == 1 || serde_json::from_slice::<Value>(&bytes).is_err() => &models.0[0],
        None => {
            let e = ApiError::BadRequest {
                message: format!("'model' is required: this server serves {}", models.ids()),
                param: Some("model".into()),
            };
            return error(&path, e);
        }
    };
    forward(target.2.clone(), Request::from_parts(parts, Body::from(bytes))).await
}

async fn forward(router: Router, req: Request) -> Response {
    match router.oneshot(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

/// `GET /health`: every model's slots; 503 while any model is not ready.
async fn health(models: &Models) -> Response {
    let mut all = serde_json::Map::new();
    let mut ok = true;
    for (id, _, r) in models.0.iter() {
        let resp = forward(r.clone(), Request::get("/health").body(Body::empty()).expect("a static request")).await;
        ok &= resp.status().is_success();
        let body = to_bytes(resp.into_body(), 1 << 20).await.unwrap_or_default();
        all.insert(id.clone(), serde_json::from_slice(&body).unwrap_or(Value::Null));
    }
    let status = if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, axum::Json(json!({ "status": if ok { "ok" } else { "unavailable" }, "models": all }))).into_response()
}

/// `GET /v1/models`: every model's entry, in the OpenAI or the Anthropic shape.
async fn list(models: &Models, req: Request, anthropic: bool) -> Response {
    let (parts, _) = req.into_parts();
    let mut data = Vec::new();
    for (_, _, r) in models.0.iter() {
        let mut sub = Request::get("/v1/models").body(Body::empty()).expect("a static request");
        *sub.headers_mut() = parts.headers.clone();
        let resp = forward(r.clone(), sub).await;
        if !resp.status().is_success() {
            // The key check failed: the same answer for the whole list.
            return resp;
        }
        let body = to_bytes(resp.into_body(), 1 << 20).await.unwrap_or_default();
        if let Ok(v) = serde_json::from_slice::<Value>(&body) {
            data.extend(v["data"].as_array().cloned().unwrap_or_default());
        }
    }
    let body = if anthropic {
        let first = data.first().map(|m| m["id"].clone()).unwrap_or(Value::Null);
        let last = data.last().map(|m| m["id"].clone()).unwrap_or(Value::Null);
        json!({ "data": data, "has_more": false, "first_id": first, "last_id": last })
    } else {
        json!({ "object": "list", "data": data })
    };
    axum::Json(body).into_response()
}
