//! How a call row is inserted: proposed, or proposed and parked in one
//! commit (see `parked_at_once.rs`), storing its arguments where the
//! commit's journal holds them (`journal_insert.rs`).

use agentenkit_core::{RunId, ThreadId, ToolCallId, ToolCallStatus, ToolKind};
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::pipeline::Op;

/// A call row to insert: proposed, or (`parked`: reason and expiry)
/// proposed and parked in one commit (see `parked_at_once.rs`).
pub(crate) struct NewCall<'a> {
    pub(crate) id: &'a ToolCallId,
    pub(crate) name: &'a str,
    pub(crate) kind: ToolKind,
    /// `(arguments, arguments_position)`: see `format/sql.rs`.
    pub(crate) stored: (Option<Value>, Option<i32>),
    pub(crate) parked: Option<(&'a str, Option<DateTime<Utc>>)>,
}

/// The insert of a call row, proposed (`$9`, `$10` and `$11` null) or
/// already open.
const INSERT_TOOL_CALL_SQL: &str = "
    INSERT INTO tool_calls (run_id, id, thread_id, name, arguments, arguments_position,
                            kind, tool_type, status, reason, expires_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

/// The one insert of a call row, proposed or already open.
pub(crate) fn insert_tool_call(run: RunId, thread: ThreadId, call: NewCall<'_>) -> Op {
    let (arguments, arguments_position) = call.stored;
    let (status, reason, expires_at) = match call.parked {
        Some((reason, expires_at)) => (
            ToolCallStatus::PendingApproval,
            Some(reason.to_owned()),
            expires_at,
        ),
        None => (ToolCallStatus::Proposed, None, None),
    };
    Op::new(
        INSERT_TOOL_CALL_SQL,
        vec![
            Box::new(run.0),
            Box::new(call.id.as_str().to_owned()),
            Box::new(thread.0),
            Box::new(call.name.to_owned()),
            Box::new(arguments),
            Box::new(arguments_position),
            Box::new(call.kind.as_str()),
            Box::new(call.kind.tool_type()),
            Box::new(status.as_str()),
            Box::new(reason),
            Box::new(expires_at),
        ],
    )
}
