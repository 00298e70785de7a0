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

/// How long one publish may take (the broker's confirm included) before
/// the relay gives up on it and leaves the row to the reaper. A broker that
/// blocks publishers (a memory or disk alarm) must not hang an HTTP answer
/// whose transaction has committed.
pub const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Relay {
    queue: Arc<dyn QueueAdapter>,
    timeout: Duration,
}

impl Relay {
    pub fn new(queue: Arc<dyn QueueAdapter>) -> Self {
        Self {
            queue,
            timeout: PUBLISH_TIMEOUT,
        }
    }

    /// The same relay with another publish timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Publishes `rows`. Never fails: what could not be published stays in
    /// the outbox for the reaper.
    pub async fn publish(&self, rows: &[OutboxRow]) {
        let mut published = 0u64;
        for row in rows {
            let send = async {
                if row.delay_ms == 0 {
                    self.queue.publish(&row.message).await
                } else {
                    // Past the ladder's reach a message arrives early, and an
                    // early expiry re-schedules itself for the remainder.
                    let delay = row.delay_ms.min(agentenkit_queue::ladder::MAX_DELAY_MS);
                    self.queue
                        .publish_delayed(&row.message, Duration::from_millis(delay))
                        .await
                }
            };
            match tokio::time::timeout(self.timeout, send).await {
                Ok(Ok(())) => published += 1,
                Err(_) => {
                    ::metrics::counter!(metrics::OUTBOX_PUBLISH_FAILURES).increment(1);
                    tracing::warn!(
                        outbox_id = row.id,
                        timeout_ms = self.timeout.as_millis() as u64,
                        "publish timed out; the reaper will retry"
                    );
                }
                Ok(Err(e)) => {
                    ::metrics::counter!(metrics::OUTBOX_PUBLISH_FAILURES).increment(1);
                    tracing::warn!(outbox_id = row.id, error = %e, "publish failed; the reaper will retry");
                }
            }
        }
        ::metrics::counter!(metrics::OUTBOX_PUBLISHED).increment(published);
    }
}
