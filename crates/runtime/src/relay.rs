//! The outbox relay: publishes what a commit wrote to the outbox, then
//! deletes the rows. A failed publish leaves the row for the reaper, so a
//! message is never lost, only (rarely) delivered twice; consumers dedupe.

use std::sync::Arc;
use std::time::Duration;

use agentenkit_queue::QueueAdapter;
use agentenkit_store::{OutboxRow, Store};

use crate::metrics;

#[derive(Clone)]
pub struct Relay {
    store: Store,
    queue: Arc<dyn QueueAdapter>,
}

impl Relay {
    pub fn new(store: Store, queue: Arc<dyn QueueAdapter>) -> Self {
        Self { store, queue }
    }

    /// Publishes `rows` and deletes those that were published. Never fails:
    /// what could not be published stays in the outbox for the reaper.
    pub async fn publish(&self, rows: &[OutboxRow]) {
        let mut published = Vec::with_capacity(rows.len());
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
                Ok(()) => published.push(row.id),
                Err(e) => {
                    ::metrics::counter!(metrics::OUTBOX_PUBLISH_FAILURES).increment(1);
                    tracing::warn!(outbox_id = row.id, error = %e, "publish failed; the reaper will retry");
                }
            }
        }
        if published.is_empty() {
            return;
        }
        ::metrics::counter!(metrics::OUTBOX_PUBLISHED).increment(published.len() as u64);
        if let Err(e) = self.store.delete_outbox(&published).await {
            // Published but not deleted: the reaper publishes it again later
            // and the consumer drops the duplicate.
            tracing::warn!(error = %e, "outbox rows published but not deleted");
        }
    }
}
