//! How a commit's journal entries are written (packed together:
//! `format::journal`), and which call rows and messages of the commit find
//! what they hold in one of its model entries (read back through the views `tool_calls_whole` and `messages_whole`).

use std::collections::BTreeMap;

use agentenkit_core::RunId;
use serde_json::Value;

use crate::change::Change;
use crate::format::journal::{self as stored_journal, NewEntry};
use crate::pipeline::Op;
use crate::{Error, Result};

/// The stored value of each journal entry of one commit, by position:
/// packing looks at the commit's entries together, and one insert writes
/// them all.
pub(crate) struct StoredJournal<'a> {
    /// Name, stored value and packing of each entry not yet written.
    values: BTreeMap<u32, (&'a str, Value, i16)>,
    /// The model entry's position of each call proposed in the commit
    /// with the arguments that entry holds.
    proposed_in: BTreeMap<String, u32>,
    /// The commit's model entries, for the messages they hold.
    models: Vec<NewEntry<'a>>,
}

impl<'a> StoredJournal<'a> {
    pub(crate) fn of(changes: &'a [Change]) -> Result<Self> {
        let entries: Vec<NewEntry<'a>> = changes
            .iter()
            .filter_map(|c| match c {
                Change::Journal {
                    position,
                    name,
                    value,
                } => Some(NewEntry {
                    position: *position,
                    name,
                    value,
                }),
                _ => None,
            })
            .collect();
        let stored = stored_journal::pack(&entries).map_err(|e| Error::Corrupt(e.to_string()))?;
        // `pack` refuses positions that are not consecutive (one written
        // twice among them), so each position is here once.
        let values = entries
            .iter()
            .zip(stored)
            .map(|(entry, (value, packed))| (entry.position, (entry.name, value, packed)))
            .collect();
        let proposed_in = changes
            .iter()
            .filter_map(|c| match c {
                Change::ProposeToolCall { id, arguments, .. } => {
                    stored_journal::proposing_entry(&entries, id.as_str(), arguments)
                        .map(|at| (id.as_str().to_owned(), at))
                }
                _ => None,
            })
            .collect();
        Ok(StoredJournal {
            values,
            proposed_in,
            models: entries
                .iter()
                .copied()
                .filter(|e| e.name.starts_with("model:"))
                .collect(),
        })
    }

    /// How call `call_id`, proposed in this commit, stores `arguments`:
    /// `(None, Some(position))` when the model entry at `position` holds
    /// them, else `(Some(arguments), None)`.
    pub(crate) fn call_arguments(
        &self,
        call_id: &str,
        arguments: &Value,
    ) -> (Option<Value>, Option<i32>) {
        match self.proposed_in.get(call_id) {
            Some(at) => (None, Some(*at as i32)),
            None => (Some(arguments.clone()), None),
        }
    }

    /// How a message of this commit stores `body`: `(None, Some(position))`
    /// when the model entry at `position` holds it, else `(Some(body), None)`.
    pub(crate) fn message_body(&self, body: Value) -> (Option<Value>, Option<i32>) {
        match stored_journal::message_entry(&self.models, &body) {
            Some(at) => (None, Some(at as i32)),
            None => (Some(body), None),
        }
    }

    /// The insert of every entry of the commit, in one statement: `Some`
    /// the first time, `None` once they are written (or when it has none).
    pub(crate) fn insert_op(&mut self, run: RunId) -> Option<Op> {
        if self.values.is_empty() {
            return None;
        }
        let values = std::mem::take(&mut self.values);
        let mut positions = Vec::with_capacity(values.len());
        let mut names = Vec::with_capacity(values.len());
        let mut stored = Vec::with_capacity(values.len());
        let mut packings = Vec::with_capacity(values.len());
        for (position, (name, value, packed)) in values {
            positions.push(position as i32);
            names.push(name.to_owned());
            stored.push(value);
            packings.push(packed);
        }
        Some(Op::new(
            "INSERT INTO journal (run_id, position, name, value, packed)
             SELECT $1, * FROM unnest($2::int[], $3::text[], $4::jsonb[], $5::smallint[])",
            vec![
                Box::new(run.0),
                Box::new(positions),
                Box::new(names),
                Box::new(stored),
                Box::new(packings),
            ],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(position: u32, name: &str) -> Change {
        Change::Journal {
            position,
            name: name.into(),
            value: json!({"at": position}),
        }
    }

    #[test]
    fn a_commits_entries_are_one_insert_written_once() {
        let changes = [entry(0, "tool:a"), entry(1, "tool:b"), entry(2, "tool:c")];
        let mut journal = StoredJournal::of(&changes).expect("three positions");
        let run = RunId(uuid::Uuid::nil());
        let op = journal.insert_op(run).expect("the insert");
        assert_eq!(op.params.len(), 5, "run, then one array per column");
        assert!(journal.insert_op(run).is_none(), "written once");
        let mut none = StoredJournal::of(&[]).expect("no entries");
        assert!(none.insert_op(run).is_none());
    }

    #[test]
    fn a_position_written_twice_in_one_commit_is_refused() {
        let changes = [entry(3, "tool:a"), entry(3, "tool:b")];
        match StoredJournal::of(&changes) {
            Err(Error::Corrupt(message)) => assert!(message.contains("[3, 3]"), "{message}"),
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        }
    }
}
