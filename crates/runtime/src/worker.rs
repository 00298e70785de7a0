//! The worker: consumes segment messages, takes the run's lease, advances
//! the run, commits, then acks.
//!
//! A segment's error says what to do (exactly one `match` maps it, in
//! [`Worker::segment`]): a permanent error fails the run; a retryable one is
//! retried with backoff, then fails the run; a lost lease or a stale
//! delivery is dropped; a database outage hands the message back.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use agentenkit_core::RunId;
use agentenkit_queue::{Delivery, QueueAdapter};
use agentenkit_store::{Lease, LeaseAttempt, RunContext, Store};
use futures::FutureExt;
use thiserror::Error;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::agent::Registry;
use crate::agent_loop::segment::{self, RetryPolicy};
use crate::agent_loop::{Checkpointer, CrashPoint, SegmentError};
use crate::metrics;
use crate::trace;

mod config;
mod handling;
mod notifications;
mod polls;
mod statistics;
mod versions;
pub use config::WorkerConfig;

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
    /// Hand it back, counted; past `max_deliveries`, dead-letter it.
    Requeue,
    /// It can never succeed (unreadable): to the dead-letter queue now.
    DeadLetter,
    Crashed,
}

/// Which queue a delivery came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum From {
    Segments,
    Notifications,
}

#[derive(Clone)]
pub struct Worker {
    inner: Arc<Inner>,
}

struct Inner {
    /// What it serves with: its store, queue, agent file, notifier, the
    /// sender of the events its commits claim, and the registries of the
    /// versions runs are pinned to.
    deployment: crate::Deployment,
    config: WorkerConfig,
    crash: Option<CrashPoint>,
    /// Segments being handled right now, across this worker's clones.
    busy: Arc<std::sync::atomic::AtomicUsize>,
}

impl Inner {
    fn store(&self) -> &Store {
        self.deployment.store()
    }

    fn registry(&self) -> Arc<Registry> {
        self.deployment.registry()
    }

    fn pinned(&self) -> &Arc<crate::versions::PinnedRegistries> {
        self.deployment.pinned()
    }

    fn queue(&self) -> Arc<dyn QueueAdapter> {
        self.deployment.queue()
    }
}

impl Worker {
    /// A worker of `deployment`: its commits are wired as the
    /// deployment's (published through its relay, notified, sent from
    /// here), and it serves runs pinned to other versions from the
    /// deployment's registries of them.
    pub fn new(deployment: &crate::Deployment, config: WorkerConfig) -> Self {
        Self::of(deployment.clone(), config, None)
    }

    fn of(deployment: crate::Deployment, config: WorkerConfig, crash: Option<CrashPoint>) -> Self {
        Self {
            inner: Arc::new(Inner {
                deployment,
                config,
                crash,
                busy: Arc::default(),
            }),
        }
    }

    /// Makes the worker die (stop without acking or releasing anything)
    /// right after the checkpoint for which `crash` returns true. For tests
    /// of crash safety.
    pub fn with_crash_point(self, crash: CrashPoint) -> Self {
        let inner = &self.inner;
        Self::of(
            inner.deployment.with_crash_point(crash.clone()),
            inner.config.clone(),
            Some(crash),
        )
    }

    /// Consumes segments until `shutdown`, then drains in-flight segments
    /// for up to `shutdown_grace`; what is left is redelivered elsewhere.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        // Other workers may serve runs pinned to this worker's versions.
        self.inner
            .registry()
            .record_versions_until_done(self.inner.store())
            .await;
        // New turns start on what the agent file's MCP servers list now.
        self.inner.deployment.watch_servers(shutdown.child_token());
        let mut deliveries = self
            .inner
            .queue()
            .consume(self.inner.config.prefetch)
            .await?;
        let mut notifications = self
            .inner
            .queue()
            .consume_notifications(self.inner.config.notify_prefetch)
            .await?;
        let statistics = self.keep_statistics(shutdown.child_token());
        let mut in_flight: JoinSet<Disposition> = JoinSet::new();
        let sent_here_crashed = self
            .inner
            .deployment
            .sends_here()
            .map(crate::notify::SendsHere::crashed)
            .unwrap_or_default();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = sent_here_crashed.cancelled() => {
                    in_flight.abort_all();
                    return Err(WorkerError::Crashed);
                }
                Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                    if matches!(done, Ok(Disposition::Crashed)) {
                        in_flight.abort_all();
                        return Err(WorkerError::Crashed);
                    }
                }
                delivery = deliveries.next() => match delivery {
                    Some(delivery) => {
                        let worker = self.clone();
                        in_flight.spawn(async move { worker.process(delivery, From::Segments).await });
                    }
                    None => break,
                },
                delivery = notifications.next() => match delivery {
                    Some(delivery) => {
                        let worker = self.clone();
                        in_flight.spawn(async move { worker.process(delivery, From::Notifications).await });
                    }
                    None => break,
                },
            }
        }
        drop(deliveries);
        drop(notifications);
        statistics.abort();
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
        if let Some(sends) = self.inner.deployment.sends_here() {
            sends.drain(self.inner.config.shutdown_grace).await;
        }
        Ok(())
    }

    /// Segments this worker is handling now. A parked run is not one of
    /// them: waiting holds no worker.
    pub fn busy(&self) -> usize {
        self.inner.busy.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn process(&self, delivery: Delivery, from: From) -> Disposition {
        let _busy = (from == From::Segments).then(|| Busy::enter(&self.inner.busy));
        let started = std::time::Instant::now();
        let handled = AssertUnwindSafe(async {
            match delivery.message() {
                // Back from the delay ladder, which ends at the segments'
                // queue: on to the notifications' own.
                Ok(message) if message.is_notification() && from == From::Segments => {
                    self.forward(&message, delivery.trace.as_ref()).await
                }
                Ok(message) => {
                    let span = handling::span_for(&message, delivery.trace.as_ref());
                    self.handle(message).instrument(span).await
                }
                Err(e) => {
                    tracing::error!(error = %e, "unreadable message: dead-lettered");
                    Disposition::DeadLetter
                }
            }
        })
        .catch_unwind()
        .await;
        // A handler that panicked is a failed delivery like any other: handed
        // back, counted, and dead-lettered after its last delivery (dropped
        // unsettled, it stayed with the channel, uncounted).
        let disposition = handled.unwrap_or_else(|panic| panicked(&*panic, delivery.deliveries));
        ::metrics::histogram!(metrics::SEGMENT_SECONDS).record(started.elapsed().as_secs_f64());
        // A hand-back past the last delivery is a dead letter like any other.
        let disposition = match disposition {
            Disposition::Requeue if delivery.deliveries >= self.inner.config.max_deliveries => {
                tracing::error!(
                    deliveries = delivery.deliveries,
                    "message still failing after its last delivery: dead-lettered"
                );
                Disposition::DeadLetter
            }
            other => other,
        };
        self.dispose(delivery, disposition).await;
        disposition
    }

    /// Settles `delivery` as `disposition` says.
    async fn dispose(&self, delivery: Delivery, disposition: Disposition) {
        let settled = match disposition {
            Disposition::Ack => self.settle("ack", delivery.ack()).await,
            Disposition::Requeue => {
                // Give the store a moment before the message comes back.
                tokio::time::sleep(self.inner.config.hand_back_delay).await;
                self.settle("hand-back", delivery.hand_back()).await
            }
            Disposition::DeadLetter => {
                ::metrics::counter!(metrics::DEAD_LETTERS).increment(1);
                // If the dead-letter publish fails the message is requeued:
                // not at once, or it would spin.
                tokio::time::sleep(self.inner.config.hand_back_delay).await;
                self.settle("dead letter", delivery.dead_letter()).await
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
    }

    /// `settle`, given up after `settle_timeout`. The delivery it drops
    /// unsettled goes back to the broker (its acker requeues it when
    /// dropped), to be redelivered once the broker takes frames again; a
    /// hand-back or dead letter whose publish went through after all is a
    /// duplicate, which handlers drop like any other.
    async fn settle(
        &self,
        what: &'static str,
        settle: impl std::future::Future<Output = agentenkit_queue::Result<()>>,
    ) -> agentenkit_queue::Result<()> {
        let timeout = self.inner.config.settle_timeout;
        match tokio::time::timeout(timeout, settle).await {
            Ok(settled) => settled,
            Err(_) => {
                ::metrics::counter!(metrics::SETTLE_TIMEOUTS, "what" => what).increment(1);
                Err(agentenkit_queue::Error::Broker(format!(
                    "the {what} was not settled within {timeout:?} (is the broker blocking publishers?)"
                )))
            }
        }
    }

    /// Handles one segment.
    async fn segment(&self, run_id: RunId, seq: i64) -> Disposition {
        let mut ctx = match self.acquire(run_id, seq).await {
            Ok(Some(ctx)) => ctx,
            Ok(None) => {
                ::metrics::counter!(metrics::SEGMENTS, "outcome" => "dropped").increment(1);
                return Disposition::Ack;
            }
            Err(e) => return self.acquire_failed(run_id, e).await,
        };
        let span = tracing::Span::current();
        span.record("thread_id", tracing::field::display(ctx.lease.thread_id));
        if trace::exporting() {
            // What a trace viewer shows of the segment; the log lines do
            // without (they carry the run id).
            span.record("agent", ctx.lease.run_name.as_str());
            span.record("agent_version", ctx.agent_version.as_deref());
            span.record("attempt", ctx.attempts + 1);
        }
        let lost = CancellationToken::new();
        let given_up = CancellationToken::new();
        let _heartbeat = self.heartbeat(ctx.lease.clone(), lost.clone(), given_up.clone());
        let inner = &self.inner;
        // The run continues on the version of its agent it started on (or
        // was moved to), unless its agent takes newer ones.
        let registry = match inner
            .pinned()
            .for_run(
                inner.store(),
                &ctx.lease.run_name,
                ctx.agent_version.as_deref(),
            )
            .await
        {
            Ok(registry) => registry,
            Err(e) => return self.unserved(&ctx, e).await,
        };
        let registry = self.take_newer_version(registry, &mut ctx).await;
        // Its rules decide the upgrade; its endpoints must be this
        // deployment's for this worker to send for it.
        if let Err(e) = inner
            .pinned()
            .sends_for(&ctx.lease.run_name, ctx.agent_version.as_deref())
        {
            return self.unserved(&ctx, e).await;
        }
        let mut cp = Checkpointer::new(inner.store(), &ctx, inner.crash.as_ref());
        // A lost lease (stopped, or taken over) ends the step at once: the
        // run is someone else's now, and every later write would be refused.
        let retry = RetryPolicy {
            max_attempts: inner.config.max_attempts,
            backoff: inner.config.retry_backoff,
            max_takeovers: inner.config.max_takeovers,
        };
        let advanced = tokio::select! {
            advanced = segment::advance(&registry, &retry, &ctx, &mut cp) => advanced,
            () = lost.cancelled() => Err(SegmentError::LeaseLost),
        };
        if trace::exporting() {
            span.record("replayed_steps", cp.replayed());
        }
        let outcome = segment::end(&registry, &ctx, &mut cp, advanced).await;
        let disposition = disposition_of(outcome, given_up.is_cancelled());
        let label = match disposition {
            Disposition::Ack => "done",
            Disposition::Requeue => "requeued",
            Disposition::DeadLetter => "dead_lettered",
            Disposition::Crashed => "crashed",
        };
        ::metrics::counter!(metrics::SEGMENTS, "outcome" => label).increment(1);
        disposition
    }

    /// The lease could not be taken. A passing failure (the database is
    /// busy or unreachable, a conflict) hands the segment back; one that
    /// would repeat on every delivery (the run's rows cannot be read, a
    /// write of it breaks a constraint) fails the run, so its message does
    /// not loop.
    async fn acquire_failed(&self, run_id: RunId, e: agentenkit_store::Error) -> Disposition {
        let reason = match SegmentError::from(e) {
            SegmentError::Permanent(reason) => reason,
            other => {
                tracing::warn!(error = %other, "could not take the lease");
                return Disposition::Requeue;
            }
        };
        tracing::error!(error = %reason, "the run cannot be read or written; failing it");
        self.fail_run(run_id, &format!("the run could not be continued: {reason}"))
            .await
    }

    /// Fails `run_id` with `error` outside any step (it cannot be taken or
    /// served): acked once failed, handed back when the store would not.
    async fn fail_run(&self, run_id: RunId, error: &str) -> Disposition {
        match self.inner.store().fail_run(run_id, error).await {
            Ok(outbox) => {
                ::metrics::counter!(metrics::SEGMENTS, "outcome" => "run_failed").increment(1);
                if outbox.is_some() {
                    ::metrics::counter!(metrics::RUNS_FINISHED, "status" => "failed").increment(1);
                }
                Disposition::Ack
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not fail the run; segment handed back");
                Disposition::Requeue
            }
        }
    }

    fn notifier(&self) -> &crate::notify::Notifier {
        self.inner.deployment.notifier()
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
            match self
                .inner
                .store()
                .acquire_lease(run_id, seq, ttl_ms)
                .await?
            {
                LeaseAttempt::Acquired(ctx) => return Ok(Some(*ctx)),
                LeaseAttempt::Stale => return Ok(None),
                LeaseAttempt::Held { left, .. } if attempt == 0 => {
                    // The database's clock decides when the lease ends.
                    tokio::time::sleep(left.min(ttl) + Duration::from_millis(50)).await;
                }
                LeaseAttempt::Held { .. } => return Ok(None),
            }
        }
        Ok(None)
    }

    /// Keeps the lease alive while a slow step runs; stops when dropped.
    /// Each beat may take a quarter of the lease. A lost lease cancels
    /// `lost`; so does a lease this worker could not renew for most of its
    /// life (the database unreachable or stalled): another worker may take
    /// the run over at the lease's end, and this one must stop acting on it
    /// (its tool included) rather than find out at its next commit.
    fn heartbeat(
        &self,
        lease: Lease,
        lost: CancellationToken,
        given_up: CancellationToken,
    ) -> AbortOnDrop {
        let store = self.inner.store().clone();
        let ttl = self.inner.config.lease_ttl;
        let every = ttl / 4;
        AbortOnDrop(tokio::spawn(async move {
            let mut renewed = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(every).await;
                let renewal = store.renew_lease(&lease, every);
                match tokio::time::timeout(every + every / 2, renewal).await {
                    Ok(Ok(_)) => renewed = tokio::time::Instant::now(),
                    Ok(Err(agentenkit_store::Error::LeaseLost { .. })) => {
                        tracing::info!("lease lost while the step ran");
                        lost.cancel();
                        return;
                    }
                    Ok(Err(e)) => tracing::warn!(error = %e, "heartbeat failed; retrying"),
                    Err(_) => tracing::warn!(timeout = ?every, "heartbeat timed out; retrying"),
                }
                // One more beat could not end before the lease does.
                if renewed.elapsed() + every * 2 > ttl {
                    tracing::warn!(
                        since = ?renewed.elapsed(),
                        "the lease could not be renewed; giving the run up before it runs out"
                    );
                    given_up.cancel();
                    lost.cancel();
                    return;
                }
            }
        }))
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

/// What becomes of a segment's message once the segment ended as
/// `outcome` (`given_up`: this worker let go of a lease it could not
/// renew): the only place a [`SegmentError`] becomes a [`Disposition`].
fn disposition_of(outcome: Result<(), SegmentError>, given_up: bool) -> Disposition {
    match outcome {
        Ok(()) => Disposition::Ack,
        // This worker let go of a lease it could not renew: the run is
        // nobody's yet, so its segment goes back for the next worker
        // (which takes the run once the lease has run out).
        Err(SegmentError::LeaseLost) if given_up => {
            tracing::warn!("the lease could not be renewed; segment handed back");
            Disposition::Requeue
        }
        Err(SegmentError::LeaseLost) => {
            tracing::info!("lease lost; another worker carries on");
            Disposition::Ack
        }
        Err(SegmentError::Store(e)) => {
            tracing::warn!(error = %e, "store failed; segment handed back");
            Disposition::Requeue
        }
        Err(SegmentError::Crashed) => Disposition::Crashed,
        Err(
            e @ (SegmentError::Permanent(_)
            | SegmentError::Retry(_)
            | SegmentError::ModelRefused { .. }
            | SegmentError::RateLimited { .. }),
        ) => {
            tracing::error!(error = %e, "could not record the run's end");
            Disposition::Requeue
        }
        Err(SegmentError::Parked(_) | SegmentError::Asked(_)) => Disposition::Requeue,
    }
}

/// A handler that panicked: its delivery is handed back.
fn panicked(panic: &(dyn std::any::Any + Send), deliveries: u32) -> Disposition {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned());
    tracing::error!(panic = %what, deliveries, "the handler panicked; handed back");
    ::metrics::counter!(metrics::SEGMENTS, "outcome" => "panicked").increment(1);
    Disposition::Requeue
}
