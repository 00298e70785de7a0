//! Reclaim queries: runs that should be moving and are not.

use agentenkit_core::{CallEvent, EventType, QueueMessage, RunId, ToolCallId, ToolCallStatus};
use serde_json::json;

use crate::event_insert::{event_ops, returned_outbox};
use crate::format::event::RowFields;
use crate::outbox::{self, OutboxRow};
use crate::pipeline::{Answer, Expect, Op, OpenTx};
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
                           OR (status = 'queued' AND updated_at < now() - $1 * interval '1 millisecond'
                               -- a run held for a slot has no segment to lose
                               AND held_since IS NULL))
                       ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED) stuck
                 WHERE r.id = stuck.id
                 RETURNING r.id, r.segment_seq, stuck.status, r.traceparent, r.tracestate",
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
            let mut row_of = outbox::insert(&tx, &segment, 0).await?;
            // The segment that carries on after a crash continues the run's
            // trace.
            row_of.trace = crate::start::trace_in(&row, 3);
            reclaimed.outbox.push(row_of);
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
        let failed = crate::pipeline::retry_conflicts(|| self.fail_run_once(run, error)).await?;
        let Some((outbox, thread, slot_owner)) = failed else {
            return Ok(None);
        };
        self.publish(&outbox).await;
        if let Some(owner) = slot_owner {
            // Its slot is free (and its sub-agents').
            self.admit_after_stopping(&owner, thread).await;
        }
        Ok(Some(outbox))
    }

    /// One round trip fails the run under the locks, the next cancels its
    /// sub-agents, the last writes the rest as one plan.
    /// The outbox rows, the run's thread and the owner whose cap it counted
    /// toward, if any.
    async fn fail_run_once(
        &self,
        run: RunId,
        error: &str,
    ) -> Result<Option<(Vec<OutboxRow>, agentenkit_core::ThreadId, Option<String>)>> {
        let tx = OpenTx::new(self.client().await?);
        // The parent first, then the run, then its descendants. A child
        // finishing locks itself before its parent, so this order can meet
        // one in a deadlock; Postgres then aborts one side and
        // `retry_conflicts` runs it again.
        let mut answers = tx
            .begin_with(vec![
                Op::new(
                    "SELECT p.id FROM runs c JOIN runs p ON p.id = c.parent_run_id
                     WHERE c.id = $1 FOR NO KEY UPDATE OF p",
                    vec![Box::new(run.0)],
                )
                .expect(Expect::Rows),
                Op::new(
                    "UPDATE runs SET status = 'failed', error = $2, finished_at = now(),
                            updated_at = now(), lease_owner = NULL, lease_expires_at = NULL
                     WHERE id = $1 AND status IN ('queued', 'running', 'waiting')
                     RETURNING thread_id, name, parent_tool_call_id, slot_owner",
                    vec![Box::new(run.0), Box::new(error.to_owned())],
                )
                .expect(Expect::Rows),
            ])
            .await?
            .into_iter()
            .map(Answer::rows);
        let parent = answers.next().unwrap_or_default();
        let failed = answers.next().unwrap_or_default();
        let Some(row) = failed.first() else {
            // It had already ended: nothing it did changes anything.
            tx.rollback().await?;
            return Ok(None);
        };
        // Its sub-agents go with it (only once it failed here: an ended
        // run's tree is left as it is).
        let cancel = Op::new(CANCEL_SUB_AGENTS_SQL, vec![Box::new(run.0)]).expect(Expect::Rows);
        let cancelled = tx.exchange_one(cancel).await?;
        let failed = FailedRun {
            run,
            thread: agentenkit_core::ThreadId(row.get(0)),
            name: row.get(1),
            error,
            parent: parent
                .first()
                .map(|r| RunId(r.get(0)))
                .zip(row.get::<_, Option<String>>(2).map(ToolCallId)),
            cancelled: cancelled.iter().map(|r| r.get(0)).collect(),
        };
        let ops = failed.plan(self.notify_rule())?;
        let outbox = returned_outbox(tx.commit_with(ops).await?)?;
        Ok(Some((outbox, failed.thread, row.get(3))))
    }
}

/// Cancels the active runs below run `$1`, returning them.
const CANCEL_SUB_AGENTS_SQL: &str = "
    WITH RECURSIVE tree AS (
        SELECT id FROM runs WHERE parent_run_id = $1
        UNION ALL
        SELECT r.id FROM runs r JOIN tree t ON r.parent_run_id = t.id)
    UPDATE runs SET status = 'cancelled', finished_at = now(), updated_at = now(),
           lease_owner = NULL, lease_expires_at = NULL, error = 'its parent run failed'
    WHERE id IN (SELECT id FROM tree) AND status IN ('queued', 'running', 'waiting')
    RETURNING id";

/// A run just failed, with the sub-agents cancelled with it.
struct FailedRun<'a> {
    run: RunId,
    thread: agentenkit_core::ThreadId,
    name: String,
    error: &'a str,
    /// The parent run and its delegation call, for a child run.
    parent: Option<(RunId, ToolCallId)>,
    cancelled: Vec<uuid::Uuid>,
}

impl FailedRun<'_> {
    /// The rest of the failure: every open request of the runs that ended
    /// is cancelled; a parent's delegation fails and the parent resumes if
    /// that was all it waited on; then the events, last (after every row
    /// lock, see `INSERT_EVENT_SQL`).
    fn plan(&self, notified: crate::event_insert::NotifyRule<'_>) -> Result<Vec<Op>> {
        let mut ended = self.cancelled.clone();
        ended.push(self.run.0);
        let mut ops = vec![crate::calls::cancel_open(&ended)];
        if let Some((parent, call)) = &self.parent {
            let failed = CallEvent::Finish {
                status: ToolCallStatus::Failed,
                result: json!({
                    "error": format!("sub-agent {} failed: {}", self.name, self.error),
                }),
            };
            ops.push(crate::calls::write(*parent, call, &failed)?);
            ops.push(crate::wait::resume_op(*parent));
        }
        for child in &self.cancelled {
            ops.extend(event_ops(
                self.thread,
                Some(RunId(*child)),
                EventType::RunCancelled,
                json!({ "runId": child, "reason": "its parent run failed" }),
                &RowFields::default(),
                notified,
            ));
        }
        ops.extend(event_ops(
            self.thread,
            Some(self.run),
            EventType::RunFailed,
            json!({ "runId": self.run, "error": self.error }),
            &RowFields::default(),
            notified,
        ));
        Ok(ops)
    }
}
