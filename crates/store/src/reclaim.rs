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
                        -- its worker died: a takeover, not a failed attempt
                        takeovers = r.takeovers + CASE WHEN stuck.status = 'running' THEN 1 ELSE 0 END,
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
        self.publish(&reclaimed.outbox).await;
        Ok(reclaimed)
    }
}

impl Store {
    /// Fails a run that cannot go on whoever holds it (its rows cannot be
    /// read, a write of it breaks a constraint): `failed` with `error`,
    /// `RUN_FAILED`, and for a child the parent's delegation settles as a
    /// failure (resuming the parent when nothing else of it is open), as a
    /// failing run would itself. A worker holding its lease loses it. One
    /// transaction; returns the parent's resume segment to publish, if any,
    /// or `None` when the run had already ended.
    pub async fn fail_run(&self, run: RunId, error: &str) -> Result<Option<Vec<OutboxRow>>> {
        let failed = crate::error::retry_conflicts(|| self.fail_run_once(run, error)).await?;
        if let Some(outbox) = &failed {
            self.publish(outbox).await;
        }
        Ok(failed)
    }

    async fn fail_run_once(&self, run: RunId, error: &str) -> Result<Option<Vec<OutboxRow>>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        // The parent first, then the run, then its descendants. A child
        // finishing locks itself before its parent, so this order can meet
        // one in a deadlock; Postgres then aborts one side and
        // `retry_conflicts` runs it again.
        let stmt = tx
            .prepare_cached(
                "SELECT p.id FROM runs c JOIN runs p ON p.id = c.parent_run_id
                 WHERE c.id = $1 FOR NO KEY UPDATE OF p",
            )
            .await?;
        let parent: Option<uuid::Uuid> = tx.query_opt(&stmt, &[&run.0]).await?.map(|r| r.get(0));
        let stmt = tx
            .prepare_cached(
                "UPDATE runs SET status = 'failed', error = $2, finished_at = now(), updated_at = now(),
                        lease_owner = NULL, lease_expires_at = NULL
                 WHERE id = $1 AND status IN ('queued', 'running', 'waiting')
                 RETURNING thread_id, name, parent_tool_call_id",
            )
            .await?;
        let Some(row) = tx.query_opt(&stmt, &[&run.0, &error]).await? else {
            tx.rollback().await?;
            return Ok(None);
        };
        let thread = agentenkit_core::ThreadId(row.get(0));
        let name: String = row.get(1);
        let parent_call: Option<String> = row.get(2);
        // Its sub-agents go with it, and every open request of them all.
        let stmt = tx
            .prepare_cached(
                "WITH RECURSIVE tree AS (
                     SELECT id FROM runs WHERE parent_run_id = $1
                     UNION ALL
                     SELECT r.id FROM runs r JOIN tree t ON r.parent_run_id = t.id)
                 UPDATE runs SET status = 'cancelled', finished_at = now(), updated_at = now(),
                        lease_owner = NULL, lease_expires_at = NULL, error = 'its parent run failed'
                 WHERE id IN (SELECT id FROM tree) AND status IN ('queued', 'running', 'waiting')
                 RETURNING id",
            )
            .await?;
        let cancelled: Vec<uuid::Uuid> = tx
            .query(&stmt, &[&run.0])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut ended = cancelled.clone();
        ended.push(run.0);
        crate::stop::cancel_open_calls(&tx, &ended).await?;
        let mut outbox = Vec::new();
        if let (Some(parent), Some(call)) = (parent, parent_call) {
            let failed = agentenkit_core::CallEvent::Finish {
                status: agentenkit_core::ToolCallStatus::Failed,
                result: serde_json::json!({
                    "error": format!("sub-agent {name} failed: {error}"),
                }),
            };
            let call = agentenkit_core::ToolCallId(call);
            crate::pipeline::execute(&tx, crate::calls::write(RunId(parent), &call, &failed)?)
                .await?;
            outbox = crate::resume::resume_if_settled(&tx, RunId(parent)).await?;
        }
        // Events last, after every row lock (see INSERT_EVENT_SQL).
        for child in &cancelled {
            outbox.extend(
                crate::event_insert::insert_event(
                    &tx,
                    thread,
                    Some(RunId(*child)),
                    agentenkit_core::EventType::RunCancelled,
                    &serde_json::json!({ "runId": child, "reason": "its parent run failed" }),
                    self.notify_rule(),
                )
                .await?,
            );
        }
        outbox.extend(
            crate::event_insert::insert_event(
                &tx,
                thread,
                Some(run),
                agentenkit_core::EventType::RunFailed,
                &serde_json::json!({ "runId": run, "error": error }),
                self.notify_rule(),
            )
            .await?,
        );
        tx.commit().await?;
        Ok(Some(outbox))
    }
}
