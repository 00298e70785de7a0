//! The outbox relay: publishes what a commit wrote to the outbox. The rows
//! stay until the messages' handlers delete them (in the transactions they
//! commit anyway), so a publish costs no transaction; a failed or lost
//! publish leaves the row for the reaper, so a message is never lost, only
//! (rarely) delivered twice; consumers dedupe.

use std::sync::Arc;
use std::time::Duration;

use agentenkit_queue::QueueAdapter;
use agentenkit_store::OutboxRow;

use crate::metrics;

#[derive(Clone)]
pub struct Relay {
    queue: Arc<dyn QueueAdapter>,
}

impl Relay {
    pub fn new(queue: Arc<dyn QueueAdapter>) -> Self {
        Self { queue }
    }

    /// Publishes `rows`. Never fails: what could not be published stays in
    /// the outbox for the reaper.
    pub async fn publish(&self, rows: &[OutboxRow]) {
        let mut published = 0u64;
        for row in rows {
            let sent = if row.delay_ms == 0 {
                self.queue.publish(&row.message).await
            } else {
                // Past the ladder's reach a message arrives early, and an
                // early expiry re-schedules itself for the remainder.
                let delay = row.delay_ms.min(agentenkit_queue::ladder::MAX_DELAY_MS);
                self.queue
                    .publish_delayed(&row.message, Duration::from_millis(delay))
                    .await
            };
            match sent {
                Ok(()) => published += 1,
                Err(e) => {
                    ::metrics::counter!(metrics::OUTBOX_PUBLISH_FAILURES).increment(1);
                    tracing::warn!(outbox_id = row.id, error = %e, "publish failed; the reaper will retry");
                }
            }
        }
        ::metrics::counter!(metrics::OUTBOX_PUBLISHED).increment(published);
    }
}
