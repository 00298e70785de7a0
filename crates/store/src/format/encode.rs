//! The encoder of one commit's rows: what each row leaves out because
//! another row of the same commit holds it. Decoding is `event::unpack`,
//! `journal::unpack` and, in SQL, the views `tool_calls_whole` and
//! `messages_whole`.
//!
//! * [`StoredJournal`]: the commit's journal entries, packed together
//!   (`format::journal`) and written by one insert, and which call rows and
//!   messages of the commit find what they hold in one of its model
//!   entries.
//! * [`known_rows`]: what a commit's event may leave to the rows the same
//!   commit writes: a call's name from its proposal, and a parked call's
//!   kind, reason and expiry from its park (see `format::event::RowFields`).
//! * [`EventItem`]: one event of a commit as it is stored, its data packed
//!   (`event::pack`), and for a `MESSAGE` event written with its message,
//!   that message's row.
//! * [`MessageWithEvent`]: a message and its `MESSAGE` event written by one
//!   statement, the event keeping only a reference to the message row.

use std::collections::BTreeMap;

use agentenkit_core::{CallEvent, EventType, RunId};
use serde_json::{Map, Value};

use super::event::{self as stored_event, RowFields};
use super::journal::{self as stored_journal, NewEntry};
use crate::change::Change;
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

/// What the rows of an event of a run named `run_name` at `depth` hold: the
/// run row's name and depth, and the call-row fields of the call `data` names (`toolCallId`)
/// that `changes` write. A call proposed in an earlier commit has no known
/// name here, so nothing of it is left out (its row is not re-read to
/// check).
pub(crate) fn known_rows(
    run_name: &str,
    depth: i32,
    changes: &[Change],
    data: &Value,
) -> RowFields {
    let run = stored_event::run_row(run_name, depth, None);
    let Some(call_id) = data.get("toolCallId").and_then(Value::as_str) else {
        return RowFields {
            run,
            ..RowFields::default()
        };
    };
    let proposed = changes.iter().find_map(|c| match c {
        Change::ProposeToolCall { id, name, kind, .. } if id.as_str() == call_id => {
            Some((name, kind))
        }
        _ => None,
    });
    let parked = changes.iter().find_map(|c| match c {
        Change::Call {
            id,
            event:
                CallEvent::Park {
                    kind,
                    reason,
                    expires_at,
                    ..
                },
        } if id.as_str() == call_id => Some((kind, reason, expires_at)),
        _ => None,
    });
    let call: Map<String, Value> = match (proposed, parked) {
        (Some((name, _)), Some((kind, reason, expires_at))) => {
            stored_event::call_row(name, kind.as_str(), Some(reason), *expires_at)
        }
        // The kind a call is proposed with may change when it parks; no
        // event leaves that kind out (`call_fields_of`).
        (Some((name, kind)), None) => stored_event::call_row(name, kind.as_str(), None, None),
        (None, _) => Map::new(),
    };
    RowFields { call, run }
}

/// One event of a commit as it will be stored.
pub(crate) struct EventItem {
    pub(crate) event_type: EventType,
    pub(crate) stored: stored_event::Packed,
    /// The message row its statement inserts and it names (packed bit 4):
    /// the body, or the journal position that holds it.
    pub(crate) message: Option<(Option<Value>, Option<i32>)>,
}

/// An event of `run`, leaving to `rows` what they hold.
pub(crate) fn event_item(
    run: Option<RunId>,
    event_type: EventType,
    data: Value,
    rows: &RowFields,
) -> EventItem {
    EventItem {
        event_type,
        stored: stored_event::pack(event_type, run, data, rows),
        message: None,
    }
}

/// A `MESSAGE` event and its message (`body`), written by one statement:
/// the event names the message row by `message_id` and is stored without
/// it (`stored_event::pack_message`). The message row stores `body`, or the
/// journal position of a model entry of the commit that holds it.
pub(crate) fn message_event_item(
    run: RunId,
    data: Value,
    body: &Value,
    journal: &StoredJournal,
) -> EventItem {
    let stored = stored_event::pack_message(
        stored_event::pack(EventType::Message, Some(run), data, &RowFields::default()),
        body,
    );
    EventItem {
        event_type: EventType::Message,
        stored,
        message: Some(journal.message_body(body.clone())),
    }
}

/// A `MESSAGE` event repeated its message whole beside the messages row
/// inserted in the same commit (the largest event of a parked thread after
/// its arguments). When the message is the commit's last, the two are one
/// statement, placed where the event goes (after every row lock: see
/// `INSERT_EVENT_SQL`): it takes the thread's event lock, inserts the
/// message, and inserts the event naming it by `message_id`. Moving the
/// message there keeps the thread's messages in order only because no
/// other message of the commit comes after it; a commit that starts or
/// ends a child run (whose messages are written apart) is left as it is.
pub(crate) struct MessageWithEvent<'a> {
    /// `(event, message, body)` of the folded pair.
    pair: Option<(&'a Change, &'a Change, Value)>,
}

impl<'a> MessageWithEvent<'a> {
    /// The pair to fold in `changes`, if any.
    pub(crate) fn find(changes: &'a [Change]) -> Result<Self> {
        let none = MessageWithEvent { pair: None };
        let child_run = changes.iter().any(|c| {
            matches!(
                c,
                Change::StartChild { .. } | Change::FinishDelegation { .. }
            )
        });
        let has_message_event = changes.iter().any(|c| {
            matches!(
                c,
                Change::Event {
                    event_type: EventType::Message,
                    ..
                }
            )
        });
        let last_message = changes.iter().rev().find_map(|c| match c {
            Change::Message(m) => Some((c, m)),
            _ => None,
        });
        let (false, true, Some((message, m))) = (child_run, has_message_event, last_message) else {
            return Ok(none);
        };
        // Serialized only when a MESSAGE event may carry it (not for the
        // tool results most commits write).
        let body = serde_json::to_value(m)?;
        let event = changes.iter().find(|c| match c {
            Change::Event {
                event_type: EventType::Message,
                data,
            } => data.get("message") == Some(&body),
            _ => false,
        });
        Ok(MessageWithEvent {
            pair: event.map(|event| (event, message, body)),
        })
    }

    /// The message of the pair: written by its event's statement.
    pub(crate) fn folds(&self, change: &Change) -> bool {
        self.pair
            .as_ref()
            .is_some_and(|(_, message, _)| std::ptr::eq(*message, change))
    }

    /// The event of the pair, carrying its message.
    pub(crate) fn event_item(
        &self,
        run: RunId,
        change: &Change,
        journal: &StoredJournal,
    ) -> Option<EventItem> {
        match (&self.pair, change) {
            (Some((event, _, body)), Change::Event { data, .. })
                if std::ptr::eq(*event, change) =>
            {
                Some(message_event_item(run, data.clone(), body, journal))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
