//! How a commit's journal entries are written: packed together
//! (`agentenkit_core::stored_journal`) or whole, as the store's format says;
//! and which call rows and messages of the commit find what they hold in
//! one of its model entries (see `in_journal.rs`); and which persist
//! entries its parked call rows hold instead (migration 0019).

use std::collections::BTreeMap;

use agentenkit_core::journal::names;
use agentenkit_core::stored_journal::{self, NewEntry, PACKED_CALL};
use agentenkit_core::RunId;
use serde_json::{json, Value};

use crate::commit::Change;
use crate::parked_at_once::ParkedAtOnce;
use crate::pipeline::Op;
use crate::{Error, Result, StorageFormat};

/// The stored value of each journal entry of one commit, by position:
/// packing looks at the commit's entries together, each entry's insert
/// takes its own.
pub(crate) struct StoredJournal<'a> {
    values: BTreeMap<u32, (Value, i16)>,
    /// The model entry's position of each call proposed in the commit
    /// with the arguments that entry holds (packed format only).
    proposed_in: BTreeMap<String, u32>,
    /// The commit's model entries, for the messages they hold (packed
    /// format only).
    models: Vec<NewEntry<'a>>,
    /// The position of each call's persist entry in the commit, by call id.
    persist_at: BTreeMap<&'a str, u32>,
    /// The position of each persist entry a call row of the commit holds
    /// instead (not written to `journal`), by call id.
    in_call_row: BTreeMap<String, u32>,
    format: StorageFormat,
}

impl<'a> StoredJournal<'a> {
    pub(crate) fn of(changes: &'a [Change], format: StorageFormat) -> Result<Self> {
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
        let persist_at = entries
            .iter()
            .filter_map(|e| Some((names::call_of_persist(e.name)?, e.position)))
            .collect();
        if !format.packs() {
            return Ok(StoredJournal {
                values: positions
                    .zip(entries.iter().map(|e| (e.value.clone(), 0)))
                    .collect(),
                proposed_in: BTreeMap::new(),
                models: Vec::new(),
                persist_at,
                in_call_row: BTreeMap::new(),
                format,
            });
        }
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
            persist_at,
            in_call_row: BTreeMap::new(),
            format,
        })
    }

    /// Leaves to the call rows of `parked` (proposed and parked in this
    /// commit, `packed` format only) the persist entries they hold exactly:
    /// stored packed, such an entry is the call's kind and tool type, which
    /// its row inserted already parked holds and never changes (only the
    /// park of a proposed call sets them). The view `journal_entries` puts
    /// it back as stored. The formats for a rolling upgrade write it, as
    /// the versions before read only `journal`.
    pub(crate) fn keep_in_call_rows(&mut self, parked: &ParkedAtOnce<'_>) {
        if !self.format.writes_newest_rows() {
            return;
        }
        for (call_id, kind) in parked.calls() {
            let Some(&position) = self.persist_at.get(call_id.as_str()) else {
                continue;
            };
            let held = json!({ "kind": kind.as_str(), "toolType": kind.tool_type() });
            if self.values.get(&position) == Some(&(held, PACKED_CALL)) {
                self.values.remove(&position);
                self.in_call_row
                    .insert(call_id.as_str().to_owned(), position);
            }
        }
    }

    /// The position of call `call_id`'s persist entry when its row holds
    /// it (see [`Self::keep_in_call_rows`]).
    pub(crate) fn persist_position(&self, call_id: &str) -> Option<i32> {
        self.in_call_row.get(call_id).map(|at| *at as i32)
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

    /// The insert of the entry at `position`; none for one a call row
    /// holds.
    pub(crate) fn insert_op(
        &mut self,
        run: RunId,
        position: u32,
        name: &str,
    ) -> Result<Option<Op>> {
        if self.in_call_row.values().any(|at| *at == position) {
            return Ok(None);
        }
        let (value, packed) = self.values.remove(&position).ok_or_else(|| {
            Error::Corrupt(format!(
                "journal position {position} written twice in one commit"
            ))
        })?;
        Ok(Some(Op::new(
            "INSERT INTO journal (run_id, position, name, value, packed) VALUES ($1, $2, $3, $4, $5)",
            vec![
                Box::new(run.0),
                Box::new(position as i32),
                Box::new(name.to_owned()),
                Box::new(value),
                Box::new(packed),
            ],
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_changes::{park, propose};
    use agentenkit_core::ToolKind;

    /// A step that parks on approval `c1`: its model entry, the persist
    /// entry (kind and tool type beside the call's id, name and arguments),
    /// then `extra` changes of the call.
    fn step(persisted_kind: ToolKind, extra: Vec<Change>) -> Vec<Change> {
        let arguments = json!({"to": "ops@example.com"});
        let mut changes = vec![
            Change::Journal {
                position: 0,
                name: "model:0".into(),
                value: json!({"toolCalls": [
                    {"id": "c1", "name": "send_email", "arguments": arguments}
                ]}),
            },
            Change::Journal {
                position: 1,
                name: "persist:toolcall:c1".into(),
                value: json!({"id": "c1", "name": "send_email", "arguments": arguments,
                              "kind": persisted_kind, "toolType": persisted_kind.tool_type()}),
            },
        ];
        changes.extend(extra);
        changes
    }

    fn stored(changes: &[Change], format: StorageFormat) -> StoredJournal<'_> {
        let mut journal = StoredJournal::of(changes, format).expect("consecutive");
        journal.keep_in_call_rows(&ParkedAtOnce::find(changes));
        journal
    }

    #[test]
    fn a_call_parked_in_the_commit_holds_its_persist_entry() {
        let changes = step(ToolKind::Approval, vec![propose("c1"), park("c1")]);
        let mut journal = stored(&changes, StorageFormat::Packed);
        assert_eq!(journal.persist_position("c1"), Some(1));
        let run = RunId::new();
        assert!(journal.insert_op(run, 0, "model:0").unwrap().is_some());
        assert!(journal
            .insert_op(run, 1, "persist:toolcall:c1")
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_persist_entry_is_written_unless_its_row_holds_it_exactly() {
        let run = RunId::new();
        let written = |changes: &[Change], format: StorageFormat| {
            let mut journal = stored(changes, format);
            let op = journal.insert_op(run, 1, "persist:toolcall:c1").unwrap();
            (journal.persist_position("c1"), op.is_some())
        };
        // only proposed: its park (a later commit) may set another kind
        let proposed = step(ToolKind::Approval, vec![propose("c1")]);
        assert_eq!(written(&proposed, StorageFormat::Packed), (None, true));
        // parked with a kind other than the persisted one
        let other_kind = step(ToolKind::Function, vec![propose("c1"), park("c1")]);
        assert_eq!(written(&other_kind, StorageFormat::Packed), (None, true));
        // for the versions before, which read only `journal`
        let parked = step(ToolKind::Approval, vec![propose("c1"), park("c1")]);
        assert_eq!(written(&parked, StorageFormat::Unbatched), (None, true));
        assert_eq!(written(&parked, StorageFormat::Whole), (None, true));
        // a persist entry stored whole (its model entry in another commit)
        let mut alone = parked.clone();
        alone.remove(0);
        let mut journal = StoredJournal::of(&alone, StorageFormat::Packed).expect("one entry");
        journal.keep_in_call_rows(&ParkedAtOnce::find(&alone));
        assert_eq!(journal.persist_position("c1"), None);
    }
}
