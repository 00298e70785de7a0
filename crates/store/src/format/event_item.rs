//! One event of a commit as it is stored: its data packed (`event.rs`),
//! and for a `MESSAGE` event written with its message, that message's row.

use agentenkit_core::{EventType, RunId};
use serde_json::Value;

use super::event::{self as stored_event, RowFields};
use super::journal_insert::StoredJournal;

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
