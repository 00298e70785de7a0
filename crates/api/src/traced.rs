//! The span of each request, when traces are exported: a server span that
//! continues the caller's W3C `traceparent` (or starts a trace), so that
//! what the request commits (a run started, an answer) carries it on
//! through the outbox to the workers.

use agentenkit_core::TraceContext;
use agentenkit_runtime::trace;
use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

/// Middleware: a `server` span around the request (installed only when
/// traces are exported).
pub async fn span_of_request(request: Request, next: Next) -> Response {
    let method = request.method().as_str().to_owned();
    // The route (`/threads/{id}/messages`), which the router has matched
    // by the time a `Router::layer` middleware runs; a path that matched
    // none is named by its method alone (paths carry ids).
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned());
    let name = match &route {
        Some(route) => format!("{method} {route}"),
        None => method.clone(),
    };
    let span = tracing::info_span!(
        "request",
        otel.name = %name,
        otel.kind = "server",
        http.request.method = %method,
        http.route = route,
        url.path = %request.uri().path(),
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    trace::continue_from(&span, caller_context(&request).as_ref());
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    response
}

/// The caller's span, from its `traceparent` and `tracestate` headers; a
/// malformed one is ignored (the request starts a trace of its own).
pub fn caller_context(request: &Request) -> Option<TraceContext> {
    let header = |name: &str| request.headers().get(name)?.to_str().ok();
    TraceContext::from_headers(header("traceparent")?, header("tracestate")).ok()
}
