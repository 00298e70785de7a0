//! The outbox relay: publishes what a commit wrote to the outbox. The rows
//! stay until the messages' handlers delete them (in the transactions they
//! commit anyway), so a publish costs no transaction. A publish that fails
//! (the broker is down, or blocks publishers) is kept and retried by the
//! relay itself, with backoff, as soon as the broker answers again; the row
//! also stays for the reaper, so a message is never lost even if this
//! process dies, only (rarely) delivered twice; consumers dedupe.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use agentenkit_queue::QueueAdapter;
use agentenkit_store::{OutboxRow, Publisher, Store};

use crate::metrics;

/// How long one publish may take (the broker's confirm included) before
/// the relay gives up on it for now. A broker that blocks publishers (a
/// memory or disk alarm) must not hang an HTTP answer whose transaction has
/// committed.
pub const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// Failed publishes a relay keeps for its own retries; past this the oldest
/// are left to the reaper alone (their rows are in the outbox).
const MAX_RETRYING: usize = 10_000;
/// First and longest wait between retries.
const RETRY_MIN: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Relay {
    queue: Arc<dyn QueueAdapter>,
    timeout: Duration,
    retrying: Arc<Retrying>,
}

#[derive(Default)]
struct Retrying {
    /// Rows to publish again, each with when it was kept (a delayed
    /// message is sent again with what is left of its delay).
    rows: Mutex<Vec<(OutboxRow, Instant)>>,
    /// A retry task runs (at most one per relay and its clones).
    running: Mutex<bool>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain data: a panic elsewhere cannot leave it half updated.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Relay {
    pub fn new(queue: Arc<dyn QueueAdapter>) -> Self {
        Self {
            queue,
            timeout: PUBLISH_TIMEOUT,
            retrying: Arc::default(),
        }
    }

    /// The queue it publishes to.
    pub fn queue(&self) -> Arc<dyn QueueAdapter> {
        self.queue.clone()
    }

    /// The same relay with another publish timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// `store`, handing what its transactions write to the outbox to this
    /// relay once they commit.
    pub fn attach(&self, store: Store) -> Store {
        store.with_publisher(Arc::new(self.clone()))
    }

    /// Publishes `rows`, each carrying the context of the current span (the
    /// one that committed them) when traces are exported. Never fails: what
    /// could not be published is retried in the background, and stays in
    /// the outbox for the reaper.
    pub async fn publish(&self, rows: &[OutboxRow]) {
        let failed = self
            .publish_now(rows, crate::trace::current().as_ref())
            .await;
        if !failed.is_empty() {
            self.retry_later(failed);
        }
    }

    /// Publishes each row once, with its own trace or else `here`'s;
    /// returns those that failed, each holding the trace it went with.
    async fn publish_now(
        &self,
        rows: &[OutboxRow],
        here: Option<&agentenkit_core::TraceContext>,
    ) -> Vec<OutboxRow> {
        let mut published = 0u64;
        let mut failed = Vec::new();
        for row in rows {
            let trace = row.trace.as_ref().or(here);
            // Past the ladder's reach a message arrives early, and an early
            // expiry re-schedules itself for the remainder.
            let delay = row.delay_ms.min(agentenkit_queue::ladder::MAX_DELAY_MS);
            let send = self
                .queue
                .publish_traced(&row.message, Duration::from_millis(delay), trace);
            match tokio::time::timeout(self.timeout, send).await {
                Ok(Ok(())) => {
                    published += 1;
                    continue;
                }
                Err(_) => tracing::warn!(
                    outbox_id = row.id,
                    timeout_ms = self.timeout.as_millis() as u64,
                    "publish timed out; retrying in the background"
                ),
                Ok(Err(e)) => {
                    tracing::warn!(outbox_id = row.id, error = %e, "publish failed; retrying in the background")
                }
            }
            ::metrics::counter!(metrics::OUTBOX_PUBLISH_FAILURES).increment(1);
            failed.push(OutboxRow {
                trace: trace.cloned(),
                ..row.clone()
            });
        }
        ::metrics::counter!(metrics::OUTBOX_PUBLISHED).increment(published);
        failed
    }

    /// Keeps `rows` for the retry task, starting it if none runs.
    fn retry_later(&self, rows: Vec<OutboxRow>) {
        {
            let mut kept = lock(&self.retrying.rows);
            let now = Instant::now();
            keep(&mut kept, rows.into_iter().map(|row| (row, now)));
        }
        let mut running = lock(&self.retrying.running);
        if *running {
            return;
        }
        // Without a runtime (a sync caller at shutdown) the reaper retries.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        *running = true;
        let relay = self.clone();
        runtime.spawn(async move { relay.retry_until_empty().await });
    }

    /// Retries with a doubling wait until everything kept is published.
    async fn retry_until_empty(self) {
        let mut wait = RETRY_MIN;
        loop {
            tokio::time::sleep(wait).await;
            let kept = std::mem::take(&mut *lock(&self.retrying.rows));
            // A delayed message goes again with what is left of its delay:
            // an outage never makes it fire early, and late only by what
            // the outage cost.
            let rows: Vec<OutboxRow> = kept
                .into_iter()
                .map(|(mut row, kept_at)| {
                    let spent = u64::try_from(kept_at.elapsed().as_millis()).unwrap_or(u64::MAX);
                    row.delay_ms = row.delay_ms.saturating_sub(spent);
                    row
                })
                .collect();
            // Each kept row holds the trace it first went with.
            let failed = if rows.is_empty() {
                Vec::new()
            } else {
                self.publish_now(&rows, None).await
            };
            let published = rows.len() - failed.len();
            if published > 0 {
                tracing::info!(published, "outbox messages published after a retry");
            }
            let mut kept = lock(&self.retrying.rows);
            // Rows failed again go before any added meanwhile.
            let now = Instant::now();
            let added = std::mem::take(&mut *kept);
            keep(
                &mut kept,
                failed.into_iter().map(|row| (row, now)).chain(added),
            );
            if kept.is_empty() {
                // Under the rows' lock, so a row added now sees `running`
                // false and starts a new task.
                *lock(&self.retrying.running) = false;
                return;
            }
            wait = if published > 0 {
                RETRY_MIN
            } else {
                (wait * 2).min(RETRY_MAX)
            };
        }
    }

    /// Segment messages waiting in the broker, when the adapter can tell.
    pub async fn backlog(&self) -> Option<u64> {
        self.queue.backlog().await.ok().flatten()
    }

    /// Rows waiting for a retry (for tests and diagnostics).
    pub fn retrying(&self) -> usize {
        lock(&self.retrying.rows).len()
    }
}

#[async_trait::async_trait]
impl Publisher for Relay {
    async fn publish(&self, rows: &[OutboxRow]) {
        Relay::publish(self, rows).await
    }
}

/// Adds `rows` to `kept`, each outbox row once (the reaper may hand one
/// over again), and keeps at most `MAX_RETRYING`: the oldest go (the reaper
/// still has them in the outbox).
fn keep(
    kept: &mut Vec<(OutboxRow, Instant)>,
    rows: impl IntoIterator<Item = (OutboxRow, Instant)>,
) {
    for (row, at) in rows {
        if !kept.iter().any(|(k, _)| k.id == row.id) {
            kept.push((row, at));
        }
    }
    let excess = kept.len().saturating_sub(MAX_RETRYING);
    kept.drain(..excess);
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use agentenkit_core::{QueueMessage, RunId};
    use agentenkit_queue::memory::MemoryQueue;
    use agentenkit_queue::{Deliveries, Error as QueueError};
    use async_trait::async_trait;

    use super::*;

    /// The in-process queue, refusing its first `failures` publishes as a
    /// broker that is down would.
    struct Flaky {
        inner: MemoryQueue,
        failures: AtomicUsize,
        /// The delays of the delayed publishes that went through.
        delays: std::sync::Mutex<Vec<Duration>>,
    }

    impl Flaky {
        /// Refuses while failures are left to spend.
        fn down(&self) -> agentenkit_queue::Result<()> {
            match self
                .failures
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            {
                Ok(_) => Err(QueueError::Connection("the broker is down".into())),
                Err(_) => Ok(()),
            }
        }
    }

    #[async_trait]
    impl QueueAdapter for Flaky {
        async fn publish_traced(
            &self,
            message: &QueueMessage,
            delay: Duration,
            _trace: Option<&agentenkit_core::TraceContext>,
        ) -> agentenkit_queue::Result<()> {
            self.down()?;
            if !delay.is_zero() {
                self.delays.lock().unwrap().push(delay);
            }
            self.inner.publish(message).await
        }
        async fn consume(&self, prefetch: u16) -> agentenkit_queue::Result<Deliveries> {
            self.inner.consume(prefetch).await
        }
        async fn consume_notifications(
            &self,
            prefetch: u16,
        ) -> agentenkit_queue::Result<Deliveries> {
            self.inner.consume_notifications(prefetch).await
        }
        async fn ready(&self) -> agentenkit_queue::Result<()> {
            Ok(())
        }
    }

    fn row(id: i64) -> OutboxRow {
        OutboxRow {
            id,
            message: QueueMessage::Segment {
                run_id: RunId::new(),
                seq: 1,
            },
            delay_ms: 0,
            claimed: None,
            trace: None,
        }
    }

    #[tokio::test]
    async fn a_failed_publish_is_retried_until_the_broker_takes_it() {
        let inner = MemoryQueue::new();
        let queue = Arc::new(Flaky {
            inner: inner.clone(),
            failures: AtomicUsize::new(3),
            delays: Default::default(),
        });
        let relay = Relay::new(queue);
        relay.publish(&[row(1), row(2)]).await;
        assert_eq!(inner.len(), 0);
        assert_eq!(relay.retrying(), 2, "both kept for a retry");
        // The retries back off (250 ms, 500 ms, …) until the broker answers.
        wait_for(|| inner.len() == 2).await;
        assert_eq!(relay.retrying(), 0);
        // A later failure starts a new retry task.
        let flaky = Arc::new(Flaky {
            inner: inner.clone(),
            failures: AtomicUsize::new(1),
            delays: Default::default(),
        });
        let relay = Relay::new(flaky);
        relay.publish(&[row(3)]).await;
        wait_for(|| inner.len() == 3).await;
    }

    #[tokio::test]
    async fn a_row_is_kept_once_and_a_delayed_one_goes_again_with_what_is_left_of_its_delay() {
        let inner = MemoryQueue::new();
        let queue = Arc::new(Flaky {
            inner: inner.clone(),
            failures: AtomicUsize::new(3),
            delays: Default::default(),
        });
        let relay = Relay::new(queue.clone());
        let mut delayed = row(7);
        delayed.delay_ms = 60_000;
        relay.publish(std::slice::from_ref(&delayed)).await;
        // The same outbox row handed over again (a reaper claim) is kept once.
        relay.publish(std::slice::from_ref(&delayed)).await;
        assert_eq!(relay.retrying(), 1);
        wait_for(|| inner.len() == 1).await;
        let delays = queue.delays.lock().unwrap().clone();
        assert_eq!(delays.len(), 1);
        assert!(
            delays[0] < Duration::from_millis(60_000) && delays[0] > Duration::from_millis(55_000),
            "the remaining delay, not the whole: {delays:?}"
        );
    }

    async fn wait_for(done: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "not retried in time"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
