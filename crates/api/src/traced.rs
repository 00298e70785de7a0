//! The span of each request, when traces are exported: a server span that
//! continues the caller's W3C `traceparent` (or starts a trace), so that
//! what the request commits (a run started, an answer) carries it on
//! through the outbox to the workers.
//!
//! Nothing a request carries is copied into a span unbounded: the span is
//! named by its method and matched route (both from short, fixed sets),
//! `http.request.method` is one of HTTP's own methods (or `_OTHER`, as the
//! OpenTelemetry HTTP conventions say), and `url.path` is clipped. The
//! exporter queues thousands of spans, so a few hundred kilobytes per span
//! were gigabytes. A method no route takes is refused before anything runs
//! (`refuse_unknown_method`, the outermost layer).

use agentenkit_core::TraceContext;
use agentenkit_runtime::trace;
use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use crate::ApiError;

/// The most of a request's path a span keeps (`url.path`).
pub const MAX_SPAN_PATH_BYTES: usize = 256;

/// HTTP's own methods (RFC 9110 and RFC 5789), the set the OpenTelemetry
/// conventions record by name: any other is an extension method, which no
/// route of this API takes.
const KNOWN_METHODS: [Method; 9] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
    Method::OPTIONS,
    Method::TRACE,
    Method::CONNECT,
];

/// `method` as `http.request.method` records it: its name when it is one
/// of HTTP's own, else `_OTHER` (its text is the client's, of any length).
pub fn method_attribute(method: &Method) -> &'static str {
    KNOWN_METHODS
        .iter()
        .find(|known| *known == method)
        .map_or("_OTHER", Method::as_str)
}

/// Middleware, the outermost: a request whose method is none of HTTP's own
/// is answered 405 at once. Its method (hyper takes hundreds of kilobytes
/// of one) reaches no span, log, handler or error message.
pub async fn refuse_unknown_method(request: Request, next: Next) -> Response {
    if method_attribute(request.method()) == "_OTHER" {
        return ApiError::MethodNotAllowed(format!(
            "this API takes only {}",
            KNOWN_METHODS.map(|m| m.as_str().to_owned()).join(", ")
        ))
        .into_response();
    }
    next.run(request).await
}

/// Middleware: a `server` span around the request (installed only when
/// traces are exported).
pub async fn span_of_request(request: Request, next: Next) -> Response {
    let method = method_attribute(request.method());
    // The route (`/threads/{id}/messages`), which the router has matched
    // by the time a `Router::layer` middleware runs; a path that matched
    // none is named by its method alone (paths carry ids).
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned());
    let name = span_name(method, route.as_deref());
    let span = tracing::info_span!(
        "request",
        otel.name = %name,
        otel.kind = "server",
        http.request.method = method,
        http.route = route,
        url.path = clip(request.uri().path(), MAX_SPAN_PATH_BYTES),
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

/// `{method} {route}`, `{method}` without a route, and `HTTP` for a method
/// recorded as `_OTHER` (the conventions' names for a server span).
fn span_name(method: &'static str, route: Option<&str>) -> String {
    match (method, route) {
        ("_OTHER", _) => "HTTP".to_owned(),
        (method, Some(route)) => format!("{method} {route}"),
        (method, None) => method.to_owned(),
    }
}

/// At most `max` bytes of `text`, cut at a character's boundary.
fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The caller's span, from its `traceparent` and `tracestate` headers; a
/// malformed one is ignored (the request starts a trace of its own).
pub fn caller_context(request: &Request) -> Option<TraceContext> {
    let header = |name: &str| request.headers().get(name)?.to_str().ok();
    TraceContext::from_headers(header("traceparent")?, header("tracestate")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn http_methods_are_recorded_by_name_and_any_other_as_other() {
        for method in KNOWN_METHODS {
            assert_eq!(method_attribute(&method), method.as_str());
        }
        for other in ["PROPFIND", "get", "X".repeat(10_000).as_str()] {
            let method = Method::from_bytes(other.as_bytes()).unwrap();
            assert_eq!(method_attribute(&method), "_OTHER", "{other:.20}");
        }
    }

    #[test]
    fn spans_are_named_by_method_and_route() {
        assert_eq!(
            span_name("POST", Some("/threads/{id}/messages")),
            "POST /threads/{id}/messages"
        );
        assert_eq!(span_name("GET", None), "GET");
        assert_eq!(span_name("_OTHER", Some("/threads")), "HTTP");
    }

    proptest! {
        #[test]
        fn a_clipped_path_is_a_prefix_within_the_bound(path in "\\PC{0,400}", max in 0usize..300) {
            let clipped = clip(&path, max);
            prop_assert!(clipped.len() <= max);
            prop_assert!(path.starts_with(clipped));
            // Nothing is cut that fitted.
            if path.len() <= max {
                prop_assert_eq!(clipped, path.as_str());
            } else {
                prop_assert!(clipped.len() + 4 > max);
            }
        }
    }
}
