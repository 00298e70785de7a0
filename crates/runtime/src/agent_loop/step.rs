//! The step loop of a segment: model call, the calls it makes, their
//! results or waits, until the run completes or parks.

use std::collections::HashSet;

use agentenkit_core::conversation::{Message, ModelResponse};
use agentenkit_core::journal::names;
use agentenkit_core::{EventType, ToolCallId, ToolKind};
use agentenkit_store::{Change, RunContext};
use serde_json::json;

use super::calls::{execute, needs_park, persist_tool_call, run_function, Ran};
use super::checkpoint::{Checkpointer, Durability};
use super::delegation::{await_delegation, delegation_task};
use super::elicitation;
use super::error::SegmentError;
use super::outcome::{Outcome, ParkItem, PersistedToolCall, Wait};
use super::results::{await_reply, tool_message, without_nul};
use crate::agent::{Agent, Registry};
use crate::model::ModelRequest;
use crate::tool::Approval;

/// A run makes at most this many model calls: a model that never stops
/// calling tools fails the run instead of looping for ever.
pub const MAX_MODEL_CALLS: u32 = 64;

/// Advances the run until it completes (or fails with an error that says
/// what to do with it).
pub async fn run_turn(
    agent: &Agent,
    registry: &Registry,
    ctx: &RunContext,
    cp: &mut Checkpointer<'_>,
) -> Result<Outcome, SegmentError> {
    let run_id = ctx.lease.run_id;
    let tools = registry.tool_specs(agent);
    let mut conversation = ctx.history.clone();
    // Call ids key the rows of a run: a model that reuses one cannot be
    // followed (decided from the journal's responses, so replay agrees).
    let mut call_ids: HashSet<ToolCallId> = HashSet::new();
    // The intake's row id is taken when the journal says the run has an
    // intake, or a fresh run of an agent with one starts (a deploy that adds
    // or removes an intake leaves runs in flight as they began).
    if cp.next_is(names::INTAKE_ASK) || (agent.intake.is_some() && !cp.is_replaying()) {
        call_ids.insert(ToolCallId(elicitation::INTAKE_CALL_ID.to_owned()));
    }
    if let Some(to_park) =
        elicitation::intake(cp, agent.intake.as_ref(), ctx, &mut conversation).await?
    {
        return Ok(Outcome::Park { to_park });
    }
    for n in 0..MAX_MODEL_CALLS {
        let response: ModelResponse = cp
            .checkpoint(names::model(n), Durability::Decided, || async {
                let request = ModelRequest {
                    call_index: n,
                    system: &agent.system,
                    messages: &conversation,
                    tools: &tools,
                };
                let response = agent.model.complete(request).await.map_err(|e| match e {
                    crate::ModelError::Transient(_) => SegmentError::Retry(e.to_string()),
                    crate::ModelError::Refused { status, message } => {
                        SegmentError::ModelRefused { status, message }
                    }
                })?;
                let response: ModelResponse = serde_json::to_value(&response)
                    .map(without_nul)
                    .and_then(serde_json::from_value)
                    .map_err(|e| SegmentError::Permanent(format!("model response: {e}")))?;
                ::metrics::counter!(crate::metrics::MODEL_CALLS).increment(1);
                let message = Message::assistant(&response);
                let changes = vec![
                    Change::Event {
                        event_type: EventType::Message,
                        data: json!({ "runId": run_id, "message": message }),
                    },
                    Change::Message(message),
                    // No usage row: the journal's `model:<n>` holds it.
                ];
                Ok((response, changes))
            })
            .await?;
        conversation.push(Message::assistant(&response));
        for call in &response.tool_calls {
            if !call_ids.insert(call.id.clone()) {
                return Err(SegmentError::Permanent(format!(
                    "the model reused tool call id {:?} within the run",
                    call.id.as_str()
                )));
            }
        }
        if response.tool_calls.is_empty() {
            return Ok(Outcome::Completed {
                output: response.text,
            });
        }
        // Function tools run at once; calls that wait (approvals, parks,
        // delegations) are handled once every call of the step is, so a
        // park is written only for a step that finished.
        let mut waiting: Vec<(PersistedToolCall, Option<Wait>)> = Vec::new();
        for call in &response.tool_calls {
            let persisted = persist_tool_call(cp, agent, registry, run_id, call).await?;
            match persisted.kind {
                ToolKind::Function => {
                    match run_function(cp, agent, registry, ctx, &persisted).await? {
                        Ran::Result(result) => conversation.push(tool_message(&persisted, result)),
                        Ran::Parked(wait) => waiting.push((persisted, wait)),
                    }
                }
                ToolKind::Approval => waiting.push((persisted, Some(Wait::Approval))),
                ToolKind::Ask => match elicitation::ask_call(cp, ctx, &persisted).await? {
                    Ok(wait) => waiting.push((persisted, Some(wait))),
                    Err(result) => conversation.push(tool_message(&persisted, result)),
                },
                ToolKind::Delegate => {
                    match delegation_task(
                        cp,
                        run_id,
                        &persisted,
                        ctx.lease.depth,
                        registry.max_depth(),
                    )
                    .await?
                    {
                        Ok(task) => waiting.push((persisted, Some(Wait::Delegate { task }))),
                        Err(result) => conversation.push(tool_message(&persisted, result)),
                    }
                }
                other => {
                    return Err(SegmentError::Permanent(format!(
                        "tool call {} has kind {other}, which this worker cannot run",
                        persisted.id
                    )))
                }
            }
        }
        let mut to_park: Vec<ParkItem> = Vec::new();
        let mut blocked = false;
        for (call, wait) in waiting {
            // Results are journaled in call order: once one waits, every
            // later one waits with it (but is parked now if it is new).
            let settled = if blocked {
                None
            } else if call.kind == ToolKind::Delegate {
                await_delegation(cp, run_id, &call).await?
            } else {
                let name = names::tool(run_id, &call.id);
                match await_reply(cp, run_id, &call, name).await? {
                    Ok(reply) => Some(match reply.answers_result().or_else(|| reply.denial()) {
                        Some(result) => result,
                        None => {
                            let approval = Approval {
                                approved: true,
                                payload: reply.payload.clone(),
                            };
                            execute(cp, agent, registry, ctx, &call, Some(approval)).await?
                        }
                    }),
                    Err(_) => None,
                }
            };
            match settled {
                Some(result) => conversation.push(tool_message(&call, result)),
                None => {
                    blocked = true;
                    if let Some(wait) = wait {
                        if needs_park(cp, &call)? {
                            to_park.push(ParkItem { call, wait });
                        }
                    }
                }
            }
        }
        if blocked {
            return Ok(Outcome::Park { to_park });
        }
    }
    Err(SegmentError::Permanent(format!(
        "the run made {MAX_MODEL_CALLS} model calls without finishing"
    )))
}
