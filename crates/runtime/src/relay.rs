//! The outbox relay: publishes what a commit wrote to the outbox. The rows
//! stay until the messages' handlers delete them (in the transactions they
//! commit anyway), so a publish costs no transaction. A publish that fails
//! (the broker is down, or blocks publishers) is kept and retried by the
//! relay itself, with backoff, as soon as the broker answers again; the row
//! also stays for the reaper, so a message is never lost even if this
//! process dies, only (rarely) delivered twice; consumers dedupe.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use agentenkit_core::TraceContext;
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
    rows: Mutex<Vec<Kept>>,
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
        let trace = crate::trace::current();
        let rows: Vec<_> = rows
            .iter()
            .map(|row| (row, row.trace.as_ref().or(trace.as_ref())))
            .collect();
        let failed = self.publish_now(&rows).await;
        if !failed.is_empty() {
            self.retry_later(failed);
        }
    }

    /// Publishes each row once; returns those that failed, with their
    /// contexts.
    async fn publish_now(
        &self,
        rows: &[(&OutboxRow, Option<&TraceContext>)],
    ) -> Vec<(OutboxRow, Option<TraceContext>)> {
        let mut published = 0u64;
        let mut failed = Vec::new();
        for &(row, trace) in rows {
            // Past the ladder's reach a message arrives early, and an early
            // expiry re-schedules itself for the remainder.
            let delay = row.delay_ms.min(agentenkit_queue::ladder::MAX_DELAY_MS);
            let send = self
                .queue
                .publish_traced(&row.message, Duration::from_millis(delay), trace);
            match tokio::time::timeout(self.timeout, send).await {
                Ok(Ok(())) => published += 1,
                Err(_) => {
                    ::metrics::counter!(metrics::OUTBOX_PUBLISH_FAILURES).increment(1);
                    tracing::warn!(
                        outbox_id = row.id,
                        timeout_ms = self.timeout.as_millis() as u64,
                        "publish timed out; retrying in the background"
                    );
                    failed.push((row.clone(), trace.cloned()));
                }
                Ok(Err(e)) => {
                    ::metrics::counter!(metrics::OUTBOX_PUBLISH_FAILURES).increment(1);
                    tracing::warn!(outbox_id = row.id, error = %e, "publish failed; retrying in the background");
                    failed.push((row.clone(), trace.cloned()));
                }
            }
        }
        ::metrics::counter!(metrics::OUTBOX_PUBLISHED).increment(published);
        failed
    }

    /// Keeps `rows` for the retry task, starting it if none runs.
    fn retry_later(&self, rows: Vec<(OutboxRow, Option<TraceContext>)>) {
        {
            let mut kept = lock(&self.retrying.rows);
            let now = Instant::now();
            keep(
                &mut kept,
                rows.into_iter().map(|(row, trace)| (row, now, trace)),
            );
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
            let rows: Vec<(OutboxRow, Option<TraceContext>)> = kept
                .into_iter()
                .map(|(mut row, kept_at, trace)| {
                    let spent = u64::try_from(kept_at.elapsed().as_millis()).unwrap_or(u64::MAX);
                    row.delay_ms = row.delay_ms.saturating_sub(spent);
                    (row, trace)
                })
                .collect();
            let failed = if rows.is_empty() {
                Vec::new()
            } else {
                let rows: Vec<_> = rows
                    .iter()
                    .map(|(row, trace)| (row, trace.as_ref()))
                    .collect();
                self.publish_now(&rows).await
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
                failed
                    .into_iter()
                    .map(|(row, trace)| (row, now, trace))
                    .chain(added),
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

/// A row kept for a retry: when it was kept, and the context it carries.
type Kept = (OutboxRow, Instant, Option<TraceContext>);

/// Adds `rows` to `kept`, each outbox row once (the reaper may hand one
/// over again), and keeps at most `MAX_RETRYING`: the oldest go (the reaper
/// still has them in the outbox).
fn keep(kept: &mut Vec<Kept>, rows: impl IntoIterator<Item = Kept>) {
    for kept_row in rows {
        if !kept.iter().any(|(k, _, _)| k.id == kept_row.0.id) {
            kept.push(kept_row);
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
        async fn publish(&self, message: &QueueMessage) -> agentenkit_queue::Result<()> {
            self.down()?;
            self.inner.publish(message).await
        }
        async fn publish_delayed(
            &self,
            message: &QueueMessage,
            delay: Duration,
        ) -> agentenkit_queue::Result<()> {
            self.down()?;
            self.delays.lock().unwrap().push(delay);
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
