//! What each message is handled by, in the span that says so: a segment,
//! an expiry, a notification, a reminder, a check on a call's work. The span continues the trace of
//! whatever sent the message (its AMQP headers), when traces are exported.

use std::time::Duration;

use agentenkit_core::{QueueMessage, RunId, TraceContext};
use agentenkit_store::Expiry;
use tracing::field::Empty;

use super::{Disposition, Worker};
use crate::{metrics, trace};

/// The span a message is handled in, continuing `sent_by` (the span that
/// published it) when traces are exported.
pub(super) fn span_for(message: &QueueMessage, sent_by: Option<&TraceContext>) -> tracing::Span {
    let span = match message {
        QueueMessage::Segment { run_id, seq } => tracing::info_span!(
            "segment",
            run_id = %run_id,
            seq,
            thread_id = Empty,
            agent = Empty,
            agent_version = Empty,
            attempt = Empty,
            replayed_steps = Empty,
        ),
        QueueMessage::Expiry {
            run_id,
            tool_call_id,
        } => tracing::info_span!("expiry", run_id = %run_id, tool_call_id = %tool_call_id),
        QueueMessage::Notify { run_id, event_id } => {
            tracing::info_span!("notify", run_id = %run_id, event_id)
        }
        QueueMessage::Remind {
            run_id,
            tool_call_id,
        } => tracing::info_span!("remind", run_id = %run_id, tool_call_id = %tool_call_id),
        QueueMessage::Poll {
            run_id,
            tool_call_id,
            attempt,
        } => tracing::info_span!(
            "poll",
            run_id = %run_id,
            tool_call_id = %tool_call_id,
            attempt
        ),
    };
    trace::continue_from(&span, sent_by);
    span
}

impl Worker {
    /// Handles `message` (inside its span).
    pub(super) async fn handle(&self, message: QueueMessage) -> Disposition {
        match message {
            QueueMessage::Segment { run_id, seq } => self.segment(run_id, seq).await,
            QueueMessage::Expiry {
                run_id,
                tool_call_id,
            } => self.expiry(run_id, tool_call_id).await,
            QueueMessage::Notify { run_id, event_id } => {
                let handled = self.notifier().notify(run_id, event_id).await;
                self.notified(handled)
            }
            QueueMessage::Remind {
                run_id,
                tool_call_id,
            } => {
                let handled = self.notifier().remind(run_id, &tool_call_id).await;
                self.notified(handled)
            }
            poll @ QueueMessage::Poll { .. } => self.poll(poll).await,
        }
    }

    /// An expiry message: expires the request if it is still open and due;
    /// an early delivery is re-scheduled for the remainder, never applied.
    pub(super) async fn expiry(
        &self,
        run_id: RunId,
        call: agentenkit_core::ToolCallId,
    ) -> Disposition {
        match self.inner.store().expire(run_id, &call).await {
            Ok(Expiry::Expired {
                late_ms,
                waited_ms,
                trace,
                ..
            }) => {
                ::metrics::counter!(metrics::EXPIRIES).increment(1);
                ::metrics::histogram!(metrics::EXPIRY_LATENESS_SECONDS, "by" => "worker")
                    .record(late_ms as f64 / 1000.0);
                let waited = Duration::from_millis(waited_ms);
                trace::wait_ended(trace.as_ref(), call.as_str(), waited, "expired", None);
                tracing::info!("request expired");
                Disposition::Ack
            }
            Ok(Expiry::NotDue { remaining_ms, .. }) => {
                ::metrics::counter!(metrics::EXPIRIES_RESCHEDULED).increment(1);
                tracing::info!(remaining_ms, "expiry arrived early; re-scheduled");
                Disposition::Ack
            }
            Ok(Expiry::Gone) => Disposition::Ack,
            Err(e) => {
                tracing::warn!(error = %e, "expiry failed; handed back");
                Disposition::Requeue
            }
        }
    }
}
