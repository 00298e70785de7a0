//! The API's HTTP server: at most so many connections at once, a first
//! request that must arrive within a deadline on every connection, HTTP/2
//! only when asked for, and a graceful stop.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// connections and sends nothing (or a byte a minute, or the start of
    /// the HTTP/2 preface) cannot hold them.
    pub header_read_timeout: Duration,
    /// Whether HTTP/2 (prior knowledge, `h2c`) is served beside HTTP/1.1;
    /// off unless `AGENTENKIT_HTTP2=true`. When on, an HTTP/2 connection is
    /// pinged every [`HTTP2_KEEP_ALIVE`] and closed when a ping goes
    /// unanswered for as long, and carries at most
    /// [`HTTP2_MAX_STREAMS`] requests at once.
    pub http2: bool,
}

/// How often an idle HTTP/2 connection is pinged, and how long an answer
/// may take before the connection is closed.
pub const HTTP2_KEEP_ALIVE: Duration = Duration::from_secs(20);

/// Requests (streams) one HTTP/2 connection carries at once.
pub const HTTP2_MAX_STREAMS: u32 = 64;

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            http2: false,
        }
    }
}

impl ServerLimits {
    /// The defaults, with HTTP/2 on when `AGENTENKIT_HTTP2` says `true`
    /// (or `1`); any other value than those and `false`/`0` is an error.
    pub fn from_env() -> anyhow::Result<ServerLimits> {
        let http2 = match std::env::var("AGENTENKIT_HTTP2").ok().as_deref() {
            None | Some("") | Some("false") | Some("0") => false,
            Some("true") | Some("1") => true,
            Some(other) => anyhow::bail!(
                "AGENTENKIT_HTTP2 must be true or false, not {:?}",
                other.chars().take(40).collect::<String>()
            ),
        };
        Ok(ServerLimits {
            http2,
            ..ServerLimits::default()
        })
    }
}

/// Serves the API on `listen` until `shutdown`, with the default limits
/// (HTTP/2 as `AGENTENKIT_HTTP2` says);
/// returns the bound address (port 0 picks a free port) and the server's
/// task, which ends once open connections closed or [`API_DRAIN`] passed.
pub async fn serve_api(
    state: AppState,
    listen: SocketAddr,
    shutdown: CancellationToken,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    serve_api_with(state, listen, shutdown, ServerLimits::from_env()?).await
}

/// [`serve_api`] with `limits`.
pub async fn serve_api_with(
    state: AppState,
    listen: SocketAddr,
    shutdown: CancellationToken,
    limits: ServerLimits,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    // Workers with another agent file may serve the runs this API starts:
    // until its versions are recorded, it is not ready.
    let mut state = state;
    state.versions_recorded = state
        .registry()
        .record_versions_until_done(&state.store)
        .await;
    // New turns start on what the agent file's MCP servers list now.
    state.deployment().watch_servers(shutdown.child_token());
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr()?;
    // Streams end when the server is asked to stop, so that the graceful
    // shutdown (which waits for open connections) does not wait for ever.
    state.shutdown = shutdown.clone();
    let sends_here = state.sends_here.clone();
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
            tokio::spawn(serve_connection(
                stream,
                app.clone(),
                limits,
                shutdown.clone(),
                permit,
            ));
        }
        drop(listener);
        // Every connection holds a permit: all of them back means all closed.
        // Streams end on shutdown when polled; a client that stopped reading
        // is not polled, so the drain has a deadline.
        let drained = tokio::time::timeout(API_DRAIN, open.acquire_many(max as u32)).await;
        if drained.is_err() {
            tracing::warn!(after = ?API_DRAIN, "open connections did not close; API stopped");
        }
        if let Some(sends) = &sends_here {
            sends.drain(API_DRAIN).await;
        }
    });
    Ok((addr, handle))
}

/// Serves one connection until it ends or the server stops. Until its
/// first request reaches the router the connection lives at most
/// `header_read_timeout`: hyper's own head timeout starts only once the
/// protocol is known, and an HTTP/2 connection has none.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    app: axum::Router,
    limits: ServerLimits,
    stopping: CancellationToken,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let _permit = permit;
    let asked = Arc::new(AtomicBool::new(false));
    let seen = asked.clone();
    let service = TowerToHyperService::new(tower::ServiceExt::map_request(
        app,
        move |request: axum::extract::Request<hyper::body::Incoming>| {
            seen.store(true, Ordering::Relaxed);
            request
        },
    ));
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    if limits.http2 {
        builder
            .http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(HTTP2_KEEP_ALIVE)
            .keep_alive_timeout(HTTP2_KEEP_ALIVE)
            .max_concurrent_streams(HTTP2_MAX_STREAMS);
    } else {
        builder = builder.http1_only();
    }
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let first_request_due = tokio::time::sleep(limits.header_read_timeout);
    tokio::pin!(first_request_due);
    let mut waiting_for_first = true;
    loop {
        tokio::select! {
            served = connection.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!(error = %e, "connection ended");
                }
                return;
            }
            () = &mut first_request_due, if waiting_for_first => {
                if !asked.load(Ordering::Relaxed) {
                    tracing::debug!("no request within the head timeout; connection closed");
                    return;
                }
                waiting_for_first = false;
            }
            () = stopping.cancelled() => break,
        }
    }
    connection.as_mut().graceful_shutdown();
    if let Err(e) = connection.await {
        tracing::debug!(error = %e, "connection ended");
    }
}
