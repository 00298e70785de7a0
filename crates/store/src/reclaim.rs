//! Reclaim queries: runs that should be moving and are not.

use agentenkit_core::{QueueMessage, RunId};

use crate::outbox::{self, OutboxRow};
use crate::{Result, Store};

/// What one reclaim pass found and fixed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reclaimed {
    /// Runs whose worker's lease ran out: re-enqueued with a new segment.
    pub expired_leases: Vec<RunId>,
    /// Queued runs nobody picked up for too long (their segment message
    /// may be lost): re-enqueued with a new segment.
    pub stalled_queued: Vec<RunId>,
    /// Segments to publish (also in the outbox, so nothing is lost if the
    /// caller dies before publishing).
    pub outbox: Vec<OutboxRow>,
}

impl Store {
    /// Re-enqueues up to `limit` runs that hold an expired lease, or sat
    /// queued without a worker for `stalled_after_ms`. Each gets a new
    /// segment seq, so a late delivery of the old segment is dropped as
    /// stale. Safe to run from several reapers at once (SKIP LOCKED).
    pub async fn reclaim_stuck_runs(&self, stalled_after_ms: u64, limit: i64) -> Result<Reclaimed> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let stmt = tx
            .prepare_cached(
                "UPDATE runs r SET status = 'queued',
                        -- A dead worker's run gets a new segment (its old one
                        -- may still be redelivered: it is then stale). A run
                        -- merely waiting in a long queue gets its same segment
                        -- again, so a backlog is never made deeper by bumps
                        -- that strand every queued message.
                        segment_seq = CASE WHEN stuck.status = 'running' THEN r.segment_seq + 1 ELSE r.segment_seq END,
                        attempts = r.attempts + CASE WHEN stuck.status = 'running' THEN 1 ELSE 0 END,
                        lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
                 FROM (SELECT id, status FROM runs
                       WHERE status IN ('queued', 'running')
                         AND ((status = 'running' AND lease_expires_at <= now())
                           OR (status = 'queued' AND updated_at < now() - $1 * interval '1 millisecond'))
                       ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED) stuck
                 WHERE r.id = stuck.id
                 RETURNING r.id, r.segment_seq, stuck.status",
            )
            .await?;
        let rows = tx
            .query(&stmt, &[&(stalled_after_ms as f64), &limit])
            .await?;
        let mut reclaimed = Reclaimed::default();
        for row in rows {
            let run = RunId(row.get(0));
            let seq: i64 = row.get(1);
            let was: &str = row.get(2);
            if was == "running" {
                reclaimed.expired_leases.push(run);
            } else {
                reclaimed.stalled_queued.push(run);
            }
            let segment = QueueMessage::Segment { run_id: run, seq };
            reclaimed
                .outbox
                .push(outbox::insert(&tx, &segment, 0).await?);
        }
        tx.commit().await?;
        Ok(reclaimed)
    }
}
