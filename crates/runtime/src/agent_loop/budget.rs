//! A run's budget (docs/budgets.md): before each model call the run checks
//! what it has spent against what it may, and when the next step would
//! pass it, parks with a `budget` request. Approved, the budget is raised
//! and the run goes on; refused or expired, the run fails naming the
//! budget. What was spent is counted from the journaled model entries,
//! and the asking itself is journaled (`budget:<n>`), so a replay asks at
//! the same point whatever the agent's budget has become.

use agentenkit_core::budget::{self, Exhausted, Grant, Limits, Price, Scope, Spent};
use agentenkit_core::conversation::ModelResponse;
use agentenkit_core::journal::names;
use agentenkit_core::{CallEvent, ToolCallId, ToolCallStatus, ToolKind};
use agentenkit_store::{Change, RunContext};
use serde_json::json;

use super::checkpoint::{Checkpointer, Durability};
use super::error::SegmentError;
use super::outcome::{ParkItem, PersistedToolCall, Wait};
use super::results::await_reply;

/// What a run may spend, and its thread, raised by each approval so far;
/// what it has spent (as the journal says, replayed or made), and what
/// the thread's other runs had (read once, when a thread budget is
/// checked live).
pub(super) struct RunBudget {
    configured: Limits,
    limits: Limits,
    thread_configured: Limits,
    thread_limits: Limits,
    thread_before: Option<Spent>,
    price: Option<Price>,
    spent: Spent,
}

impl RunBudget {
    pub fn new(agent: &crate::agent::Agent) -> RunBudget {
        RunBudget {
            configured: agent.budget,
            limits: agent.budget,
            thread_configured: agent.thread_budget,
            thread_limits: agent.thread_budget,
            thread_before: None,
            price: agent.price,
            spent: Spent::default(),
        }
    }

    /// A model call made or replayed.
    pub fn spend(&mut self, response: &ModelResponse) {
        let calls = response.tool_calls.len();
        self.spent
            .add_model_call(response.usage, calls, self.price.as_ref());
    }

    /// The budget the next step would pass, if any: the run's first, then
    /// the thread's.
    async fn over(
        &mut self,
        cp: &Checkpointer<'_>,
        ctx: &RunContext,
    ) -> Result<Option<Exhausted>, SegmentError> {
        let run = self
            .limits
            .exhausted(Scope::Run, &self.spent, &self.configured);
        if run.is_some() || self.thread_configured.is_empty() {
            return Ok(run);
        }
        let before = match self.thread_before {
            Some(before) => before,
            None => {
                // Once: the other runs' grants raise the thread's budget
                // for this run too.
                let lease = &ctx.lease;
                let other = cp
                    .engine
                    .thread_spent(lease.thread_id, lease.run_id)
                    .await?;
                self.thread_limits = self.thread_limits.raised(&other.granted);
                *self.thread_before.insert(other.spent)
            }
        };
        let spent = before.plus(self.spent);
        Ok(self
            .thread_limits
            .exhausted(Scope::Thread, &spent, &self.thread_configured))
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
    // The journal decides for a run that has one: it asked here, or (while
    // replaying) it did not.
    let journaled = cp.next_is_numbered("budget", n);
    let over = match journaled || cp.is_replaying() {
        true => None,
        false => match run_budget.over(cp, ctx).await? {
            Some(over) => Some(over),
            None => return Ok(None),
        },
    };
    if !journaled && over.is_none() {
        return Ok(None);
    }
    let run_id = ctx.lease.run_id;
    let asked: Exhausted = cp
        .checkpoint(names::budget(n), Durability::Decided, || async move {
            let asked = over.ok_or_else(|| {
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
            let granted = grant(cp, n, &call, asked, reply.payload.as_ref()).await?;
            match granted.scope {
                Scope::Run => run_budget.limits = run_budget.limits.raised(&granted.add),
                Scope::Thread => {
                    run_budget.thread_limits = run_budget.thread_limits.raised(&granted.add)
                }
            }
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

/// What the approval of `asked` (with `payload`) grants, journaled as
/// `budget:<n>:granted` with the request row's result.
async fn grant(
    cp: &mut Checkpointer<'_>,
    n: u32,
    call: &PersistedToolCall,
    asked: Exhausted,
    payload: Option<&serde_json::Value>,
) -> Result<Grant, SegmentError> {
    let id = call.id.clone();
    let grant = Grant {
        scope: asked.scope,
        add: asked.grant(payload),
    };
    cp.checkpoint(
        names::budget_granted(n),
        Durability::Derived,
        || async move {
            // The row's result: what was granted (an approved request is
            // settled, not a tool still to run).
            let result = json!({ "granted": grant.add, "scope": grant.scope });
            let event = CallEvent::RecordResult { result };
            Ok((grant, vec![Change::Call { id, event }]))
        },
    )
    .await
}
