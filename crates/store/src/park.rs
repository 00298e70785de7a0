//! Parking: a proposed call becomes an open request (the run's commit
//! then ends its segment with the run waiting, see `lease::fence`). A call
//! proposed and parked in the same commit is inserted once, already open:
//! see [`ParkedAtOnce`]. A self-parking tool's request is kept on its row
//! first, the moment the tool returns it.

use agentenkit_core::{CallEvent, RunId, ThreadId};

use crate::calls::{insert_tool_call, NewCall};
use crate::change::Change;
use crate::format::journal_insert::StoredJournal;
use crate::pipeline::Op;

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
