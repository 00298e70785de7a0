//! The journal: an append-only list of `(position, name, value)` per run, and
//! the replay cursor that makes a run a deterministic function over it.
//!
//! Every effect of a run goes through a checkpoint. [`Replay::next`] says
//! whether the checkpoint is already in the journal (replay its value, do not
//! run the effect) or is new (run the effect, then record it at the position
//! returned). A journal entry whose name differs from the one asked for means
//! the code changed under a running run: a non-determinism error.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{RunId, ToolCallId};
use crate::Error;

/// The checkpoint names of SPEC §4; these strings are an external contract.
pub mod names {
    use super::*;

    pub const INTAKE_ASK: &str = "intake:ask";
    pub const INTAKE_ANSWERS: &str = "intake:answers";
    /// The id of the row that asks an agent's intake questions.
    pub const INTAKE_CALL_ID: &str = "intake";

    pub fn model(n: u32) -> String {
        format!("model:{n}")
    }
    pub fn persist_toolcall(call: &ToolCallId) -> String {
        format!("persist:toolcall:{call}")
    }
    /// The call id of a `persist:toolcall:<callId>` name.
    pub fn call_of_persist(name: &str) -> Option<&str> {
        name.strip_prefix("persist:toolcall:")
    }
    pub fn stream_elicitation(call: &ToolCallId) -> String {
        format!("stream:elicitation:{call}")
    }
    pub fn tool(run: RunId, call: &ToolCallId) -> String {
        format!("tool:{run}:{call}")
    }
    pub fn exec(call: &ToolCallId) -> String {
        format!("exec:{call}")
    }
    /// Round `round` (1, 2, …) of the questions a running tool asked (an
    /// MCP server's `input_required`): the question set, the tool's own
    /// state to be handed back, and the id of the row that asks it. A
    /// call whose tool never asks has none, so its journal is as before.
    pub fn asked(call: &ToolCallId, round: u32) -> String {
        format!("asked:{call}:{round}")
    }
    /// Messages sent to the run while it worked (`onActive: "steer"`),
    /// joining the conversation right before model call `n`: their texts,
    /// in the order they were sent. A run nobody steers has none, so its
    /// journal is as before.
    pub fn steer(n: u32) -> String {
        format!("steer:{n}")
    }
    /// Whether `name` is `<prefix>:<n>` (`steer:<n>`, `budget:<n>`),
    /// checked without making the name.
    pub fn is_numbered(name: &str, prefix: &str, n: u32) -> bool {
        name.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix(':'))
            .is_some_and(|number| number.parse::<u32>().ok() == Some(n) && !number.starts_with('+'))
    }
    /// The run's budget was used up before model call `n`: the request it
    /// parked with (`agentenkit_core::budget::Exhausted`). A run within
    /// its budget has none, so its journal is as before.
    pub fn budget(n: u32) -> String {
        format!("budget:{n}")
    }
    /// More budget granted by the answer to `budget:<n>`'s request: the
    /// scope and how much each limit rose
    /// (`agentenkit_core::budget::Grant`), which a thread's other runs add
    /// up.
    pub fn budget_granted(n: u32) -> String {
        format!("budget:{n}:granted")
    }
    /// The run moved to agent version `hash` here (an upgrade, on
    /// purpose): not a checkpoint of the loop, which steps over it.
    pub fn version(hash: &str) -> String {
        format!("version:{hash}")
    }
    /// The version of a `version:<hash>` name.
    pub fn version_of(name: &str) -> Option<&str> {
        name.strip_prefix("version:")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JournalEntry {
    pub position: u32,
    pub name: String,
    pub value: Value,
}

/// What the journal says about the next checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayStep {
    /// Already recorded: use this value, do not run the effect.
    Replayed(Value),
    /// New: run the effect and record its value at `position`.
    Record { position: u32 },
}

/// A cursor over a run's journal as loaded at the start of a segment.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    entries: Vec<JournalEntry>,
    cursor: usize,
}

impl Replay {
    /// `entries` must be the run's whole journal in position order.
    pub fn new(mut entries: Vec<JournalEntry>) -> Self {
        entries.sort_by_key(|e| e.position);
        Self { entries, cursor: 0 }
    }

    /// Where the next checkpoint is read from: past the version switches
    /// at the cursor, which are records of the run, not checkpoints.
    fn next_index(&self) -> usize {
        let mut index = self.cursor;
        while self
            .entries
            .get(index)
            .is_some_and(|e| names::version_of(&e.name).is_some())
        {
            index += 1;
        }
        index
    }

    /// The position the next checkpoint occupies.
    pub fn position(&self) -> u32 {
        self.next_index() as u32
    }

    /// True while checkpoints are still being read back rather than run.
    pub fn is_replaying(&self) -> bool {
        self.next_index() < self.entries.len()
    }

    /// Asks for the checkpoint `name` at the next position.
    pub fn next(&mut self, name: &str) -> Result<ReplayStep, Error> {
        self.cursor = self.next_index();
        let position = self.position();
        match self.entries.get(self.cursor) {
            Some(entry) if entry.name == name => {
                self.cursor += 1;
                Ok(ReplayStep::Replayed(entry.value.clone()))
            }
            Some(entry) => Err(Error::NonDeterminism {
                position,
                expected: name.to_owned(),
                found: entry.name.clone(),
            }),
            None => Ok(ReplayStep::Record { position }),
        }
    }

    /// The name of the next entry to read back, if any (a look that
    /// allocates nothing, for the checks made at every step).
    pub fn next_name(&self) -> Option<&str> {
        self.entries.get(self.next_index()).map(|e| e.name.as_str())
    }

    /// True when the next entry is `name` (a replay); false when there is
    /// no next entry; a non-determinism error when the next entry is
    /// another checkpoint.
    pub fn is_next(&self, name: &str) -> Result<bool, Error> {
        match self.entries.get(self.next_index()) {
            Some(entry) if entry.name == name => Ok(true),
            Some(entry) => Err(Error::NonDeterminism {
                position: self.position(),
                expected: name.to_owned(),
                found: entry.name.clone(),
            }),
            None => Ok(false),
        }
    }

    /// Records the value of a new checkpoint (after its effect ran and its
    /// entry was committed), so the cursor moves past it.
    pub fn recorded(&mut self, entry: JournalEntry) {
        debug_assert_eq!(entry.position, self.position());
        self.cursor = self.next_index();
        self.entries.push(entry);
        self.cursor += 1;
    }

    /// Entries read so far, in order.
    pub fn entries(&self) -> &[JournalEntry] {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn entry(position: u32, name: &str, value: Value) -> JournalEntry {
        JournalEntry {
            position,
            name: name.into(),
            value,
        }
    }

    #[test]
    fn a_numbered_name_is_recognised_without_being_made() {
        assert!(names::is_numbered("budget:3", "budget", 3));
        assert!(names::is_numbered(&names::steer(12), "steer", 12));
        for other in [
            "budget:4",
            "budget:3:granted",
            "budgets:3",
            "budget:+3",
            "model:3",
            "budget3",
        ] {
            assert!(!names::is_numbered(other, "budget", 3), "{other}");
        }
    }

    #[test]
    fn names_are_the_spec_strings() {
        let run: RunId = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b".parse().unwrap();
        let c1 = ToolCallId::from("c1");
        assert_eq!(names::model(0), "model:0");
        assert_eq!(names::persist_toolcall(&c1), "persist:toolcall:c1");
        assert_eq!(
            names::call_of_persist(&names::persist_toolcall(&c1)),
            Some("c1")
        );
        assert_eq!(names::call_of_persist("exec:c1"), None);
        assert_eq!(names::stream_elicitation(&c1), "stream:elicitation:c1");
        assert_eq!(
            names::tool(run, &c1),
            "tool:0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:c1"
        );
        assert_eq!(names::exec(&c1), "exec:c1");
        assert_eq!(names::INTAKE_ASK, "intake:ask");
        assert_eq!(names::INTAKE_ANSWERS, "intake:answers");
    }

    #[test]
    fn replays_recorded_values_then_asks_to_record() {
        let mut replay = Replay::new(vec![
            entry(1, "exec:c1", json!("ok")),
            entry(0, "model:0", json!({"text": "hi"})),
        ]);
        assert!(replay.is_replaying());
        assert_eq!(
            replay.next("model:0"),
            Ok(ReplayStep::Replayed(json!({"text": "hi"})))
        );
        assert_eq!(
            replay.next("exec:c1"),
            Ok(ReplayStep::Replayed(json!("ok")))
        );
        assert!(!replay.is_replaying());
        assert_eq!(
            replay.next("model:1"),
            Ok(ReplayStep::Record { position: 2 })
        );
        // Asking again without recording is still position 2: nothing moved.
        assert_eq!(
            replay.next("model:1"),
            Ok(ReplayStep::Record { position: 2 })
        );
        replay.recorded(entry(2, "model:1", json!(null)));
        assert_eq!(replay.position(), 3);
    }

    #[test]
    fn version_switches_are_stepped_over_wherever_they_are() {
        let mut replay = Replay::new(vec![
            entry(0, "model:0", json!(0)),
            entry(1, &names::version("v2"), json!({ "from": "v1" })),
            entry(2, "exec:c1", json!("ok")),
            entry(3, &names::version("v3"), json!({ "from": "v2" })),
        ]);
        assert_eq!(replay.next("model:0"), Ok(ReplayStep::Replayed(json!(0))));
        assert_eq!(replay.is_next("exec:c1"), Ok(true));
        assert_eq!(
            replay.next("exec:c1"),
            Ok(ReplayStep::Replayed(json!("ok")))
        );
        // Only a switch is left: nothing more to read back, and the next
        // checkpoint goes after it.
        assert!(!replay.is_replaying());
        assert_eq!(
            replay.next("model:1"),
            Ok(ReplayStep::Record { position: 4 })
        );
        replay.recorded(entry(4, "model:1", json!(1)));
        assert_eq!(replay.position(), 5);
        assert_eq!(names::version_of("version:v2"), Some("v2"));
        assert_eq!(names::version_of("exec:c1"), None);
    }

    #[test]
    fn a_different_name_at_a_recorded_position_is_non_determinism() {
        let mut replay = Replay::new(vec![entry(0, "model:0", json!(1))]);
        assert_eq!(
            replay.next("intake:ask"),
            Err(Error::NonDeterminism {
                position: 0,
                expected: "intake:ask".into(),
                found: "model:0".into()
            })
        );
    }

    proptest! {
        /// Replaying a journal with the names that wrote it returns every
        /// value in order and then asks to record at the end.
        #[test]
        fn replay_returns_what_was_recorded(values in prop::collection::vec(any::<i64>(), 0..40)) {
            let mut writer = Replay::new(vec![]);
            for (i, v) in values.iter().enumerate() {
                let name = names::model(i as u32);
                match writer.next(&name).unwrap() {
                    ReplayStep::Record { position } => writer.recorded(entry(position, &name, json!(v))),
                    ReplayStep::Replayed(_) => prop_assert!(false, "nothing to replay yet"),
                }
            }
            let mut reader = Replay::new(writer.entries().to_vec());
            for (i, v) in values.iter().enumerate() {
                prop_assert_eq!(reader.next(&names::model(i as u32)).unwrap(), ReplayStep::Replayed(json!(v)));
            }
            prop_assert_eq!(reader.next("model:x").unwrap(), ReplayStep::Record { position: values.len() as u32 });
        }

        /// Version switches inserted anywhere (an upgrade appends one at the
        /// end of a parked run's journal) change no checkpoint's value:
        /// the run replays the same, and records after the last entry.
        #[test]
        fn switches_anywhere_replay_the_same(
            values in prop::collection::vec(any::<i64>(), 0..30),
            switches in prop::collection::vec(0usize..31, 0..4),
        ) {
            let mut names_values: Vec<(String, Value)> = values
                .iter()
                .enumerate()
                .map(|(i, v)| (names::model(i as u32), json!(v)))
                .collect();
            for (n, at) in switches.iter().enumerate() {
                let at = (*at).min(names_values.len());
                names_values.insert(at, (names::version(&format!("v{n}")), json!(n)));
            }
            let journal: Vec<JournalEntry> = names_values
                .iter()
                .enumerate()
                .map(|(position, (name, value))| entry(position as u32, name, value.clone()))
                .collect();
            let mut reader = Replay::new(journal.clone());
            for (i, v) in values.iter().enumerate() {
                prop_assert_eq!(reader.next(&names::model(i as u32)).unwrap(), ReplayStep::Replayed(json!(v)));
            }
            prop_assert!(!reader.is_replaying());
            prop_assert_eq!(reader.next("model:x").unwrap(), ReplayStep::Record { position: journal.len() as u32 });
        }
    }
}
