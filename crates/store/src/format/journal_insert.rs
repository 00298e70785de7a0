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
/// packing looks at the commit's entries together, each entry's insert
/// takes its own.
pub(crate) struct StoredJournal<'a> {
    values: BTreeMap<u32, (Value, i16)>,
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
        let positions = entries.iter().map(|e| e.position);
        let stored = stored_journal::pack(&entries).map_err(|e| Error::Corrupt(e.to_string()))?;
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
            values: positions.zip(stored).collect(),
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

    /// The insert of the entry at `position`.
    pub(crate) fn insert_op(&mut self, run: RunId, position: u32, name: &str) -> Result<Op> {
        let (value, packed) = self.values.remove(&position).ok_or_else(|| {
            Error::Corrupt(format!(
                "journal position {position} written twice in one commit"
            ))
        })?;
        Ok(Op::new(
            "INSERT INTO journal (run_id, position, name, value, packed) VALUES ($1, $2, $3, $4, $5)",
            vec![
                Box::new(run.0),
                Box::new(position as i32),
                Box::new(name.to_owned()),
                Box::new(value),
                Box::new(packed),
            ],
        ))
    }
}
