//! The reaper's pass: finds what should be moving and is not, and moves it.
//! Cheap (indexed queries over active rows only), idempotent, and safe to
//! run from several processes at once.

use std::time::Duration;

use agentenkit_store::Store;

use crate::metrics;
use crate::relay::Relay;
use crate::Result;

#[derive(Debug, Clone)]
pub struct ReaperConfig {
    /// A queued run nobody picked up for this long is enqueued again.
    pub stalled_after: Duration,
    /// An outbox row older than this was not published by its committer.
    pub outbox_stale_after: Duration,
    /// Rows handled per query; a pass repeats until a batch comes back short.
    pub batch: i64,
}

impl Default for ReaperConfig {
    fn default() -> Self {
        Self {
            stalled_after: Duration::from_secs(60),
            outbox_stale_after: Duration::from_secs(10),
            batch: 500,
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapReport {
    pub expired_leases: usize,
    pub stalled_queued: usize,
    pub outbox_published: usize,
}

/// One reclaim pass over all threads.
pub async fn reap_once(store: &Store, relay: &Relay, config: &ReaperConfig) -> Result<ReapReport> {
    let mut report = ReapReport::default();
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
        relay.publish(&reclaimed.outbox).await;
        if (found as i64) < config.batch {
            break;
        }
    }
    let stale_ms = config.outbox_stale_after.as_millis() as u64;
    loop {
        let rows = store
            .claim_stale_outbox(stale_ms, stale_ms.max(1000) * 3, config.batch)
            .await?;
        report.outbox_published += rows.len();
        ::metrics::counter!(metrics::RECLAIMS, "cause" => "stale_outbox")
            .increment(rows.len() as u64);
        relay.publish(&rows).await;
        if (rows.len() as i64) < config.batch {
            break;
        }
    }
    Ok(report)
}

/// Runs [`reap_once`] every `every` until `shutdown`.
pub async fn reap_every(
    store: Store,
    relay: Relay,
    config: ReaperConfig,
    every: Duration,
    shutdown: tokio_util::sync::CancellationToken,
) {
    loop {
        match reap_once(&store, &relay, &config).await {
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
