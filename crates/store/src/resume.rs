//! Resuming a waiting run: once none of its requests and none of its child
//! runs is open, the run is queued with its next segment, and the segment
//! goes to the outbox, in one statement. Every path that settles what a run
//! waits on (an answer, an expiry, a child run that ends or fails) ends its
//! transaction with it, after its own changes and while holding the run's
//! row lock, so that of two settling at once exactly one sees nothing left
//! open.

use agentenkit_core::{CallEvent, RunId, ToolCallId, ToolCallStatus};
use serde_json::Value;

use crate::pipeline::{Expect, Op};
use crate::Result;

/// Queues run `$1` with its next segment if it waits on nothing more, and
/// writes the segment's outbox row, returning `(id, key)`; no row when the
/// run still waits (or is not waiting). The key is
/// `QueueMessage::outbox_key`'s, which `outbox::returned_rows` reads back (and a
/// test holds to).
const RESUME_IF_SETTLED_SQL: &str = "
    WITH resumed AS (
        UPDATE runs SET status = 'queued', segment_seq = segment_seq + 1, updated_at = now()
        WHERE id = $1 AND status = 'waiting'
          -- the run's calls by its key (no partial index of open
          -- requests matches `run_id = $1` alone, so none is read whole)
          AND (SELECT count(*) FILTER (WHERE status = 'pending_approval')
               FROM tool_calls WHERE run_id = $1) = 0
          AND NOT EXISTS (SELECT 1 FROM runs child
                          WHERE child.parent_run_id = $1
                            AND child.status IN ('queued', 'running', 'waiting'))
        RETURNING segment_seq)
    INSERT INTO outbox (delay_ms, key, due_at)
    SELECT 0, 'segment:' || $1::uuid::text || ':' || segment_seq, now() FROM resumed
    RETURNING id, key";

/// The resume of `run` as a pipelined statement, after the changes of its
/// transaction that may have settled the run's last wait; its answer's
/// rows go to `outbox::returned_rows`.
pub(crate) fn resume_op(run: RunId) -> Op {
    Op::new(RESUME_IF_SETTLED_SQL, vec![Box::new(run.0)]).expect(Expect::Rows)
}

/// A child run ended: its parent's delegation row settles, and the parent
/// resumes if nothing else of it is open. Pipelined after the child's own
/// fence.
pub(crate) fn finish_delegation_ops(
    parent: RunId,
    call_id: &ToolCallId,
    status: ToolCallStatus,
    result: &Value,
) -> Result<Vec<Op>> {
    Ok(vec![
        // Lock the parent like an answer does, so that two children
        // finishing at once see each other and exactly one resumes it. NO
        // KEY UPDATE, not UPDATE: each sibling already holds a KEY SHARE
        // lock on the parent (the foreign-key check of its own row), and
        // FOR UPDATE would wait on every sibling's, which wait on ours.
        Op::new(
            "SELECT 1 FROM runs WHERE id = $1 FOR NO KEY UPDATE",
            vec![Box::new(parent.0)],
        ),
        crate::calls::write(
            parent,
            call_id,
            &CallEvent::Finish {
                status,
                result: result.clone(),
            },
        )?,
        resume_op(parent),
    ])
}
