//! How a call row is inserted: proposed, or proposed and parked in one
//! commit (see `parked_at_once.rs`), storing its arguments and persist
//! entry where the commit's journal holds them (`journal_insert.rs`).

use agentenkit_core::{RunId, ThreadId, ToolCallId, ToolKind};
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::pipeline::Op;

/// A call row to insert: proposed, or (`parked`: reason and expiry)
/// proposed and parked in one commit (see `parked_at_once.rs`).
pub(crate) struct NewCall<'a> {
    pub(crate) id: &'a ToolCallId,
    pub(crate) name: &'a str,
    pub(crate) kind: ToolKind,
    /// `(arguments, arguments_position)`: see `in_journal.rs`.
    pub(crate) stored: (Option<Value>, Option<i32>),
    /// The position of the call's persist entry when the row holds it
    /// (`journal_insert::StoredJournal::keep_in_call_rows`).
    pub(crate) persist_position: Option<i32>,
    pub(crate) parked: Option<(&'a str, Option<DateTime<Utc>>)>,
}

/// The insert of a call row with status `$status` (a literal).
macro_rules! insert_tool_call_sql {
    ($status:literal) => {
        concat!(
            "INSERT INTO tool_calls (run_id, id, thread_id, name, arguments, arguments_position,
                                     kind, tool_type, status, reason, expires_at, persist_position)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, ",
            $status,
            ", $9, $10, $11)"
        )
    };
}

/// The one insert of a call row, proposed or already open.
pub(crate) fn insert_tool_call(run: RunId, thread: ThreadId, call: NewCall<'_>) -> Op {
    let (arguments, arguments_position) = call.stored;
    let (sql, reason, expires_at) = match call.parked {
        Some((reason, expires_at)) => (
            insert_tool_call_sql!("'pending_approval'"),
            Some(reason.to_owned()),
            expires_at,
        ),
        None => (insert_tool_call_sql!("'proposed'"), None, None),
    };
    Op::new(
        sql,
        vec![
            Box::new(run.0),
            Box::new(call.id.as_str().to_owned()),
            Box::new(thread.0),
            Box::new(call.name.to_owned()),
            Box::new(arguments),
            Box::new(arguments_position),
            Box::new(call.kind.as_str()),
            Box::new(call.kind.tool_type()),
            Box::new(reason),
            Box::new(expires_at),
            Box::new(call.persist_position),
        ],
    )
}
