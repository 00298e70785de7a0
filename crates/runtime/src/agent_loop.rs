//! The agent loop: a deterministic function replayed over the run's journal.
//!
//! Every effect goes through [`Checkpointer::checkpoint`]: replayed from the
//! journal when it is there, run and journaled (with the rows it changes, in
//! one transaction) when it is not. A worker that dies anywhere leaves a
//! journal from which the next worker carries on without repeating an effect.

use std::collections::HashSet;
use std::sync::Arc;

use agentenkit_core::conversation::{Message, ModelResponse, ToolCallRequest};
use agentenkit_core::journal::names;
use agentenkit_core::reply::SettledReply;
use agentenkit_core::{EventType, RunId, ToolCallId, ToolCallStatus, ToolKind};
use agentenkit_store::{Change, RunContext};

use crate::delegation::{await_delegation, delegation_task};
use crate::elicitation;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tracing::Instrument;

use crate::agent::{Agent, Registry};
use crate::model::ModelRequest;
use crate::tool::{Approval, ParkRequest, ToolContext, ToolError};
use crate::worker::SegmentError;

/// A run makes at most this many model calls: a model that never stops
/// calling tools fails the run instead of looping for ever.
pub const MAX_MODEL_CALLS: u32 = 64;

/// A test hook: called with each new checkpoint's name right after it
/// committed; `true` makes the worker die there (no ack, no release).
pub type CrashPoint = Arc<dyn Fn(&str) -> bool + Send + Sync>;

pub use crate::checkpoint::{Checkpointer, Durability};

/// How a segment of a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Completed {
        output: Option<String>,
    },
    /// The step finished with calls that wait for an answer; `to_park` are
    /// the ones not parked yet (a resumed run whose rows are still open
    /// parks nothing new).
    Park {
        to_park: Vec<ParkItem>,
    },
}

/// A call of the finished step that waits, and how to park it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParkItem {
    pub call: PersistedToolCall,
    pub wait: Wait,
}

/// What a call waits for.
#[derive(Debug, Clone, PartialEq)]
pub enum Wait {
    /// A person's approval, within the agent's TTL.
    Approval,
    /// An outside answer the tool asked for (`park_for_input`).
    Job(ParkRequest),
    /// A sub-agent's run, started with this task.
    Delegate { task: String },
    /// A person's answers to a question set (never expires).
    Ask { frame: Value, reason: String },
}

/// The value journaled under `persist:toolcall:<callId>`: the row as
/// persisted, including the kind resolved for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PersistedToolCall {
    pub id: ToolCallId,
    pub name: String,
    pub arguments: Value,
    pub kind: ToolKind,
    pub tool_type: String,
}

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
    if let Some(intake) = &agent.intake {
        call_ids.insert(ToolCallId(elicitation::INTAKE_CALL_ID.to_owned()));
        if let Some(to_park) = elicitation::intake(cp, intake, ctx, &mut conversation).await? {
            return Ok(Outcome::Park { to_park });
        }
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
                let response = agent
                    .model
                    .complete(request)
                    .await
                    .map_err(|e| SegmentError::Retry(e.to_string()))?;
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
                    Change::Usage {
                        model_call: n,
                        usage: response.usage,
                    },
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
                ToolKind::Delegate => match delegation_task(cp, run_id, &persisted).await? {
                    Ok(task) => waiting.push((persisted, Some(Wait::Delegate { task }))),
                    Err(result) => conversation.push(tool_message(&persisted, result)),
                },
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

/// What running a function call came to.
enum Ran {
    Result(Value),
    /// The call waits: with how to park it when it parked just now, without
    /// when it parked in an earlier segment.
    Parked(Option<Wait>),
}

/// A function call: its journaled output, or it runs now; a tool that asks
/// to park (first call) waits like an approval, and one that parked earlier
/// waits for its reply without running again.
async fn run_function(
    cp: &mut Checkpointer<'_>,
    agent: &Agent,
    registry: &Registry,
    ctx: &RunContext,
    call: &PersistedToolCall,
) -> Result<Ran, SegmentError> {
    // Whether the call ran, parked, or is still to run comes from durable
    // state only: its `exec:` entry, its recorded park request, its row.
    if !cp.next_is(&names::exec(&call.id)) {
        let row = cp.call(&call.id)?;
        if row.status != ToolCallStatus::Proposed {
            return Ok(Ran::Parked(None));
        }
        if let Some(recorded) = row.park_request.clone() {
            let request: ParkRequest = serde_json::from_value(recorded)
                .map_err(|e| SegmentError::Permanent(format!("unreadable park request: {e}")))?;
            return Ok(Ran::Parked(Some(Wait::Job(request))));
        }
    }
    match execute(cp, agent, registry, ctx, call, None).await {
        Ok(result) => Ok(Ran::Result(result)),
        Err(SegmentError::Parked(request)) => {
            let recorded = serde_json::to_value(&request)
                .map_err(|e| SegmentError::Permanent(e.to_string()))?;
            // The tool ran its first half: its decision to park is
            // committed at once, like any effect's outcome.
            cp.buffer(vec![Change::RecordParkRequest {
                id: call.id.clone(),
                request: recorded,
            }]);
            cp.flush(None).await?;
            Ok(Ran::Parked(Some(Wait::Job(request))))
        }
        Err(other) => Err(other),
    }
}

/// True when the waiting call has not been parked (or its child started)
/// yet: the park of this step must do it.
fn needs_park(cp: &Checkpointer<'_>, call: &PersistedToolCall) -> Result<bool, SegmentError> {
    if call.kind == ToolKind::Delegate {
        Ok(cp.call(&call.id)?.delegation().is_none())
    } else {
        Ok(cp.status(&call.id)? == ToolCallStatus::Proposed)
    }
}

/// Resolves the call's kind and persists the row; on replay the kind comes
/// back from the journal, never from the registry of this process.
async fn persist_tool_call(
    cp: &mut Checkpointer<'_>,
    agent: &Agent,
    registry: &Registry,
    run_id: RunId,
    call: &ToolCallRequest,
) -> Result<PersistedToolCall, SegmentError> {
    cp.checkpoint(
        names::persist_toolcall(&call.id),
        Durability::Decided,
        || async {
            let kind = resolve_kind(agent, registry, &call.name);
            let persisted = PersistedToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
                kind,
                tool_type: kind.tool_type().to_owned(),
            };
            let changes = vec![
                Change::ProposeToolCall {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                    kind,
                },
                Change::Event {
                    event_type: EventType::ToolCall,
                    data: json!({
                        "runId": run_id,
                        "toolCallId": call.id,
                        "toolName": call.name,
                        "arguments": call.arguments,
                        "kind": kind,
                    }),
                },
            ];
            Ok((persisted, changes))
        },
    )
    .await
}

/// Runs a function tool once (`exec:<callId>`). A failure the model should
/// see is the result; an unavailable tool fails the step for a retry.
async fn execute(
    cp: &mut Checkpointer<'_>,
    agent: &Agent,
    registry: &Registry,
    ctx: &RunContext,
    call: &PersistedToolCall,
    approval: Option<Approval>,
) -> Result<Value, SegmentError> {
    let span = tracing::info_span!("tool", tool_call_id = %call.id, tool = %call.name);
    let run_id = ctx.lease.run_id;
    let name = names::exec(&call.id);
    if !cp.next_is(&name) {
        cp.before_effect(&call.id).await?;
    }
    cp.checkpoint(name, Durability::Effect, || {
        async {
            let answered = approval.is_some();
            let (result, status) = match invoke(agent, registry, ctx, call, approval).await {
                Invocation::Done(value) => (value, ToolCallStatus::Executed),
                Invocation::Failed(value) => (value, ToolCallStatus::Failed),
                Invocation::Unavailable(message) => return Err(SegmentError::Retry(message)),
                // The first call parks: nothing is journaled, the step parks
                // it once every call is handled.
                Invocation::Park(request) => return Err(SegmentError::Parked(request)),
            };
            ::metrics::counter!(crate::metrics::TOOL_EXECUTIONS, "status" => status.as_str())
                .increment(1);
            // An answered row is already settled by its answer; only the
            // result is added.
            let settle = if answered {
                Change::RecordToolResult {
                    id: call.id.clone(),
                    result: result.clone(),
                }
            } else {
                Change::SettleToolCall {
                    id: call.id.clone(),
                    status,
                    result: result.clone(),
                }
            };
            let mut changes = vec![settle];
            changes.extend(result_changes(run_id, call, status, &result));
            Ok((result, changes))
        }
        .instrument(span)
    })
    .await
}

/// What running a tool came to.
enum Invocation {
    /// The tool's output.
    Done(Value),
    /// A failure the model sees, as the tool's result.
    Failed(Value),
    /// The tool could not run now; the step is retried.
    Unavailable(String),
    /// The tool asks to wait for an outside answer.
    Park(ParkRequest),
}

async fn invoke(
    agent: &Agent,
    registry: &Registry,
    ctx: &RunContext,
    call: &PersistedToolCall,
    approval: Option<Approval>,
) -> Invocation {
    let offered = agent.tools.iter().any(|t| t == &call.name);
    let Some(tool) = registry.tool(&call.name).filter(|_| offered) else {
        return Invocation::Failed(json!({ "error": format!("unknown tool {:?}", call.name) }));
    };
    let issues = tool.validate(&call.arguments);
    if !issues.is_empty() {
        return Invocation::Failed(json!({ "error": "invalid arguments", "issues": issues }));
    }
    let tool_ctx = ToolContext {
        run_id: ctx.lease.run_id,
        thread_id: ctx.lease.thread_id,
        tool_call_id: call.id.clone(),
        approval,
    };
    let resumed = tool_ctx.approval.is_some();
    match tool.tool.execute(call.arguments.clone(), &tool_ctx).await {
        Ok(value) => Invocation::Done(without_nul(value)),
        Err(ToolError::Failed(message)) => Invocation::Failed(json!({ "error": message })),
        Err(ToolError::Transient(message)) => Invocation::Unavailable(message),
        Err(ToolError::Park(_)) if resumed => Invocation::Failed(json!({
            "error": "the tool parked again from its resumed call; a second wait needs a new tool call"
        })),
        Err(ToolError::Park(request)) => Invocation::Park(request),
    }
}

/// The kind of a call, decided once when it is persisted.
fn resolve_kind(agent: &Agent, registry: &Registry, name: &str) -> ToolKind {
    if agent.ask && name == crate::agent::ASK_TOOL {
        return ToolKind::Ask;
    }
    if agent.subagents.iter().any(|s| s == name) && registry.agent(name).is_some() {
        return ToolKind::Delegate;
    }
    let offered = agent.tools.iter().any(|t| t == name);
    match registry.tool(name) {
        Some(tool) if offered && tool.tool.requires_confirmation() => ToolKind::Approval,
        _ => ToolKind::Function,
    }
}

pub(crate) fn tool_message(call: &PersistedToolCall, content: Value) -> Message {
    Message::Tool {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        content,
    }
}

/// The reply to a parked call (`tool:<runId>:<callId>`): from the journal,
/// or from its settled row; `Err(status)` while it waits.
pub(crate) async fn await_reply(
    cp: &mut Checkpointer<'_>,
    run_id: RunId,
    call: &PersistedToolCall,
    name: String,
) -> Result<Result<SettledReply, ToolCallStatus>, SegmentError> {
    let settled = if cp.is_recorded(&name)? {
        None
    } else {
        match cp.call(&call.id)?.reply()? {
            Err(status) => return Ok(Err(status)),
            // One channel, two shapes: a reply whose shape does not fit the
            // wait (answers for a verdict, or the reverse) is discarded and
            // the call stays parked, attributing nothing to anyone.
            Ok(reply) if reply.answers.is_some() != (call.kind == ToolKind::Ask) => {
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
                Some(result) => result_changes(run_id, call, reply.status, &result),
                None => vec![],
            };
            Ok((reply, changes))
        })
        .await?;
    Ok(Ok(reply))
}

/// Journals `failure` as the call's `exec:` result without running
/// anything: a call the model got wrong (an invalid delegation or question
/// set) is a tool failure it sees and can fix.
pub(crate) async fn record_failure(
    cp: &mut Checkpointer<'_>,
    run_id: RunId,
    call: &PersistedToolCall,
    failure: Value,
) -> Result<Value, SegmentError> {
    cp.checkpoint(names::exec(&call.id), Durability::Derived, || async {
        let changes = std::iter::once(Change::SettleToolCall {
            id: call.id.clone(),
            status: ToolCallStatus::Failed,
            result: failure.clone(),
        })
        .chain(result_changes(
            run_id,
            call,
            ToolCallStatus::Failed,
            &failure,
        ))
        .collect();
        Ok((failure.clone(), changes))
    })
    .await
}

/// The conversation message and event of a call's result.
pub(crate) fn result_changes(
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
pub(crate) fn without_nul(value: Value) -> Value {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::tool::{mark_requires_confirmation, ToolSpec};
    use crate::{ScriptedModel, Tool};

    struct Send;

    #[async_trait::async_trait]
    impl Tool for Send {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "send".into(),
                description: String::new(),
                input_schema: json!({ "type": "object" }),
            }
        }
        async fn execute(&self, _: Value, _: &crate::ToolContext) -> Result<Value, ToolError> {
            Ok(Value::Null)
        }
    }

    /// The kind is decided from configuration once, at persist time.
    #[test]
    fn kinds_are_resolved_from_the_agent_and_registry() {
        let model = Arc::new(ScriptedModel::new(vec![]));
        let registry = Registry::new()
            .with_tool(Arc::new(Send))
            .unwrap()
            .with_tool(mark_requires_confirmation(Arc::new(Send)).clone())
            .unwrap();
        let agent = Agent::new("a", model.clone())
            .tool("send")
            .ask(true)
            .subagent("b");
        let registry = registry.with_agent(Agent::new("b", model));
        assert_eq!(resolve_kind(&agent, &registry, "send"), ToolKind::Approval);
        assert_eq!(resolve_kind(&agent, &registry, "ask"), ToolKind::Ask);
        assert_eq!(resolve_kind(&agent, &registry, "b"), ToolKind::Delegate);
        assert_eq!(
            resolve_kind(&agent, &registry, "unknown"),
            ToolKind::Function
        );
        let plain = Registry::new().with_tool(Arc::new(Send)).unwrap();
        assert_eq!(resolve_kind(&agent, &plain, "send"), ToolKind::Function);
    }
}
