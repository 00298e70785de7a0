//! A run's wait, both ends of it.
//!
//! Parking: a proposed call becomes an open request (the run's commit then
//! ends its segment with the run waiting, see `lease::fence`). A call
//! proposed and parked in the same commit is inserted once, already open:
//! see [`ParkedAtOnce`]. A self-parking tool's request is kept on its row
//! first, the moment the tool returns it.
//!
//! Resuming a waiting run: once none of its requests and none of its child
//! runs is open, the run is queued with its next segment, and the segment
//! goes to the outbox, in one statement. Every path that settles what a run
//! waits on (an answer, an expiry, a child run that ends or fails) ends its
//! transaction with it, after its own changes and while holding the run's
//! row lock, so that of two settling at once exactly one sees nothing left
//! open.

use agentenkit_core::{CallEvent, RunId, ThreadId, ToolCallId, ToolCallStatus};
use serde_json::Value;

use crate::calls::{insert_tool_call, NewCall};
use crate::change::Change;
use crate::format::encode::StoredJournal;
use crate::pipeline::{Expect, Op};
use crate::Result;

/// Calls proposed and parked in the same commit (an approval proposed in
/// the step that parks on it): each is inserted once, already open, instead
/// of inserted as proposed and updated in place. The update left a dead
/// version of the row and a second entry in each of its indexes (its status
/// is in their predicates, so it could not be HOT) for every parked call.
pub(crate) struct ParkedAtOnce<'a> {
    /// `(propose, park)` of each folded call.
    calls: Vec<(&'a Change, &'a Change)>,
}

impl<'a> ParkedAtOnce<'a> {
    /// The calls whose proposal and park are both in `changes` with nothing
    /// else of theirs in between. (A self-parking tool's request is
    /// committed before its tool runs, after its proposal: such a call is
    /// never folded.)
    pub(crate) fn find(changes: &'a [Change]) -> Self {
        let mut calls = Vec::new();
        for (at, change) in changes.iter().enumerate() {
            let Change::ProposeToolCall { id, .. } = change else {
                continue;
            };
            for later in &changes[at + 1..] {
                match later {
                    Change::Call {
                        id: other,
                        event: CallEvent::Park { .. },
                    } if other == id => {
                        calls.push((change, later));
                        break;
                    }
                    Change::Call { id: other, .. } | Change::ProposeToolCall { id: other, .. }
                        if other == id =>
                    {
                        break;
                    }
                    _ => {}
                }
            }
        }
        ParkedAtOnce { calls }
    }

    /// The park of a folded call: its insert says it.
    pub(crate) fn folds(&self, change: &Change) -> bool {
        self.calls
            .iter()
            .any(|(_, park)| std::ptr::eq(*park, change))
    }

    /// The one insert of a folded call, for its proposal.
    pub(crate) fn insert_op(
        &self,
        run: RunId,
        thread: ThreadId,
        change: &Change,
        journal: &StoredJournal,
    ) -> Option<Op> {
        let (propose, park) = self
            .calls
            .iter()
            .find(|(propose, _)| std::ptr::eq(*propose, change))?;
        let (
            Change::ProposeToolCall {
                id,
                name,
                arguments: proposed,
                ..
            },
            Change::Call {
                event:
                    CallEvent::Park {
                        kind,
                        reason,
                        arguments,
                        expires_at,
                    },
                ..
            },
        ) = (propose, park)
        else {
            return None;
        };
        // The park's arguments, when it changed them, are the row's own.
        let (arguments, arguments_position) = match arguments {
            Some(changed) if changed != proposed => (Some(changed.clone()), None),
            _ => journal.call_arguments(id.as_str(), proposed),
        };
        Some(insert_tool_call(
            run,
            thread,
            NewCall {
                id,
                name,
                kind: *kind,
                stored: (arguments, arguments_position),
                parked: Some((reason, *expires_at)),
            },
        ))
    }
}

/// Queues run `$1` with its next segment if it waits on nothing more, and
/// writes the segment's outbox row, returning `(id, key)`; no row when the
/// run still waits (or is not waiting), or was held for a slot of its caps
/// (`shares`: a held run's segment is written when it is admitted). The
/// key is `QueueMessage::outbox_key`'s, which `outbox::returned_rows` reads
/// back (and a test holds to).
const RESUME_IF_SETTLED_SQL: &str = "
    WITH resumed AS (
        UPDATE runs SET status = 'queued', segment_seq = segment_seq + 1, updated_at = now(),
               held_since = CASE WHEN slot_owner IS NULL THEN NULL
                                 WHEN run_slot_is_free(id, slot_owner, slot_owner_cap,
                                                       slot_key, slot_key_cap) THEN NULL
                                 ELSE now() END
        WHERE id = $1 AND status = 'waiting'
          -- the run's calls by its key (no partial index of open
          -- requests matches `run_id = $1` alone, so none is read whole)
          AND (SELECT count(*) FILTER (WHERE status = 'pending_approval')
               FROM tool_calls WHERE run_id = $1) = 0
          AND NOT EXISTS (SELECT 1 FROM runs child
                          WHERE child.parent_run_id = $1
                            AND child.status IN ('queued', 'running', 'waiting'))
        RETURNING segment_seq, held_since)
    INSERT INTO outbox (delay_ms, key, due_at)
    SELECT 0, 'segment:' || $1::uuid::text || ':' || segment_seq, now() FROM resumed
    WHERE held_since IS NULL
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_changes::{park, propose};
    use agentenkit_core::{ToolCallId, ToolCallStatus};
    use serde_json::json;

    fn journal_of(changes: &[Change]) -> StoredJournal<'_> {
        StoredJournal::of(changes).expect("consecutive")
    }

    fn ids() -> (RunId, ThreadId) {
        (RunId::new(), ThreadId::new())
    }

    #[test]
    fn a_call_proposed_and_parked_in_one_commit_is_one_insert() {
        let changes = [propose("c1"), park("c1"), Change::WaitRun];
        let folded = ParkedAtOnce::find(&changes);
        let (run, thread) = ids();
        let insert = folded
            .insert_op(run, thread, &changes[0], &journal_of(&changes))
            .expect("folded");
        assert!(
            insert.sql().contains("INSERT INTO tool_calls"),
            "{}",
            insert.sql()
        );
        assert!(folded.folds(&changes[1]));
        assert!(!folded.folds(&changes[0]) && !folded.folds(&changes[2]));
    }

    #[test]
    fn a_self_parking_tools_request_between_keeps_the_update() {
        let request = Change::Call {
            id: ToolCallId("c1".into()),
            event: CallEvent::RecordParkRequest {
                request: json!({"reason": "job"}),
            },
        };
        let changes = [propose("c1"), request, park("c1")];
        let folded = ParkedAtOnce::find(&changes);
        assert!(!folded.folds(&changes[1]) && !folded.folds(&changes[2]));
        let (run, thread) = ids();
        assert!(folded
            .insert_op(run, thread, &changes[0], &journal_of(&changes))
            .is_none());
    }

    #[test]
    fn a_park_of_a_call_proposed_earlier_or_settled_between_stays_an_update() {
        let (run, thread) = ids();
        // proposed in an earlier commit
        let only_park = [park("c1"), Change::WaitRun];
        let folded = ParkedAtOnce::find(&only_park);
        assert!(!folded.folds(&only_park[0]));
        // another call's park does not fold this one
        let other = [propose("c1"), park("c2")];
        let folded = ParkedAtOnce::find(&other);
        assert!(folded
            .insert_op(run, thread, &other[0], &journal_of(&other))
            .is_none());
        assert!(!folded.folds(&other[1]));
        // something else happened to the row in between
        let settled = [
            propose("c1"),
            Change::Call {
                id: ToolCallId("c1".into()),
                event: CallEvent::Finish {
                    status: ToolCallStatus::Executed,
                    result: json!(1),
                },
            },
            park("c1"),
        ];
        let folded = ParkedAtOnce::find(&settled);
        assert!(folded
            .insert_op(run, thread, &settled[0], &journal_of(&settled))
            .is_none());
        assert!(!folded.folds(&settled[2]));
    }
}
