//! The results of calls as the run records them: the tool message the model
//! reads, the reply of a parked call, a failure journaled without running
//! anything.

use agentenkit_core::conversation::Message;
use agentenkit_core::journal::names;
use agentenkit_core::reply::SettledReply;
use agentenkit_core::{CallEvent, EventType, RunId, ToolCallStatus, ToolKind};
use agentenkit_store::Change;
use serde_json::{json, Value};

use super::checkpoint::{Checkpointer, Durability};
use super::error::SegmentError;
use super::outcome::PersistedToolCall;

pub(super) fn tool_message(call: &PersistedToolCall, content: Value) -> Message {
    Message::Tool {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        content,
    }
}

/// The reply to a parked call (`tool:<runId>:<callId>`): from the journal,
/// or from its settled row; `Err(status)` while it waits. A denial or
/// answers are what the model reads of the call (`shown`), except for the
/// questions a tool asked, whose reply goes to the tool.
pub(super) async fn await_reply(
    cp: &mut Checkpointer<'_>,
    run_id: RunId,
    call: &PersistedToolCall,
    name: String,
    shown: bool,
) -> Result<Result<SettledReply, ToolCallStatus>, SegmentError> {
    let settled = if cp.is_recorded(&name)? {
        None
    } else {
        match cp.call(&call.id)?.reply() {
            Err(status) => return Ok(Err(status)),
            // One channel, two shapes: a reply whose shape does not fit the
            // wait (answers for a verdict, or the reverse) is discarded and
            // the call stays parked, attributing nothing to anyone. (An
            // expiry, of a tool's questions, carries neither.)
            Ok(reply)
                if reply.status != ToolCallStatus::Expired
                    && reply.answers.is_some() != (call.kind == ToolKind::Ask) =>
            {
                tracing::warn!(tool_call_id = %call.id, "a reply of the wrong shape was discarded");
                return Ok(Err(ToolCallStatus::PendingApproval));
            }
            Ok(reply) => Some(reply),
        }
    };
    let reply: SettledReply = cp
        .checkpoint(name, Durability::Derived, || async move {
            // The effect runs only when the entry is not recorded, and then
            // the settled row was just read.
            let reply = settled.ok_or_else(|| {
                SegmentError::Permanent("the reply of a recorded call was read again".into())
            })?;
            let changes = match reply.answers_result().or_else(|| reply.denial()) {
                Some(result) if shown => result_changes(run_id, call, reply.status, &result),
                _ => vec![],
            };
            Ok((reply, changes))
        })
        .await?;
    Ok(Ok(reply))
}

/// Journals `failure` as the call's `exec:` result without running
/// anything: a call the model got wrong (an invalid delegation or question
/// set) is a tool failure it sees and can fix.
pub(super) async fn record_failure(
    cp: &mut Checkpointer<'_>,
    run_id: RunId,
    call: &PersistedToolCall,
    failure: Value,
) -> Result<Value, SegmentError> {
    record_unrun(cp, run_id, call, ToolCallStatus::Failed, failure).await
}

/// Journals `result` as the call's `exec:` entry, settling its row as
/// `status`, without running or asking anything.
pub(super) async fn record_unrun(
    cp: &mut Checkpointer<'_>,
    run_id: RunId,
    call: &PersistedToolCall,
    status: ToolCallStatus,
    result: Value,
) -> Result<Value, SegmentError> {
    cp.checkpoint(names::exec(&call.id), Durability::Derived, || async {
        let event = match status {
            ToolCallStatus::Rejected => CallEvent::Refuse {
                result: result.clone(),
            },
            status => CallEvent::Finish {
                status,
                result: result.clone(),
            },
        };
        let changes = std::iter::once(Change::Call {
            id: call.id.clone(),
            event,
        })
        .chain(result_changes(run_id, call, status, &result))
        .collect();
        Ok((result.clone(), changes))
    })
    .await
}

/// The conversation message and event of a call's result.
pub(super) fn result_changes(
    run_id: RunId,
    call: &PersistedToolCall,
    status: ToolCallStatus,
    result: &Value,
) -> Vec<Change> {
    vec![
        Change::Message(tool_message(call, result.clone())),
        Change::Event {
            event_type: EventType::ToolResult,
            data: json!({
                "runId": run_id,
                "toolCallId": call.id,
                "toolName": call.name,
                "status": status,
                "result": result,
            }),
        },
    ]
}

/// Postgres cannot store U+0000 in JSON text: outside text is stored with
/// U+FFFD in its place rather than failing the step on every retry.
pub(super) fn without_nul(value: Value) -> Value {
    match value {
        Value::String(s) if s.contains('\0') => Value::String(s.replace('\0', "\u{FFFD}")),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nul).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k.replace('\0', "\u{FFFD}"), without_nul(v)))
                .collect(),
        ),
        other => other,
    }
}
