//! The accept loop: what `axum::serve` does, plus the limits it does not expose. A client
//! that opens connections and never finishes a request's headers is cut off after
//! [`HEADER_READ_TIMEOUT`], and at most [`MAX_CONNECTIONS`] connections are served at once
//! (more are closed as they arrive), so half-open connections cannot exhaust the process's
//! descriptors and starve `/health`. The request body's own deadline is
//! [`crate::errors::BODY_READ_TIMEOUT`], applied where handlers read it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;

/// How long a connection may take to send a complete request head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections served at once; further ones are closed on arrival until one ends.
pub const MAX_CONNECTIONS: usize = 1024;

/// Time the connections still open get to close after the grace period's end (their
/// requests were ended; this is for the final events to be written).
const FINAL_FLUSH: Duration = Duration::from_secs(5);

/// The accept loop's limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Time to receive a request head.
    pub header_timeout: Duration,
    /// After shutdown, how long connections in flight may go on (`None`: until they end).
    pub grace: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_connections: MAX_CONNECTIONS, header_timeout: HEADER_READ_TIMEOUT, grace: None }
    }
}

/// Serve `app` on `listener` until `shutdown` resolves, then wait for the connections in
/// flight (running streams finish) and return.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, app, shutdown, Limits::default(), || {}).await
}

/// [`serve`] with explicit limits; `grace_over` runs when the grace period ends with
/// connections still open (it should end their requests).
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: Limits,
    grace_over: impl FnOnce(),
) -> std::io::Result<()> {
    let Limits { max_connections, header_timeout, grace } = limits;
    let slots = Arc::new(Semaphore::new(max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(header_timeout);
    let mut warned_full = false;
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            if !warned_full {
                tracing::warn!("{max_connections} connections open: closing new ones until some end");
                warned_full = true;
            }
            drop(stream);
            continue;
        };
        warned_full = false;
        let svc = TowerToHyperService::new(app.clone());
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("connection ended: {e}");
            }
            drop(permit);
        });
    }
    // Draining: new connections are still answered (health checks get 503 "draining",
    // generation requests 503), each closing after its request, so that gateways and
    // orchestrators see the replica leave instead of a refused port, until the end.
    let late = {
        let (app, slots) = (app.clone(), slots.clone());
        tokio::spawn(async move {
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder.http1().timer(TokioTimer::new()).header_read_timeout(header_timeout).keep_alive(false);
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let Ok(permit) = slots.clone().try_acquire_owned() else { continue };
                let svc = TowerToHyperService::new(app.clone());
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc).into_owned();
                tokio::spawn(async move {
                    let _ = conn.await;
                    drop(permit);
                });
            }
        })
    };
    let closed = graceful.shutdown();
    tokio::pin!(closed);
    let Some(grace) = grace else {
        closed.await;
        late.abort();
        return Ok(());
    };
    if tokio::time::timeout(grace, &mut closed).await.is_err() {
        tracing::warn!("grace period of {} s over: ending the requests still running", grace.as_secs_f32());
        grace_over();
        if tokio::time::timeout(FINAL_FLUSH, &mut closed).await.is_err() {
            tracing::warn!("connections still open {} s later: closing them", FINAL_FLUSH.as_secs());
        }
    }
    late.abort();
    Ok(())
}
