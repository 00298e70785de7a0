//! The OTLP side of tests/traces.rs: a receiver that decodes what the
//! processes export, and a drawing of one trace.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message as _;

/// One exported span, as the receiver decoded it.
#[derive(Debug, Clone)]
pub struct Span {
    pub service: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent: String,
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attributes: HashMap<String, String>,
    pub links: Vec<String>,
}

impl Span {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    pub fn seconds(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 / 1e9
    }
}

fn text(value: &KeyValue) -> String {
    match value.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(n)) => n.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An OTLP/HTTP receiver (`POST /v1/traces`, protobuf) keeping every span.
#[derive(Clone, Default)]
pub struct Receiver {
    pub spans: Arc<Mutex<Vec<Span>>>,
    pub requests: Arc<Mutex<usize>>,
}

impl Receiver {
    pub async fn serve(self, listener: tokio::net::TcpListener) {
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let me = self.clone();
                async move {
                    me.take(&body);
                    axum::http::StatusCode::OK
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    }

    fn take(&self, body: &[u8]) {
        *self.requests.lock().unwrap() += 1;
        let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
        let mut spans = self.spans.lock().unwrap();
        for resource in request.resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .map(text)
                .unwrap_or_default();
            for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                spans.push(Span {
                    service: service.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                    name: span.name,
                    start_ns: span.start_time_unix_nano,
                    end_ns: span.end_time_unix_nano,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(kv)))
                        .collect(),
                    links: span.links.iter().map(|l| hex(&l.span_id)).collect(),
                });
            }
        }
    }

    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }
}

/// The trace as a tree: each span under its parent, with its process, its
/// start after the trace's first span and its length, in milliseconds.
pub fn waterfall(spans: &[&Span]) -> String {
    let ids: HashSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let zero = spans.iter().map(|s| s.start_ns).min().unwrap_or(0);
    let mut out = String::new();
    let mut stack: Vec<(&str, usize)> = spans
        .iter()
        .filter(|s| !ids.contains(s.parent.as_str()))
        .map(|s| (s.span_id.as_str(), 0))
        .collect();
    stack.sort_by_key(|(id, _)| {
        std::cmp::Reverse(spans.iter().find(|s| s.span_id == *id).map(|s| s.start_ns))
    });
    while let Some((id, depth)) = stack.pop() {
        let Some(span) = spans.iter().find(|s| s.span_id == id) else {
            continue;
        };
        let said = ["agent", "tool_call_id", "outcome", "answer.outcome", "ends"];
        let label: String = said
            .iter()
            .filter_map(|key| span.attr(key))
            .map(|value| format!(" {value}"))
            .collect();
        out.push_str(&format!(
            "{:>7.0} {:>7.0}  {:<18} {}{}{}\n",
            (span.start_ns - zero) as f64 / 1e6,
            span.seconds() * 1e3,
            span.service,
            "  ".repeat(depth),
            span.name,
            label
        ));
        let mut children: Vec<&Span> = spans.iter().filter(|s| s.parent == id).copied().collect();
        children.sort_by_key(|s| std::cmp::Reverse(s.start_ns));
        stack.extend(
            children
                .into_iter()
                .map(|s| (s.span_id.as_str(), depth + 1)),
        );
    }
    out
}
