//! The reaper's pass: finds what should be moving and is not, and moves it.
//! Cheap (indexed queries over active rows only), idempotent, and safe to
//! run from several processes at once.

use std::time::Duration;

use agentenkit_store::{Expiry, Scope, Store};

use crate::metrics;
use crate::Deployment;
use crate::Result;

#[derive(Debug, Clone)]
pub struct ReaperConfig {
    /// A queued run nobody picked up for this long is enqueued again.
    pub stalled_after: Duration,
    /// An outbox row whose message should have been handled this long ago
    /// and was not (never published, or lost) is published again. Longer
    /// than a busy queue's wait, or a backlog gets duplicates (which its
    /// consumers drop).
    pub outbox_stale_after: Duration,
    /// When the segment queue has no backlog, a segment's row this long past
    /// due is not waiting in the queue: its committer died before it
    /// published (or the broker lost it), so it is published again without
    /// waiting `outbox_stale_after`. A consumer drops the rare duplicate (a
    /// message prefetched by a busy worker).
    pub outbox_orphan_after: Duration,
    /// Rows handled per query; a pass repeats until a batch comes back short.
    pub batch: i64,
    /// The expiry given to an open approval that has none (parked before
    /// the expiry timer existed).
    pub default_ttl: Duration,
    /// Idempotency keys of batch decisions are kept this long after their
    /// first use, then deleted (a request with one is new again).
    pub idempotency_keep_for: Duration,
    /// Settled notification deliveries (delivered or dead) are kept this
    /// long, then deleted.
    pub deliveries_keep_for: Duration,
    /// Agent versions are kept this long after they were first seen, and
    /// then while an open run, or a run started within it, refers to them
    /// (an agent's newest is always kept).
    pub versions_keep_for: Duration,
    /// An old version found still in use is looked at again after this.
    pub versions_recheck: Duration,
}

impl Default for ReaperConfig {
    fn default() -> Self {
        Self {
            stalled_after: Duration::from_secs(300),
            outbox_stale_after: Duration::from_secs(30),
            outbox_orphan_after: Duration::from_secs(5),
            batch: 500,
            default_ttl: Duration::from_millis(crate::config::DEFAULT_HITL_TTL_MS),
            idempotency_keep_for: agentenkit_store::KeyTimes::default().keep_for,
            deliveries_keep_for: Duration::from_secs(7 * 86_400),
            versions_keep_for: Duration::from_secs(30 * 86_400),
            versions_recheck: Duration::from_secs(86_400),
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapReport {
    pub expired_requests: usize,
    pub scheduled_expiries: usize,
    pub expired_leases: usize,
    pub stalled_queued: usize,
    /// Queued turns started: their thread's run had ended, and whoever
    /// ended it died before starting them.
    pub queued_turns_started: usize,
    /// Runs held for a slot of their caps, admitted because a slot was
    /// free (a run stopped where nobody admitted the next: cancelled, or
    /// failed outside a worker).
    pub held_runs_admitted: usize,
    pub outbox_published: usize,
    pub idempotency_keys_deleted: usize,
    pub deliveries_deleted: usize,
    pub versions_dropped: usize,
}

/// `reclaimIfOrphaned` for the requests in `scope`: expires what is
/// overdue (its expiry message was lost, or its adapter ignored the delay)
/// and gives an expiry to open approvals that have none. What the API runs
/// for one thread on every stream or inbox connect.
/// `store` is a deployment's: what the pass writes to the outbox is
/// published through its relay.
pub async fn reclaim_requests(
    store: &Store,
    config: &ReaperConfig,
    scope: &Scope,
) -> Result<ReapReport> {
    let mut report = ReapReport::default();
    loop {
        let overdue = store.overdue_requests(scope, config.batch).await?;
        for (run, call) in &overdue {
            if let Expiry::Expired {
                late_ms,
                waited_ms,
                trace,
                ..
            } = store.expire(*run, call).await?
            {
                report.expired_requests += 1;
                let waited = Duration::from_millis(waited_ms);
                crate::trace::wait_ended(trace.as_ref(), call.as_str(), waited, "expired", None);
                ::metrics::histogram!(metrics::EXPIRY_LATENESS_SECONDS, "by" => "reaper")
                    .record(late_ms as f64 / 1000.0);
                tracing::info!(run_id = %run, tool_call_id = %call, "expired an overdue request");
            }
        }
        if (overdue.len() as i64) < config.batch {
            break;
        }
    }
    ::metrics::counter!(metrics::RECLAIMS, "cause" => "overdue_request")
        .increment(report.expired_requests as u64);
    ::metrics::counter!(metrics::EXPIRIES).increment(report.expired_requests as u64);
    loop {
        let scheduled = store
            .schedule_missing_expiries(scope, config.default_ttl.as_millis() as u64, config.batch)
            .await?;
        report.scheduled_expiries += scheduled.len();
        if (scheduled.len() as i64) < config.batch {
            break;
        }
    }
    ::metrics::counter!(metrics::RECLAIMS, "cause" => "missing_expiry")
        .increment(report.scheduled_expiries as u64);
    Ok(report)
}

/// One reclaim pass over all threads, writing as `deployment`'s processes
/// do (what it writes to the outbox is published through its relay).
pub async fn reap_once(deployment: &Deployment, config: &ReaperConfig) -> Result<ReapReport> {
    let store = deployment.store();
    let relay = deployment.relay();
    let mut report = reclaim_requests(store, config, &Scope::All).await?;
    loop {
        let reclaimed = store
            .reclaim_stuck_runs(config.stalled_after.as_millis() as u64, config.batch)
            .await?;
        let found = reclaimed.expired_leases.len() + reclaimed.stalled_queued.len();
        report.expired_leases += reclaimed.expired_leases.len();
        report.stalled_queued += reclaimed.stalled_queued.len();
        for run in &reclaimed.expired_leases {
            tracing::info!(run_id = %run, "re-enqueued a run whose lease ran out");
        }
        ::metrics::counter!(metrics::RECLAIMS, "cause" => "expired_lease")
            .increment(reclaimed.expired_leases.len() as u64);
        ::metrics::counter!(metrics::RECLAIMS, "cause" => "stalled_queued")
            .increment(reclaimed.stalled_queued.len() as u64);
        if (found as i64) < config.batch {
            break;
        }
    }
    loop {
        let started = store.start_stranded_turns(config.batch).await?;
        report.queued_turns_started += started.len();
        for run in &started {
            tracing::info!(run_id = %run, "started a queued turn its ended run left behind");
        }
        ::metrics::counter!(metrics::RECLAIMS, "cause" => "queued_turn")
            .increment(started.len() as u64);
        if (started.len() as i64) < config.batch {
            break;
        }
    }
    let admitted = store.admit_held_runs(config.batch).await?;
    report.held_runs_admitted += admitted.len();
    ::metrics::counter!(metrics::RECLAIMS, "cause" => "held_run").increment(admitted.len() as u64);
    let stale_ms = config.outbox_stale_after.as_millis() as u64;
    let orphan_ms = config.outbox_orphan_after.as_millis() as u64;
    if orphan_ms < stale_ms && relay.backlog().await == Some(0) {
        report.outbox_published +=
            republish_outbox(store, config, orphan_ms, true, "orphaned_outbox").await?;
    }
    report.outbox_published +=
        republish_outbox(store, config, stale_ms, false, "stale_outbox").await?;
    report.idempotency_keys_deleted += in_batches(config.batch, || {
        store.delete_expired_idempotency_keys(config.idempotency_keep_for, config.batch)
    })
    .await?;
    report.deliveries_deleted += in_batches(config.batch, || {
        store.delete_old_deliveries(config.deliveries_keep_for, config.batch)
    })
    .await?;
    report.versions_dropped += store
        .drop_unreferenced_versions(config.versions_keep_for, config.versions_recheck)
        .await? as usize;
    Ok(report)
}

/// Runs a housekeeping `delete` of up to `batch` rows until one deletes
/// fewer; returns how many it deleted in all.
async fn in_batches<F, Fut>(batch: i64, mut delete: F) -> agentenkit_store::Result<usize>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = agentenkit_store::Result<u64>>,
{
    let mut total = 0;
    loop {
        let deleted = delete().await?;
        total += deleted as usize;
        if (deleted as i64) < batch {
            return Ok(total);
        }
    }
}

/// Publishes again, batch by batch, the outbox rows more than `older_than_ms`
/// past due (segments only when `immediate_only`); returns how many.
async fn republish_outbox(
    store: &Store,
    config: &ReaperConfig,
    older_than_ms: u64,
    immediate_only: bool,
    cause: &'static str,
) -> Result<usize> {
    // A claim outlasts the long threshold, so two reapers never publish
    // one row at once.
    let claim_ms = config.outbox_stale_after.as_millis().max(1000) as u64 * 3;
    let mut published = 0;
    loop {
        let rows = store
            .claim_stale_outbox(older_than_ms, claim_ms, config.batch, immediate_only)
            .await?;
        published += rows.len();
        ::metrics::counter!(metrics::RECLAIMS, "cause" => cause).increment(rows.len() as u64);
        if (rows.len() as i64) < config.batch {
            return Ok(published);
        }
    }
}

/// Runs [`reap_once`] every `every` until `shutdown`.
pub async fn reap_every(
    deployment: Deployment,
    config: ReaperConfig,
    every: Duration,
    shutdown: tokio_util::sync::CancellationToken,
) {
    loop {
        match reap_once(&deployment, &config).await {
            Ok(report) if report != ReapReport::default() => {
                tracing::info!(?report, "reaper pass");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "reaper pass failed"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}
