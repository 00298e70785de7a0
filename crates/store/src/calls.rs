//! A step's tool-call rows: inserted as proposed (or proposed and parked
//! in one commit, see `park.rs`), storing their arguments where the
//! commit's journal holds them (`journal_insert.rs`); settled; and the
//! result an answered call finally had.

use agentenkit_core::{RunId, ThreadId, ToolCallId, ToolCallStatus, ToolKind};
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::pipeline::{Expect, Op};
use crate::Error;

/// A call row to insert: proposed, or (`parked`: reason and expiry)
/// proposed and parked in one commit (see `park.rs`).
pub(crate) struct NewCall<'a> {
    pub(crate) id: &'a ToolCallId,
    pub(crate) name: &'a str,
    pub(crate) kind: ToolKind,
    /// `(arguments, arguments_position)`: see the view `tool_calls_whole`.
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

/// A proposed call ran (or failed): its status and result.
pub(crate) fn settle_op(run: RunId, id: &ToolCallId, status: ToolCallStatus, result: &Value) -> Op {
    let sources: Vec<&'static str> = ToolCallStatus::ALL
        .iter()
        .filter(|from| from.can_become(status))
        .map(|from| from.as_str())
        .collect();
    Op::new(
        "UPDATE tool_calls SET status = $3, result = $4
         WHERE run_id = $1 AND id = $2 AND status = ANY($5)",
        vec![
            Box::new(run.0),
            Box::new(id.as_str().to_owned()),
            Box::new(status.as_str()),
            Box::new(result.clone()),
            Box::new(sources),
        ],
    )
    .expect(Expect::One(Error::Corrupt(format!(
        "tool call {id} of run {run} cannot become {status}"
    ))))
}

/// The result a settled (answered) call finally had, its status unchanged.
pub(crate) fn record_result_op(run: RunId, id: &ToolCallId, result: &Value) -> Op {
    Op::new(
        "UPDATE tool_calls SET result = $3 WHERE run_id = $1 AND id = $2",
        vec![
            Box::new(run.0),
            Box::new(id.as_str().to_owned()),
            Box::new(result.clone()),
        ],
    )
}
