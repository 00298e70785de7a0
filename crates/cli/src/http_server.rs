//! The API's HTTP server: at most so many connections at once, a request
//! head that must arrive within a deadline, and a graceful stop.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agentenkit_api::AppState;
use anyhow::Context;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// How long a stopping API waits for open requests and streams to end.
pub const API_DRAIN: Duration = Duration::from_secs(25);

/// What bounds the API's connections.
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    /// Connections served at once; past it a new one waits in the listen
    /// backlog until one closes (each open stream holds one).
    pub max_connections: usize,
    /// A request's head must arrive within this, from the connection's
    /// start or the end of its previous request: a client that opens
    /// connections and sends nothing (or a byte a minute) cannot hold them.
    pub header_read_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
        }
    }
}

/// Serves the API on `listen` until `shutdown`, with the default limits;
/// returns the bound address (port 0 picks a free port) and the server's
/// task, which ends once open connections closed or [`API_DRAIN`] passed.
pub async fn serve_api(
    state: AppState,
    listen: SocketAddr,
    shutdown: CancellationToken,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    serve_api_with(state, listen, shutdown, ServerLimits::default()).await
}

/// [`serve_api`] with `limits`.
pub async fn serve_api_with(
    state: AppState,
    listen: SocketAddr,
    shutdown: CancellationToken,
    limits: ServerLimits,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr()?;
    // Streams end when the server is asked to stop, so that the graceful
    // shutdown (which waits for open connections) does not wait for ever.
    let mut state = state;
    state.shutdown = shutdown.clone();
    let app = agentenkit_api::router(state);
    let max = limits.max_connections.max(1);
    let open = Arc::new(Semaphore::new(max));
    let handle = tokio::spawn(async move {
        loop {
            let permit = tokio::select! {
                permit = open.clone().acquire_owned() => permit.expect("never closed"),
                () = shutdown.cancelled() => break,
            };
            let stream = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors, say: try again shortly.
                        tracing::warn!(error = %e, "could not accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = shutdown.cancelled() => break,
            };
            let service = TowerToHyperService::new(app.clone());
            let stopping = shutdown.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let mut builder = Builder::new(TokioExecutor::new());
                builder
                    .http1()
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.header_read_timeout);
                let connection =
                    builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                tokio::pin!(connection);
                tokio::select! {
                    served = connection.as_mut() => {
                        if let Err(e) = served {
                            tracing::debug!(error = %e, "connection ended");
                        }
                        return;
                    }
                    () = stopping.cancelled() => connection.as_mut().graceful_shutdown(),
                }
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "connection ended");
                }
            });
        }
        drop(listener);
        // Every connection holds a permit: all of them back means all closed.
        // Streams end on shutdown when polled; a client that stopped reading
        // is not polled, so the drain has a deadline.
        let drained = tokio::time::timeout(API_DRAIN, open.acquire_many(max as u32)).await;
        if drained.is_err() {
            tracing::warn!(after = ?API_DRAIN, "open connections did not close; API stopped");
        }
    });
    Ok((addr, handle))
}
