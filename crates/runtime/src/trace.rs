//! OpenTelemetry traces across processes: the W3C context of a span, taken
//! from the current `tracing` span to go with what this process sends (an
//! outbox message's AMQP headers, a run row), and given back as the parent
//! of the span that handles it in another process.
//!
//! Nothing here exports: a binary installs the OpenTelemetry layer and the
//! exporter (`agentenkit::telemetry`) and then calls [`set_exporting`].
//! Until it does, every function here is a load of one flag: a deployment
//! that exports no traces pays nothing on its hot path.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use agentenkit_core::TraceContext;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue};
use tracing_opentelemetry::OpenTelemetrySpanExt;

static EXPORTING: AtomicBool = AtomicBool::new(false);

/// The name spans made here (not through `tracing`) are recorded under.
pub const TRACER: &str = "agentenkit";

/// Says that an OpenTelemetry layer is installed and exports: from now on
/// contexts are read from spans and carried.
pub fn set_exporting(on: bool) {
    EXPORTING.store(on, Ordering::Relaxed);
}

/// Whether this process exports traces.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The context of the current span, to carry to whatever handles what this
/// span sends; `None` when not exporting or outside any sampled trace.
pub fn current() -> Option<TraceContext> {
    if !exporting() {
        return None;
    }
    of(&tracing::Span::current())
}

/// The context of `span` (see [`current`]).
pub fn of(span: &tracing::Span) -> Option<TraceContext> {
    if !exporting() {
        return None;
    }
    let context = span.context();
    let span = context.span();
    to_headers(span.span_context())
}

/// Makes `parent` (a context another process sent) the parent of `span`,
/// which must not have been entered yet. No-op when not exporting.
pub fn continue_from(span: &tracing::Span, parent: Option<&TraceContext>) {
    if !exporting() {
        return;
    }
    if let Some(parent) = parent.and_then(from_headers) {
        let _ = span.set_parent(Context::new().with_remote_span_context(parent));
    }
}

/// Links `span` to `other` (a context it follows from but is not the child
/// of: the request that answered a run in the run's own trace).
pub fn link(span: &tracing::Span, other: Option<&TraceContext>) {
    if !exporting() {
        return;
    }
    if let Some(other) = other.and_then(from_headers) {
        span.add_link(other);
    }
}

/// Records a span that began before this process knew of it (a person's
/// wait, from the park to the answer): child of `parent` (or of the current
/// span), from `start` to now, with `attributes`. No-op when not exporting.
pub fn record_past_span(
    name: &'static str,
    parent: Option<&TraceContext>,
    start: SystemTime,
    attributes: Vec<KeyValue>,
) {
    if !exporting() {
        return;
    }
    let parent = match parent.and_then(from_headers) {
        Some(remote) => Context::new().with_remote_span_context(remote),
        None => tracing::Span::current().context(),
    };
    let tracer = opentelemetry::global::tracer(TRACER);
    let mut span = tracer
        .span_builder(name)
        .with_kind(SpanKind::Internal)
        .with_start_time(start)
        .with_attributes(attributes)
        .start_with_context(&tracer, &parent);
    opentelemetry::trace::Span::end(&mut span);
}

/// The root span of a turn started in this process (`agentenkit chat`),
/// as the API's request span is for a turn started over HTTP; `Span::none()`
/// when not exporting.
pub fn turn_span(thread: agentenkit_core::ThreadId) -> tracing::Span {
    if !exporting() {
        return tracing::Span::none();
    }
    tracing::info_span!("turn", thread_id = %thread)
}

/// How a person's wait ended, as the wait span says (`answer.outcome`).
pub fn outcome_of(verdict: &agentenkit_core::reply::Verdict) -> &'static str {
    use agentenkit_core::reply::Verdict;
    match verdict {
        Verdict::Approve {
            arguments: Some(_), ..
        } => "edited",
        Verdict::Approve { .. } => "approved",
        Verdict::Reject { .. } => "denied",
        Verdict::Answer { .. } => "answered",
        Verdict::Skip => "skipped",
    }
}

/// The span an answer is written in: in the run's trace (`run`, the
/// context the run started under), linked to the request that brought it
/// (the current span), so that the resume it publishes continues the run's
/// trace. Without `run` it is a child of the request. `Span::none()` when
/// not exporting.
pub fn answer_span(run: Option<&TraceContext>, call: &str, outcome: &'static str) -> tracing::Span {
    if !exporting() {
        return tracing::Span::none();
    }
    let request = current();
    let span = tracing::info_span!("answer", tool_call_id = %call, answer.outcome = outcome);
    if run.is_some() {
        continue_from(&span, run);
        link(&span, request.as_ref());
    }
    span
}

/// Records the wait an answer ended, `answered` being what its write
/// said: none when it was not delivered, or when it was a vote that leaves
/// the call waiting for more. `by` (who answered) is asked for only when
/// traces are exported.
pub fn answer_ended_wait(
    run: Option<&TraceContext>,
    call: &str,
    answered: &agentenkit_store::Answered,
    outcome: &'static str,
    by: impl FnOnce() -> String,
) {
    if !exporting() {
        return;
    }
    if let (Some(waited), None) = (answered.waited, answered.approvals) {
        wait_ended(run, call, waited, outcome, Some(&by()));
    }
}

/// Records a person's wait that just ended: a span in the run's trace
/// (`run`; else under the current span) from the park, `waited` ago, to
/// now, saying how it ended and, for an answer, whose it was.
pub fn wait_ended(
    run: Option<&TraceContext>,
    call: &str,
    waited: std::time::Duration,
    outcome: &'static str,
    answered_by: Option<&str>,
) {
    if !exporting() {
        return;
    }
    let mut attributes = vec![
        KeyValue::new("tool_call_id", call.to_owned()),
        KeyValue::new("answer.outcome", outcome),
    ];
    if let Some(by) = answered_by {
        attributes.push(KeyValue::new("answer.by", by.to_owned()));
    }
    let start = SystemTime::now()
        .checked_sub(waited)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    record_past_span("wait", run, start, attributes);
}

fn to_headers(span: &SpanContext) -> Option<TraceContext> {
    if !span.is_valid() {
        return None;
    }
    let traceparent = format!(
        "00-{}-{}-{:02x}",
        span.trace_id(),
        span.span_id(),
        span.trace_flags().to_u8()
    );
    let state = span.trace_state().header();
    TraceContext::from_headers(&traceparent, Some(&state)).ok()
}

fn from_headers(context: &TraceContext) -> Option<SpanContext> {
    let trace_id = TraceId::from_hex(context.trace_id()).ok()?;
    let span_id = SpanId::from_hex(context.span_id()).ok()?;
    let flags = match context.sampled() {
        true => TraceFlags::SAMPLED,
        false => TraceFlags::default(),
    };
    let state = context
        .tracestate
        .as_deref()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    Some(SpanContext::new(trace_id, span_id, flags, true, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_survives_the_round_trip_through_its_headers() {
        let given = TraceContext::from_headers(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"),
        )
        .unwrap();
        let span = from_headers(&given).unwrap();
        assert!(span.is_remote() && span.is_sampled());
        assert_eq!(to_headers(&span), Some(given));
    }

    #[test]
    fn nothing_is_read_or_carried_while_not_exporting() {
        assert!(!exporting());
        let span = tracing::info_span!("not exported");
        assert_eq!(of(&span), None);
        assert_eq!(current(), None);
    }
}
