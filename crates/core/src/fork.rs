//! Where a fork of a thread cuts the turn it forks in (docs/conversations.md,
//! "Forking a thread").
//!
//! A fork copies the conversation up to a message. The turns before that
//! message's turn are copied as they are; the turn itself is copied as a
//! run whose journal is a prefix of the original's, so the fork's worker
//! replays what happened before the fork point (no tool that ran runs
//! again) and goes on from there. The prefix ends at a step boundary: a
//! fork at a model's message, or at one of its calls' results, takes that
//! whole step as it stands. Every call with no outcome in the prefix is
//! open at the fork point: its row is copied as newly proposed, so the
//! fork asks its question again (or waits on its job, or starts its
//! sub-agent) instead of carrying an answer over.

use std::collections::HashSet;

use crate::ids::RunId;
use crate::journal::names;

/// What a message of the forked turn is, as the fork point reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnMessage {
    /// The turn's own message, which started it.
    User,
    /// A message sent to the turn while it worked (`onActive: "steer"`).
    Steered,
    /// A model's message (`model:<n>`).
    Assistant,
    /// A call's result.
    Tool,
    /// The intake's question or its answers: part of the turn's own
    /// message, before any model call.
    Intake,
}

/// One entry of the forked turn's journal: its name; for a round of
/// questions (`asked:<call>:<k>`), the row that asks it; for a reply
/// (`tool:<run>:<id>`), whether the call's tool runs with it (an approval
/// granted, a job's answer: not a denial, an expiry or answers).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForkEntry {
    pub name: String,
    pub row: Option<String>,
    pub runs_tool: bool,
}

/// Where the fork cuts the turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkPoint {
    /// How many journal entries (from the first) the fork's run keeps.
    pub entries: usize,
    /// The last message of the turn the fork keeps (ids from the turn's
    /// messages).
    pub last_message: i64,
    /// The fork keeps the whole turn as it stands.
    pub whole: bool,
    /// The call rows the kept entries made, with whether each has its
    /// outcome among them (a row without one is copied as proposed).
    pub rows: Vec<(String, bool)>,
}

/// The fork point of a fork at message `at` of the turn of run `run`, whose
/// journal is `journal` (in order) and whose messages are `messages` (in
/// order, `at` among them, or the last one below it).
pub fn fork_point(
    run: RunId,
    journal: &[ForkEntry],
    messages: &[(i64, TurnMessage)],
    at: i64,
) -> ForkPoint {
    let at_index = messages.iter().rposition(|(id, _)| *id <= at).unwrap_or(0);
    // The intake belongs with the turn's own message.
    let kind = messages.get(at_index).map(|(_, kind)| match kind {
        TurnMessage::Intake => TurnMessage::User,
        kind => *kind,
    });
    let steered = kind == Some(TurnMessage::Steered);
    // The model calls the kept messages hold: the next one is cut, with
    // what comes before it unless the fork point is a message steered to it.
    let models = messages
        .iter()
        .take(at_index + 1)
        .filter(|(_, kind)| *kind == TurnMessage::Assistant)
        .count() as u32;
    // (Before a model call come its budget check, then its steering.)
    let next_model = names::model(models);
    let before = [names::budget(models), names::steer(models)];
    let mut entries = journal
        .iter()
        .position(|e| e.name == next_model || (!steered && before.contains(&e.name)))
        .unwrap_or(journal.len());
    entries = before_unfinished_reply(run, &journal[..entries]);
    // The rest of the fork point's step: its calls' results, or the other
    // messages steered with it.
    let mut last = at_index;
    while let (Some(kind), Some((_, next))) = (kind, messages.get(last + 1)) {
        let same_step = match kind {
            TurnMessage::Assistant | TurnMessage::Tool => *next == TurnMessage::Tool,
            TurnMessage::Steered => *next == TurnMessage::Steered,
            TurnMessage::User | TurnMessage::Intake => *next == TurnMessage::Intake,
        };
        if !same_step {
            break;
        }
        last += 1;
    }
    let kept = &journal[..entries];
    ForkPoint {
        entries,
        last_message: messages.get(last).map_or(at, |(id, _)| *id),
        whole: entries == journal.len() && last + 1 >= messages.len(),
        rows: rows_of(run, kept),
    }
}

/// How many of `journal`'s entries come before the first reply that runs
/// its call's tool without the tool having run with it: the grant the
/// original is acting on right now is not carried into the fork as an
/// answer (it is asked again there). A denial, an expiry or answers are
/// the call's outcome themselves.
fn before_unfinished_reply(run: RunId, journal: &[ForkEntry]) -> usize {
    let calls: HashSet<&str> = journal
        .iter()
        .filter_map(|e| names::call_of_persist(&e.name))
        .collect();
    let ran: HashSet<&str> = journal
        .iter()
        .filter_map(|e| e.name.strip_prefix("exec:"))
        .collect();
    let reply = format!("tool:{run}:");
    journal
        .iter()
        .position(|e| {
            e.runs_tool
                && e.name
                    .strip_prefix(&reply)
                    .is_some_and(|call| calls.contains(call) && !ran.contains(call))
        })
        .unwrap_or(journal.len())
}

/// The rows `kept` made (a call's, or a round of its questions'), in
/// order, each with whether its outcome (`exec:`) or reply is kept too.
fn rows_of(run: RunId, kept: &[ForkEntry]) -> Vec<(String, bool)> {
    let reply = format!("tool:{run}:");
    let settled: HashSet<&str> = kept
        .iter()
        .filter_map(|e| match e.name.as_str() {
            names::INTAKE_ANSWERS => Some(names::INTAKE_CALL_ID),
            name => name
                .strip_prefix("exec:")
                .or_else(|| name.strip_prefix(&reply)),
        })
        .collect();
    kept.iter()
        .filter_map(|e| match e.name.as_str() {
            names::INTAKE_ASK => Some(names::INTAKE_CALL_ID.to_owned()),
            name => names::call_of_persist(name)
                .or(e.row.as_deref().filter(|_| name.starts_with("asked:")))
                .map(str::to_owned)
                .or_else(|| {
                    let n = name.strip_prefix("budget:")?.parse().ok()?;
                    Some(crate::budget::request_id(n))
                }),
        })
        .map(|row| {
            let settled = settled.contains(row.as_str());
            (row, settled)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::TurnMessage::*;
    use super::*;

    fn entries(names: &[&str]) -> Vec<ForkEntry> {
        names
            .iter()
            .map(|name| ForkEntry {
                name: (*name).to_owned(),
                // A reply grants its call unless a test says otherwise.
                runs_tool: name.starts_with("tool:"),
                ..ForkEntry::default()
            })
            .collect()
    }

    fn run() -> RunId {
        RunId(uuid::Uuid::nil())
    }

    fn reply(call: &str) -> String {
        names::tool(run(), &crate::ToolCallId(call.to_owned()))
    }

    /// A turn of two steps: a lookup that ran, then an approval that was
    /// answered and ran, then the final message.
    fn finished_turn() -> (Vec<ForkEntry>, Vec<(i64, TurnMessage)>) {
        let r2 = reply("c2");
        let journal = entries(&[
            "model:0",
            "persist:toolcall:c1",
            "exec:c1",
            "model:1",
            "persist:toolcall:c2",
            &r2,
            "exec:c2",
            "model:2",
        ]);
        let messages = vec![
            (10, User),
            (11, Assistant),
            (12, Tool),
            (13, Assistant),
            (14, Tool),
            (15, Assistant),
        ];
        (journal, messages)
    }

    #[test]
    fn a_fork_at_a_models_message_keeps_its_step_with_the_results() {
        let (journal, messages) = finished_turn();
        let point = fork_point(run(), &journal, &messages, 11);
        assert_eq!(point.entries, 3);
        assert_eq!(point.last_message, 12);
        assert!(!point.whole);
        assert_eq!(point.rows, vec![("c1".to_owned(), true)]);
        // At the result itself: the same.
        assert_eq!(fork_point(run(), &journal, &messages, 12), point);
    }

    #[test]
    fn a_fork_at_the_turns_message_keeps_nothing_the_model_did() {
        let (journal, messages) = finished_turn();
        let point = fork_point(run(), &journal, &messages, 10);
        assert_eq!((point.entries, point.last_message), (0, 10));
        assert!(point.rows.is_empty());
    }

    #[test]
    fn a_fork_at_the_last_message_keeps_the_whole_turn() {
        let (journal, messages) = finished_turn();
        let point = fork_point(run(), &journal, &messages, 15);
        assert!(point.whole);
        assert_eq!(point.entries, journal.len());
        assert_eq!(
            point.rows,
            vec![("c1".to_owned(), true), ("c2".to_owned(), true)]
        );
    }

    #[test]
    fn a_parked_approval_is_open_in_the_fork() {
        let journal = entries(&["model:0", "persist:toolcall:c1", "persist:toolcall:c2"]);
        let messages = vec![(1, User), (2, Assistant)];
        let point = fork_point(run(), &journal, &messages, 2);
        assert!(point.whole);
        assert_eq!(
            point.rows,
            vec![("c1".to_owned(), false), ("c2".to_owned(), false)]
        );
    }

    #[test]
    fn an_answer_whose_tool_has_not_run_is_not_carried_over() {
        let r1 = reply("c1");
        let journal = entries(&["model:0", "persist:toolcall:c1", &r1]);
        let messages = vec![(1, User), (2, Assistant)];
        let point = fork_point(run(), &journal, &messages, 2);
        assert_eq!(point.entries, 2);
        assert_eq!(point.rows, vec![("c1".to_owned(), false)]);
    }

    #[test]
    fn a_denial_is_the_calls_outcome_and_no_cut() {
        let r1 = reply("c1");
        let mut journal = entries(&["model:0", "persist:toolcall:c1", &r1, "model:1"]);
        journal[2].runs_tool = false;
        let messages = vec![(1, User), (2, Assistant), (3, Tool), (4, Assistant)];
        let point = fork_point(run(), &journal, &messages, 4);
        assert!(point.whole);
        assert_eq!(point.rows, vec![("c1".to_owned(), true)]);
        let at_call = fork_point(run(), &journal, &messages, 2);
        assert_eq!((at_call.entries, at_call.last_message), (3, 3));
    }

    #[test]
    fn the_intake_goes_with_the_turns_message_and_a_budget_request_is_a_row() {
        let answered = reply("budget~1");
        let journal = entries(&[
            "intake:ask",
            "intake:answers",
            "model:0",
            "budget:1",
            &answered,
            "model:1",
            "budget:2",
        ]);
        let messages = vec![
            (1, User),
            (2, Intake),
            (3, Intake),
            (4, Assistant),
            (5, Assistant),
        ];
        let at_user = fork_point(run(), &journal, &messages, 1);
        assert_eq!((at_user.entries, at_user.last_message), (2, 3));
        let at_intake = fork_point(run(), &journal, &messages, 2);
        assert_eq!(at_intake, at_user);
        let at_first = fork_point(run(), &journal, &messages, 4);
        assert_eq!((at_first.entries, at_first.last_message), (3, 4));
        // At the last message: the open request before the next model call
        // is left to be asked again, live.
        let last = fork_point(run(), &journal, &messages, 5);
        assert_eq!(last.entries, 6);
        assert_eq!(
            last.rows,
            vec![("intake".to_owned(), true), ("budget~1".to_owned(), true)]
        );
    }

    #[test]
    fn a_round_of_questions_is_a_row_settled_by_its_reply() {
        let reply_row = reply("c1~1");
        let mut journal = entries(&["model:0", "persist:toolcall:c1", "asked:c1:1"]);
        journal[2].row = Some("c1~1".to_owned());
        let messages = vec![(1, User), (2, Assistant)];
        let open = fork_point(run(), &journal, &messages, 2);
        assert_eq!(
            open.rows,
            vec![("c1".to_owned(), false), ("c1~1".to_owned(), false)]
        );
        journal.extend(entries(&[&reply_row]));
        let answered = fork_point(run(), &journal, &messages, 2);
        assert_eq!(answered.entries, 4, "a round's reply is no call's answer");
        assert_eq!(answered.rows[1], ("c1~1".to_owned(), true));
    }

    #[test]
    fn steered_messages_go_with_the_step_they_join() {
        let journal = entries(&[
            "model:0",
            "persist:toolcall:c1",
            "exec:c1",
            "steer:1",
            "model:1",
        ]);
        let messages = vec![
            (1, User),
            (2, Assistant),
            (3, Tool),
            (4, Steered),
            (5, Steered),
            (6, Assistant),
        ];
        // At the result: before the steering.
        let at_result = fork_point(run(), &journal, &messages, 3);
        assert_eq!((at_result.entries, at_result.last_message), (3, 3));
        // At a steered message: with it and the others sent with it.
        let at_steered = fork_point(run(), &journal, &messages, 4);
        assert_eq!((at_steered.entries, at_steered.last_message), (4, 5));
    }

    #[test]
    fn the_intake_is_a_row_settled_by_its_answers() {
        let journal = entries(&["intake:ask"]);
        let messages = vec![(1, User)];
        let open = fork_point(run(), &journal, &messages, 1);
        assert_eq!(open.rows, vec![("intake".to_owned(), false)]);
        let journal = entries(&["intake:ask", "intake:answers", "model:0"]);
        let messages = vec![(1, User), (2, Assistant)];
        let answered = fork_point(run(), &journal, &messages, 1);
        assert_eq!(answered.entries, 2);
        assert_eq!(answered.rows, vec![("intake".to_owned(), true)]);
    }

    #[test]
    fn an_empty_turn_is_kept_whole() {
        let point = fork_point(run(), &[], &[(7, User)], 7);
        assert!(point.whole);
        assert_eq!((point.entries, point.last_message), (0, 7));
    }

    mod replayable {
        use super::*;
        use proptest::prelude::*;

        /// A turn as its worker writes it: per step, the messages steered
        /// before its model call and its calls (0: a function; 1, 2: an
        /// approval, granted or denied, settled after the step's functions
        /// ran); an unfinished last step leaves its approvals open.
        fn turn(
            steps: &[(usize, Vec<u8>)],
            answered: bool,
        ) -> (Vec<ForkEntry>, Vec<(i64, TurnMessage)>) {
            let mut names: Vec<String> = Vec::new();
            let mut denied: Vec<String> = Vec::new();
            let mut messages = vec![User];
            for (n, (steered, calls)) in steps.iter().enumerate() {
                if *steered > 0 {
                    names.push(names::steer(n as u32));
                    messages.extend(std::iter::repeat_n(Steered, *steered));
                }
                names.push(names::model(n as u32));
                messages.push(Assistant);
                for (k, call) in calls.iter().enumerate() {
                    names.push(format!("persist:toolcall:c{n}_{k}"));
                    if *call == 0 {
                        names.push(format!("exec:c{n}_{k}"));
                        messages.push(Tool);
                    }
                }
                let open = n + 1 == steps.len() && !answered;
                for (k, call) in calls.iter().enumerate().filter(|(_, c)| **c > 0) {
                    if !open {
                        names.push(reply(&format!("c{n}_{k}")));
                        if *call == 1 {
                            names.push(format!("exec:c{n}_{k}"));
                        } else {
                            denied.push(reply(&format!("c{n}_{k}")));
                        }
                        messages.push(Tool);
                    }
                }
            }
            let mut journal = entries(&names.iter().map(String::as_str).collect::<Vec<_>>());
            for entry in &mut journal {
                entry.runs_tool &= !denied.contains(&entry.name);
            }
            let messages = messages
                .into_iter()
                .enumerate()
                .map(|(i, kind)| (i as i64 + 1, kind))
                .collect();
            (journal, messages)
        }

        proptest! {
            /// Wherever a fork is made, the messages it keeps and the
            /// journal it keeps tell the same story: a model message per
            /// model entry, a result per outcome, each steered message in
            /// its `steer:` entry, so the fork's replay rebuilds exactly the
            /// conversation copied; and the fork point itself is kept.
            #[test]
            fn the_kept_messages_are_what_the_kept_journal_replays(
                steps in proptest::collection::vec(
                    (0usize..3, proptest::collection::vec(0u8..3, 0..3)),
                    1..5,
                ),
                answered in any::<bool>(),
            ) {
                let (journal, messages) = turn(&steps, answered);
                let steered_per_entry: Vec<usize> = steps.iter().map(|(s, _)| *s).collect();
                for &(at, _) in &messages {
                    let point = fork_point(run(), &journal, &messages, at);
                    prop_assert!(point.last_message >= at);
                    let kept = &journal[..point.entries];
                    let upto = |kind| messages.iter()
                        .filter(|(id, k)| *id <= point.last_message && *k == kind)
                        .count();
                    let named = |prefix: &str| kept.iter().filter(|e| e.name.starts_with(prefix)).count();
                    prop_assert_eq!(upto(Assistant), named("model:"));
                    let denials = kept.iter().filter(|e| e.name.starts_with("tool:") && !e.runs_tool).count();
                    prop_assert_eq!(upto(Tool), named("exec:") + denials);
                    let steered: usize = kept.iter()
                        .filter_map(|e| e.name.strip_prefix("steer:"))
                        .map(|n| steered_per_entry[n.parse::<usize>().unwrap()])
                        .sum();
                    prop_assert_eq!(upto(Steered), steered);
                    // Every kept call's row is kept, open exactly when its
                    // outcome is not.
                    for (row, settled) in &point.rows {
                        let outcome = kept.iter().any(|e| {
                            e.name == format!("exec:{row}") || e.name == reply(row)
                        });
                        prop_assert_eq!(*settled, outcome);
                    }
                }
                let last = messages.last().unwrap().0;
                prop_assert!(fork_point(run(), &journal, &messages, last).whole);
            }
        }
    }
}
