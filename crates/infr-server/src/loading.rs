//! Listening while the model loads: a gateway or orchestrator probing `/health` sees 503
//! (`"status": "loading"`) from the moment the port is open until the model is ready, then
//! the model's own routes answer; every other route answers 503 in its API's error shape
//! meanwhile. A failed load ends the server with that error.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Router;
use infr_engine::SchedulerHandle;
use serde_json::json;
use tower::ServiceExt;

use crate::errors::{AnthropicError, ApiError, OpenAiError};

/// What serving needs once the model is ready: its routes, and the schedulers a shutdown
/// drains.
pub struct Ready {
    pub app: Router,
    pub scheds: Vec<SchedulerHandle>,
}

impl Ready {
    /// One model's routes.
    pub fn one(state: crate::SharedState) -> Self {
        Ready { scheds: vec![state.sched.clone()], app: crate::router(state) }
    }

    /// Several models behind the model-name router.
    pub fn many(models: Vec<(String, crate::SharedState)>) -> Self {
        Ready {
            scheds: models.iter().map(|(_, st)| st.sched.clone()).collect(),
            app: crate::multi::multi_router(models),
        }
    }
}

async fn answer(slot: Arc<OnceLock<Ready>>, req: Request) -> Response {
    if let Some(r) = slot.get() {
        return match r.app.clone().oneshot(req).await {
            Ok(resp) => resp,
            Err(never) => match never {},
        };
    }
    let path = req.uri().path();
    if path == "/health" || path == "/v1/health" {
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({ "status": "loading" }))).into_response();
    }
    let e = ApiError::Busy("the model is loading; try again shortly".into());
    if path.starts_with("/v1/messages") {
        AnthropicError(e).into_response()
    } else {
        OpenAiError(e).into_response()
    }
}

/// Serve on `listener` while `load` runs (on a blocking thread), then the routes it returns,
/// until `shutdown` resolves: then drain as [`crate::serve_graceful`] does. `on_ready` runs once
/// those routes answer (e.g. to announce the server). Returns the load's error if it fails (the
/// listener is closed then).
pub async fn serve_while_loading(
    listener: tokio::net::TcpListener,
    load: impl FnOnce() -> Result<Ready, String> + Send + 'static,
    on_ready: impl FnOnce() + Send + 'static,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Option<std::time::Duration>,
) -> Result<(), String> {
    let slot: Arc<OnceLock<Ready>> = Arc::new(OnceLock::new());
    let app = {
        let slot = slot.clone();
        Router::new().fallback(move |req: Request| answer(slot.clone(), req))
    };
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<String>();
    {
        let slot = slot.clone();
        let job = tokio::task::spawn_blocking(move || match load() {
            Ok(ready) => {
                let _ = slot.set(ready);
                on_ready();
                Ok(())
            }
            Err(e) => Err(e),
        });
        // A load that fails or panics ends the server (rather than loading forever).
        tokio::spawn(async move {
            let failed = match job.await {
                Ok(Ok(())) => return,
                Ok(Err(e)) => e,
                Err(e) => format!("loading the model failed: {e}"),
            };
            let _ = failed_tx.send(failed);
        });
    }
    let failure = Arc::new(std::sync::Mutex::new(None));
    let stop = {
        let (slot, failure) = (slot.clone(), failure.clone());
        async move {
            tokio::select! {
                _ = shutdown => {}
                Ok(e) = failed_rx => {
                    if let Ok(mut f) = failure.lock() {
                        *f = Some(e);
                    }
                }
            }
            for s in slot.get().map(|r| r.scheds.as_slice()).unwrap_or_default() {
                s.drain();
            }
        }
    };
    let limits = crate::listen::Limits { grace, ..crate::listen::Limits::default() };
    let end_slot = slot.clone();
    crate::listen::serve_with(listener, app, stop, limits, move || {
        for s in end_slot.get().map(|r| r.scheds.as_slice()).unwrap_or_default() {
            s.end_running();
        }
    })
    .await
    .map_err(|e| e.to_string())?;
    match failure.lock().ok().and_then(|mut f| f.take()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
