//! The worker: consumes segment messages, takes the run's lease, advances
//! the run, commits, then acks.
//!
//! A segment's error says what to do (exactly one `match` maps it, in
//! [`Worker::segment`]): a permanent error fails the run; a retryable one is
//! retried with backoff, then fails the run; a lost lease or a stale
//! delivery is dropped; a database outage hands the message back.

use std::sync::Arc;
use std::time::Duration;

use agentenkit_core::{EventType, QueueMessage, RunId, RunStatus, ToolCallId, ToolCallStatus};
use agentenkit_queue::{Delivery, QueueAdapter};
use agentenkit_store::{Change, Expiry, Lease, LeaseAttempt, RunContext, Store};
use serde_json::json;
use thiserror::Error;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::agent::Registry;
use crate::agent_loop::{run_turn, Checkpointer, CrashPoint, Outcome};

mod park;
use crate::metrics;
use crate::relay::Relay;

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// How long a lease lasts without a commit or heartbeat. A dead worker's
    /// run is picked up again after at most this long.
    pub lease_ttl: Duration,
    /// Failed attempts (model errors, unavailable tools) before the run fails.
    pub max_attempts: u32,
    /// The first retry waits this long; each next one twice as long.
    pub retry_backoff: Duration,
    /// Segments in flight at once.
    pub prefetch: u16,
    /// On shutdown, how long in-flight segments may take to finish.
    pub shutdown_grace: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(30),
            max_attempts: 3,
            retry_backoff: Duration::from_millis(500),
            prefetch: 16,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// What went wrong inside a segment, by what to do about it.
#[derive(Debug, Error)]
pub enum SegmentError {
    /// Fail the run: retrying cannot help (non-determinism, step limit).
    #[error("{0}")]
    Permanent(String),
    /// Retry the step after a delay (model error, unavailable tool).
    #[error("{0}")]
    Retry(String),
    /// Another worker holds the run now: stop, change nothing.
    #[error("lease lost")]
    LeaseLost,
    /// The store failed: hand the message back for later.
    #[error("store: {0}")]
    Store(agentenkit_store::Error),
    /// A test's crash point fired: behave as a dead process.
    #[error("crashed at a crash point")]
    Crashed,
    /// A tool asked to park; the step loop turns this into a park and it
    /// never leaves a segment.
    #[error("a tool parked outside a step")]
    Parked(crate::tool::ParkRequest),
}

impl From<agentenkit_store::Error> for SegmentError {
    /// Only what can pass is handed back to the queue (connections, the
    /// pool, deadlocks, serialization failures); an error that would repeat
    /// on every delivery (bad data, a violated constraint) fails the run
    /// rather than looping for ever and re-running its tools.
    fn from(e: agentenkit_store::Error) -> Self {
        use agentenkit_store::Error as E;
        match e {
            E::LeaseLost { .. } => SegmentError::LeaseLost,
            E::Db(ref db)
                if db.code().is_some_and(|c| {
                    let code = c.code();
                    code.starts_with("22") || code.starts_with("23")
                }) =>
            {
                SegmentError::Permanent(format!("the store refused a write: {e}"))
            }
            E::Corrupt(message) => SegmentError::Permanent(message),
            E::Pool(_) | E::Db(_) => SegmentError::Store(e),
            other => SegmentError::Permanent(other.to_string()),
        }
    }
}

#[derive(Debug, Error)]
pub enum WorkerError {
    #[error(transparent)]
    Queue(#[from] agentenkit_queue::Error),
    #[error("the worker crashed at a crash point")]
    Crashed,
}

/// What to do with a delivery once its segment is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Disposition {
    Ack,
    Requeue,
    Crashed,
}

#[derive(Clone)]
pub struct Worker {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    queue: Arc<dyn QueueAdapter>,
    registry: Arc<Registry>,
    relay: Relay,
    config: WorkerConfig,
    crash: Option<CrashPoint>,
    /// Segments being handled right now, across this worker's clones.
    busy: Arc<std::sync::atomic::AtomicUsize>,
}

impl Worker {
    pub fn new(
        store: Store,
        queue: Arc<dyn QueueAdapter>,
        registry: Arc<Registry>,
        config: WorkerConfig,
    ) -> Self {
        let relay = Relay::new(queue.clone());
        Self {
            inner: Arc::new(Inner {
                store,
                queue,
                registry,
                relay,
                config,
                crash: None,
                busy: Arc::default(),
            }),
        }
    }

    /// Makes the worker die (stop without acking or releasing anything)
    /// right after the checkpoint for which `crash` returns true. For tests
    /// of crash safety.
    pub fn with_crash_point(self, crash: CrashPoint) -> Self {
        let inner = &self.inner;
        Self {
            inner: Arc::new(Inner {
                store: inner.store.clone(),
                queue: inner.queue.clone(),
                registry: inner.registry.clone(),
                relay: inner.relay.clone(),
                config: inner.config.clone(),
                crash: Some(crash),
                busy: Arc::default(),
            }),
        }
    }

    /// Consumes segments until `shutdown`, then drains in-flight segments
    /// for up to `shutdown_grace`; what is left is redelivered elsewhere.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        let mut deliveries = self.inner.queue.consume(self.inner.config.prefetch).await?;
        let mut in_flight: JoinSet<Disposition> = JoinSet::new();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                    if matches!(done, Ok(Disposition::Crashed)) {
                        in_flight.abort_all();
                        return Err(WorkerError::Crashed);
                    }
                }
                delivery = deliveries.next() => match delivery {
                    Some(delivery) => {
                        let worker = self.clone();
                        in_flight.spawn(async move { worker.process(delivery).await });
                    }
                    None => break,
                },
            }
        }
        drop(deliveries);
        let drained = tokio::time::timeout(self.inner.config.shutdown_grace, async {
            while in_flight.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                left = in_flight.len(),
                "shutdown grace ran out; segments left will be redelivered"
            );
            in_flight.abort_all();
        }
        Ok(())
    }

    /// Segments this worker is handling now. A parked run is not one of
    /// them: waiting holds no worker.
    pub fn busy(&self) -> usize {
        self.inner.busy.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn process(&self, delivery: Delivery) -> Disposition {
        let _busy = Busy::enter(&self.inner.busy);
        let started = std::time::Instant::now();
        let disposition = match delivery.message() {
            Ok(QueueMessage::Segment { run_id, seq }) => {
                let span = tracing::info_span!("segment", run_id = %run_id, seq, thread_id = tracing::field::Empty);
                self.segment(run_id, seq).instrument(span).await
            }
            Ok(QueueMessage::Expiry {
                run_id,
                tool_call_id,
            }) => {
                let span =
                    tracing::info_span!("expiry", run_id = %run_id, tool_call_id = %tool_call_id);
                self.expiry(run_id, tool_call_id).instrument(span).await
            }
            Err(e) => {
                tracing::warn!(error = %e, "unreadable message dropped");
                Disposition::Ack
            }
        };
        ::metrics::histogram!(metrics::SEGMENT_SECONDS).record(started.elapsed().as_secs_f64());
        let settled = match disposition {
            Disposition::Ack => delivery.ack().await,
            Disposition::Requeue => {
                // Give the store a moment before the message comes back.
                tokio::time::sleep(Duration::from_millis(500)).await;
                delivery.nack(true).await
            }
            Disposition::Crashed => {
                // A dead process acks nothing: the broker redelivers once
                // the consumer's channel closes.
                drop(delivery);
                Ok(())
            }
        };
        if let Err(e) = settled {
            tracing::warn!(error = %e, "could not settle a delivery; it will be redelivered");
        }
        disposition
    }

    /// Handles one segment; the only place a [`SegmentError`] becomes a
    /// [`Disposition`].
    async fn segment(&self, run_id: RunId, seq: i64) -> Disposition {
        let ctx = match self.acquire(run_id, seq).await {
            Ok(Some(ctx)) => ctx,
            Ok(None) => {
                ::metrics::counter!(metrics::SEGMENTS, "outcome" => "dropped").increment(1);
                return Disposition::Ack;
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not take the lease");
                return Disposition::Requeue;
            }
        };
        tracing::Span::current().record("thread_id", tracing::field::display(ctx.lease.thread_id));
        let lost = CancellationToken::new();
        let _heartbeat = self.heartbeat(ctx.lease.clone(), lost.clone());
        let inner = &self.inner;
        let mut cp = Checkpointer::new(
            &inner.store,
            &inner.relay,
            &ctx.lease,
            ctx.journal.clone(),
            ctx.calls.clone(),
            inner.crash.as_ref(),
        );
        // A lost lease (stopped, or taken over) ends the step at once: the
        // run is someone else's now, and every later write would be refused.
        let result = tokio::select! {
            result = self.advance(&ctx, &mut cp) => result,
            () = lost.cancelled() => Err(SegmentError::LeaseLost),
        };
        let outcome = match result {
            Ok(Outcome::Completed { output }) => {
                self.finish(&ctx, &mut cp, RunStatus::Completed, output, None)
                    .await
            }
            Ok(Outcome::Park { to_park }) => self.park(&ctx, &mut cp, to_park).await,
            Err(SegmentError::Parked(request)) => {
                let error = format!("a tool parked ({}) outside a step", request.reason);
                cp.discard();
                self.finish(&ctx, &mut cp, RunStatus::Failed, None, Some(error))
                    .await
            }
            Err(SegmentError::Permanent(error)) | Err(SegmentError::Retry(error)) => {
                tracing::warn!(%error, "run failed");
                // What the step buffered may be the cause (a write the
                // store refuses): the failure is recorded without it.
                cp.discard();
                self.finish(&ctx, &mut cp, RunStatus::Failed, None, Some(error))
                    .await
            }
            Err(other) => Err(other),
        };
        let disposition = match outcome {
            Ok(()) => Disposition::Ack,
            Err(SegmentError::LeaseLost) => {
                tracing::info!("lease lost; another worker carries on");
                Disposition::Ack
            }
            Err(SegmentError::Store(e)) => {
                tracing::warn!(error = %e, "store failed; segment handed back");
                Disposition::Requeue
            }
            Err(SegmentError::Crashed) => Disposition::Crashed,
            Err(SegmentError::Permanent(e)) | Err(SegmentError::Retry(e)) => {
                tracing::error!(error = %e, "could not record the run's end");
                Disposition::Requeue
            }
            Err(SegmentError::Parked(_)) => Disposition::Requeue,
        };
        let label = match disposition {
            Disposition::Ack => "done",
            Disposition::Requeue => "requeued",
            Disposition::Crashed => "crashed",
        };
        ::metrics::counter!(metrics::SEGMENTS, "outcome" => label).increment(1);
        disposition
    }

    /// An expiry message: expires the request if it is still open and due;
    /// an early delivery is re-scheduled for the remainder, never applied.
    async fn expiry(&self, run_id: RunId, call: agentenkit_core::ToolCallId) -> Disposition {
        match self.inner.store.expire(run_id, &call).await {
            Ok(Expiry::Expired { outbox }) => {
                ::metrics::counter!(metrics::EXPIRIES).increment(1);
                tracing::info!("request expired");
                self.inner.relay.publish(&outbox).await;
                Disposition::Ack
            }
            Ok(Expiry::NotDue {
                remaining_ms,
                outbox,
            }) => {
                ::metrics::counter!(metrics::EXPIRIES_RESCHEDULED).increment(1);
                tracing::info!(remaining_ms, "expiry arrived early; re-scheduled");
                self.inner.relay.publish(&outbox).await;
                Disposition::Ack
            }
            Ok(Expiry::Gone) => Disposition::Ack,
            Err(e) => {
                tracing::warn!(error = %e, "expiry failed; handed back");
                Disposition::Requeue
            }
        }
    }

    /// Takes the lease. When another worker holds it (a redelivery after a
    /// crash), waits once for that lease to run out: a live holder keeps
    /// extending it and the delivery is then a duplicate to drop.
    async fn acquire(
        &self,
        run_id: RunId,
        seq: i64,
    ) -> Result<Option<RunContext>, agentenkit_store::Error> {
        let ttl = self.inner.config.lease_ttl;
        let ttl_ms = ttl.as_millis() as u64;
        for attempt in 0..2 {
            match self.inner.store.acquire_lease(run_id, seq, ttl_ms).await? {
                LeaseAttempt::Acquired(ctx) => return Ok(Some(*ctx)),
                LeaseAttempt::Stale => return Ok(None),
                LeaseAttempt::Held { until } if attempt == 0 => {
                    let left = (until - chrono::Utc::now())
                        .to_std()
                        .unwrap_or_default()
                        .min(ttl);
                    tokio::time::sleep(left + Duration::from_millis(50)).await;
                }
                LeaseAttempt::Held { .. } => return Ok(None),
            }
        }
        Ok(None)
    }

    /// Keeps the lease alive while a slow step runs; stops when dropped.
    /// A passing store error is retried at the next beat; a lost lease
    /// cancels `lost`.
    fn heartbeat(&self, lease: Lease, lost: CancellationToken) -> AbortOnDrop {
        let store = self.inner.store.clone();
        let every = self.inner.config.lease_ttl / 4;
        AbortOnDrop(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match store.commit(&lease, &[]).await {
                    Ok(_) => {}
                    Err(agentenkit_store::Error::LeaseLost { .. }) => {
                        tracing::info!("lease lost while the step ran");
                        lost.cancel();
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, "heartbeat failed; retrying"),
                }
            }
        }))
    }

    /// Runs the loop, retrying retryable failures with backoff; returns the
    /// last error once the attempts are spent.
    async fn advance(
        &self,
        ctx: &RunContext,
        cp: &mut Checkpointer<'_>,
    ) -> Result<Outcome, SegmentError> {
        let inner = &self.inner;
        let agent = inner
            .registry
            .agent(&ctx.name)
            .ok_or_else(|| SegmentError::Permanent(format!("unknown agent {:?}", ctx.name)))?;
        let mut attempts = ctx.attempts.max(0) as u32;
        if attempts >= inner.config.max_attempts {
            // Earlier workers died in this step (each takeover counts).
            return Err(SegmentError::Permanent(format!(
                "the step was attempted {attempts} times without progress"
            )));
        }
        loop {
            match run_turn(agent, &inner.registry, ctx, cp).await {
                Err(SegmentError::Retry(error)) => {
                    attempts += 1;
                    // What the attempt recorded before it failed is kept:
                    // the retry replays it.
                    cp.buffer(vec![Change::RecordFailure {
                        error: error.clone(),
                    }]);
                    cp.flush(None).await?;
                    if attempts >= inner.config.max_attempts {
                        return Err(SegmentError::Retry(format!(
                            "{error} (after {attempts} attempts)"
                        )));
                    }
                    let backoff = inner.config.retry_backoff * 2u32.saturating_pow(attempts - 1);
                    tracing::info!(%error, attempts, ?backoff, "step failed; retrying");
                    tokio::time::sleep(backoff.min(Duration::from_secs(30))).await;
                    cp.rewind();
                }
                other => return other,
            }
        }
    }

    /// Ends the run; a child run also settles its parent's delegation (its
    /// output, or its failure, is the delegation's result) and resumes the
    /// parent when nothing else of it is open.
    async fn finish(
        &self,
        ctx: &RunContext,
        cp: &mut Checkpointer<'_>,
        status: RunStatus,
        output: Option<String>,
        error: Option<String>,
    ) -> Result<(), SegmentError> {
        let lease = &ctx.lease;
        let delegation = match (ctx.parent_run_id, &ctx.parent_tool_call_id) {
            (Some(parent_run_id), Some(call)) => Some(match status {
                RunStatus::Completed => Change::FinishDelegation {
                    parent_run_id,
                    call_id: ToolCallId(call.clone()),
                    status: ToolCallStatus::Executed,
                    result: json!(output.clone().unwrap_or_default()),
                },
                _ => Change::FinishDelegation {
                    parent_run_id,
                    call_id: ToolCallId(call.clone()),
                    status: ToolCallStatus::Failed,
                    result: json!({
                        "error": format!("sub-agent {} failed: {}", ctx.name, error.as_deref().unwrap_or("unknown error")),
                    }),
                },
            }),
            _ => None,
        };
        let (event_type, data) = match status {
            RunStatus::Completed => (
                EventType::RunCompleted,
                json!({ "runId": lease.run_id, "output": output }),
            ),
            _ => (
                EventType::RunFailed,
                json!({ "runId": lease.run_id, "error": error }),
            ),
        };
        cp.commit_end(
            [
                Change::FinishRun {
                    status,
                    output,
                    error,
                },
                Change::Event { event_type, data },
            ]
            .into_iter()
            .chain(delegation)
            .collect(),
            "finish",
        )
        .await?;
        ::metrics::counter!(metrics::RUNS_FINISHED, "status" => status.as_str()).increment(1);
        Ok(())
    }
}

/// Counts a segment in flight for as long as it lives.
struct Busy<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Busy<'a> {
    fn enter(counter: &'a std::sync::atomic::AtomicUsize) -> Self {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Busy(counter)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
