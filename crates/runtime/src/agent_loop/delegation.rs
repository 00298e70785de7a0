//! Delegations: a call to a sub-agent is a child run; its end is the
//! call's result (`exec:<callId>`).

use agentenkit_core::journal::names;
use agentenkit_core::RunId;
use agentenkit_store::Delegation;
use serde_json::{json, Value};

use super::checkpoint::{Checkpointer, Durability};
use super::error::SegmentError;
use super::outcome::PersistedToolCall;
use super::results::{record_failure, result_changes};

/// The task of a delegation, or the failure the model sees (journaled as
/// the call's `exec:`) when its input is not `{"task": string}` or the
/// child would run deeper than `max_depth` (a run at `depth` delegating
/// starts one at `depth + 1`).
pub(super) async fn delegation_task(
    cp: &mut Checkpointer<'_>,
    run_id: RunId,
    call: &PersistedToolCall,
    depth: i32,
    max_depth: u32,
) -> Result<Result<String, Value>, SegmentError> {
    // Refused before (too deep, or bad arguments): the failure was
    // journaled right here; read it back whatever the configuration says
    // now. A delegation's own result is journaled later, after every call
    // of the step was persisted, so an `exec:` here is always a refusal.
    if cp.next_is(&names::exec(&call.id)) {
        let recorded = json!({ "error": "a refused delegation was replayed without its journal" });
        return Ok(Err(record_failure(cp, run_id, call, recorded).await?));
    }
    // Only a delegation that has no child yet is refused for depth: one
    // started under a larger limit goes on whatever the limit is now.
    let started = cp.call(&call.id)?.child.is_some();
    if !started && i64::from(depth) + 1 > i64::from(max_depth) {
        let failure = json!({
            "error": "delegation too deep",
            "message": format!(
                "this run is at depth {depth}; a sub-agent would run at depth {}, past max_depth {max_depth}",
                depth + 1
            ),
        });
        return Ok(Err(record_failure(cp, run_id, call, failure).await?));
    }
    let task = call
        .arguments
        .get("task")
        .and_then(Value::as_str)
        .filter(|t| !t.trim().is_empty())
        .filter(|_| call.arguments.as_object().is_some_and(|o| o.len() == 1));
    if let Some(task) = task {
        return Ok(Ok(task.to_owned()));
    }
    let failure = json!({
        "error": "invalid arguments",
        "issues": [{ "path": "/task", "message": "a delegation takes {\"task\": string} and nothing else" }],
    });
    Ok(Err(record_failure(cp, run_id, call, failure).await?))
}

/// The result of a delegation (`exec:<callId>`): the child's final text,
/// or its failure; `None` while the child has not finished.
pub(super) async fn await_delegation(
    cp: &mut Checkpointer<'_>,
    run_id: RunId,
    call: &PersistedToolCall,
) -> Result<Option<Value>, SegmentError> {
    let name = names::exec(&call.id);
    let settled = if cp.is_recorded(&name)? {
        None
    } else {
        match cp.call(&call.id)?.delegation() {
            Some(Delegation::Settled { status, result }) => Some((status, result)),
            _ => return Ok(None),
        }
    };
    let result = cp
        .checkpoint(name, Durability::Derived, || async move {
            let (status, result) = settled.ok_or_else(|| {
                SegmentError::Permanent("the result of a recorded delegation was read again".into())
            })?;
            let changes = result_changes(run_id, call, status, &result);
            Ok((result, changes))
        })
        .await?;
    Ok(Some(result))
}
