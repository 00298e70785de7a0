//! A run's budget (docs/budgets.md): before each model call the run checks
//! what it has spent against what it may, and when the next step would
//! pass it, parks with a `budget` request. Approved, the budget is raised
//! and the run goes on; refused or expired, the run fails naming the
//! budget. What was spent is counted from the journaled model entries,
//! and the asking itself is journaled (`budget:<n>`), so a replay asks at
//! the same point whatever the agent's budget has become.

use agentenkit_core::budget::{self, Exhausted, Limits, Spent};
use agentenkit_core::journal::names;
use agentenkit_core::{ToolCallId, ToolCallStatus, ToolKind};
use agentenkit_store::{Change, RunContext};

use super::checkpoint::{Checkpointer, Durability};
use super::error::SegmentError;
use super::outcome::{ParkItem, PersistedToolCall, Wait};
use super::results::await_reply;

/// What a run may spend, raised by each approval so far, and what it has
/// spent (as the journal says, replayed or made).
pub(super) struct RunBudget {
    configured: Limits,
    limits: Limits,
    pub spent: Spent,
}

impl RunBudget {
    pub fn new(configured: Limits) -> RunBudget {
        RunBudget {
            configured,
            limits: configured,
            spent: Spent::default(),
        }
    }
}

/// The row a budget request asks with.
fn request_call(n: u32, asked: &Exhausted) -> PersistedToolCall {
    PersistedToolCall {
        id: ToolCallId(budget::request_id(n)),
        name: budget::REQUEST_NAME.to_owned(),
        arguments: asked.arguments(),
        kind: ToolKind::Approval,
        tool_type: ToolKind::Approval.tool_type().to_owned(),
    }
}

/// Before model call `n`: `Some(to_park)` while the run waits for more
/// budget (the request new, or still open); `None` to go on (within the
/// budget, or more was granted). A refusal or an expiry fails the run.
pub(super) async fn check(
    cp: &mut Checkpointer<'_>,
    ctx: &RunContext,
    run_budget: &mut RunBudget,
    n: u32,
) -> Result<Option<Vec<ParkItem>>, SegmentError> {
    let name = names::budget(n);
    // The journal decides for a run that has one: it asked here, or (while
    // replaying) it did not.
    let journaled = cp.next_is(&name);
    let (limits, spent, configured) = (run_budget.limits, run_budget.spent, run_budget.configured);
    if !journaled && (cp.is_replaying() || limits.exhausted(&spent, &configured).is_none()) {
        return Ok(None);
    }
    let run_id = ctx.lease.run_id;
    let asked: Exhausted = cp
        .checkpoint(name, Durability::Decided, || async move {
            let asked = limits.exhausted(&spent, &configured).ok_or_else(|| {
                SegmentError::Permanent("a budget request was made within the budget".into())
            })?;
            let call = request_call(n, &asked);
            let changes = vec![Change::ProposeToolCall {
                id: call.id,
                name: call.name,
                arguments: call.arguments,
                kind: call.kind,
            }];
            Ok((asked, changes))
        })
        .await?;
    let call = request_call(n, &asked);
    let reply_name = names::tool(run_id, &call.id);
    match await_reply(cp, run_id, &call, reply_name, false).await? {
        Ok(reply) if reply.approved => {
            run_budget.limits = limits.raised(&asked.raise_of(reply.payload.as_ref()));
            Ok(None)
        }
        Ok(reply) => {
            let how = match reply.status {
                ToolCallStatus::Expired => "not granted before the request expired",
                _ => "refused",
            };
            Err(SegmentError::Permanent(asked.refusal(how)))
        }
        Err(status) => {
            let to_park = (status == ToolCallStatus::Proposed)
                .then_some(ParkItem {
                    call,
                    wait: Wait::Budget,
                })
                .into_iter()
                .collect();
            Ok(Some(to_park))
        }
    }
}
