//! Delegations: a call to a sub-agent is a child run; its end is the
//! call's result (`exec:<callId>`).

use agentenkit_core::call::Delegation;
use agentenkit_core::journal::names;
use agentenkit_core::RunId;
use agentenkit_store::Lease;
use serde_json::{json, Value};

use super::checkpoint::{Checkpointer, Durability};
use super::error::SegmentError;
use super::outcome::PersistedToolCall;
use super::results::{record_failure, result_changes};
use crate::agent::DelegationLimits;

/// The delegations of one model response so far, for the limits on how
/// many children a step and a tree may start.
#[derive(Debug, Default)]
pub(super) struct StepDelegations {
    /// Delegations of this step let through, started or not.
    accepted: u32,
    /// Of those, the ones whose child run does not exist yet.
    not_started: u32,
    /// The runs the tree held when the step first asked (read once).
    tree_runs: Option<i64>,
}

/// The task of a delegation, or the failure the model sees (journaled as
/// the call's `exec:`) when its input is not `{"task": string}`, the child
/// would run deeper than `max_depth` (a run at `depth` delegating starts
/// one at `depth + 1`), or it would start more children in this step, or
/// more runs in this turn's tree, than the limits allow.
pub(super) async fn delegation_task(
    cp: &mut Checkpointer<'_>,
    lease: &Lease,
    call: &PersistedToolCall,
    limits: DelegationLimits,
    step: &mut StepDelegations,
) -> Result<Result<String, Value>, SegmentError> {
    let (run_id, depth, max_depth) = (lease.run_id, lease.depth, limits.max_depth);
    // Refused before (too deep, or bad arguments): the failure was
    // journaled right here; read it back whatever the configuration says
    // now. A delegation's own result is journaled later, after every call
    // of the step was persisted, so an `exec:` here is always a refusal.
    if cp.next_is(&names::exec(&call.id)) {
        let recorded = json!({ "error": "a refused delegation was replayed without its journal" });
        return Ok(Err(record_failure(cp, run_id, call, recorded).await?));
    }
    // Only a delegation that has no child yet is refused for a limit: one
    // started under a larger limit goes on whatever the limit is now.
    let started = cp.call(&call.id)?.child.is_some();
    if started {
        step.accepted += 1;
    }
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
    if let Some(failure) = past_fan_out(cp, lease, limits, step, started).await? {
        return Ok(Err(record_failure(cp, run_id, call, failure).await?));
    }
    let task = call
        .arguments
        .get("task")
        .and_then(Value::as_str)
        .filter(|t| !t.trim().is_empty())
        .filter(|_| call.arguments.as_object().is_some_and(|o| o.len() == 1));
    if let Some(task) = task {
        if !started {
            step.accepted += 1;
            step.not_started += 1;
        }
        return Ok(Ok(task.to_owned()));
    }
    let failure = json!({
        "error": "invalid arguments",
        "issues": [{ "path": "/task", "message": "a delegation takes {\"task\": string} and nothing else" }],
    });
    Ok(Err(record_failure(cp, run_id, call, failure).await?))
}

/// The failure of a delegation past the step's or the tree's limit, if it
/// is one (one already started is never refused).
async fn past_fan_out(
    cp: &Checkpointer<'_>,
    lease: &Lease,
    limits: DelegationLimits,
    step: &mut StepDelegations,
    started: bool,
) -> Result<Option<Value>, SegmentError> {
    if started {
        return Ok(None);
    }
    if step.accepted >= limits.max_children_per_step {
        return Ok(Some(json!({
            "error": "too many sub-agents",
            "message": format!(
                "one step may start at most {} sub-agents (max_children_per_step); start the rest in a later step",
                limits.max_children_per_step
            ),
        })));
    }
    let tree_runs = match step.tree_runs {
        Some(runs) => runs,
        None => {
            let runs = cp.engine.runs_in_tree(lease.root_run_id).await?;
            *step.tree_runs.insert(runs)
        }
    };
    if tree_runs + i64::from(step.not_started) + 1 > i64::from(limits.max_runs_per_tree) {
        return Ok(Some(json!({
            "error": "too many sub-agents",
            "message": format!(
                "this turn's runs would number more than {} (max_runs_per_tree)",
                limits.max_runs_per_tree
            ),
        })));
    }
    Ok(None)
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
