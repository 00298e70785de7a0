//! The worker's side of notification messages: forwarded from the
//! segments' queue, and what their handling means for the delivery.

use agentenkit_core::{QueueMessage, TraceContext};

use super::{Disposition, Worker};

impl Worker {
    /// Sends `message` on to its own queue, with the trace it came with;
    /// handed back when the broker does not take it (the copy sent and this
    /// one acked is at most a duplicate, which its handler drops).
    pub(super) async fn forward(
        &self,
        message: &QueueMessage,
        trace: Option<&TraceContext>,
    ) -> Disposition {
        let now = std::time::Duration::ZERO;
        match self.inner.queue().publish_traced(message, now, trace).await {
            Ok(()) => Disposition::Ack,
            Err(e) => {
                tracing::warn!(error = %e, "could not forward a notification to its queue; handed back");
                Disposition::Requeue
            }
        }
    }

    /// What a notification's handling means for its message. A store that
    /// failed hands it back; a target that failed does not (its retry is
    /// in the outbox, see `notify`).
    pub(super) fn notified(
        &self,
        handled: agentenkit_store::Result<crate::notify::Handled>,
    ) -> Disposition {
        match handled {
            Ok(crate::notify::Handled::Crashed) => Disposition::Crashed,
            Ok(_) => Disposition::Ack,
            Err(e) => {
                tracing::warn!(error = %e, "notification failed in the store; handed back");
                Disposition::Requeue
            }
        }
    }
}
