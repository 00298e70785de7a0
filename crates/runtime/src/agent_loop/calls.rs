//! A step's tool calls: each is persisted once with its kind, then a
//! function tool runs at most once (`exec:<callId>`), or the call waits.
//! (A call whose tool asks questions runs in rounds: `rounds.rs`.)

use agentenkit_core::conversation::ToolCallRequest;
use agentenkit_core::journal::names;
use agentenkit_core::reply::{approved_result, SettledReply};
use agentenkit_core::{CallEvent, EventType, RunId, ToolCallStatus, ToolKind};
use agentenkit_store::{Change, RunContext};
use serde_json::{json, Value};
use tracing::Instrument;

use super::checkpoint::{Checkpointer, Durability};
use super::error::SegmentError;
use super::outcome::PersistedToolCall;
use super::outcome::Round;
use super::results::{result_changes, without_nul};
use crate::agent::{Agent, Registry};
use crate::tool::{
    Approval, AskRequest, AwaitRequest, ParkRequest, ToolAnswers, ToolContext, ToolError,
    MAX_ASK_ROUNDS, MAX_ASK_STATE_BYTES,
};

/// True when the waiting call has not been parked (or its child started)
/// yet: the park of this step must do it.
pub(super) fn needs_park(
    cp: &Checkpointer<'_>,
    call: &PersistedToolCall,
) -> Result<bool, SegmentError> {
    if call.kind == ToolKind::Delegate {
        Ok(cp.call(&call.id)?.delegation().is_none())
    } else {
        Ok(cp.status(&call.id)? == ToolCallStatus::Proposed)
    }
}

/// Resolves the call's kind and persists the row; on replay the kind comes
/// back from the journal, never from the registry of this process.
pub(super) async fn persist_tool_call(
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
/// see is the result; an unavailable tool fails the step for a retry. A
/// call a person approved (`decision`) runs with the reply's payload and
/// the arguments the decision edited it to, and the model reads the
/// decision's edits and note with the result.
pub(super) async fn execute(
    cp: &mut Checkpointer<'_>,
    agent: &Agent,
    registry: &Registry,
    ctx: &RunContext,
    call: &PersistedToolCall,
    decision: Option<&SettledReply>,
    answers: Option<ToolAnswers>,
) -> Result<Value, SegmentError> {
    let edited = decision.and_then(|d| d.arguments.as_ref());
    let message = decision.and_then(|d| d.message.as_deref());
    let edited_call = edited.map(|arguments| PersistedToolCall {
        arguments: arguments.clone(),
        ..call.clone()
    });
    let run_id = ctx.lease.run_id;
    let exporting = crate::trace::exporting();
    let name = names::exec(&call.id);
    if !cp.next_is(&name) {
        cp.before_effect(&call.id).await?;
    }
    cp.checkpoint(name, Durability::Effect, || {
        // Made only when the tool runs now: a replay reads the journal and
        // must not export a span of a run that did not happen.
        let span = tool_span(call, run_id, exporting);
        async {
            let answered = decision.is_some();
            let run_as = edited_call.as_ref().unwrap_or(call);
            let invocation = invoke(agent, registry, ctx, run_as, decision, answers).await;
            let (result, status) = match invocation {
                Invocation::Done(value) => (value, ToolCallStatus::Executed),
                Invocation::Failed(value) => (value, ToolCallStatus::Failed),
                Invocation::Unavailable(message) => return Err(SegmentError::Retry(message)),
                // The first call parks: nothing is journaled, the step parks
                // it once every call is handled.
                Invocation::Park(request) => return Err(SegmentError::Parked(request)),
                // Questions or a wait: the call's rounds journal them and
                // park.
                Invocation::Round(round) => return Err(SegmentError::Asked(Box::new(round))),
            };
            ::metrics::counter!(crate::metrics::TOOL_EXECUTIONS, "status" => status.as_str())
                .increment(1);
            if exporting {
                tracing::Span::current().record("outcome", status.as_str());
            }
            let result = approved_result(result, edited, message);
            // An answered row is already settled by its answer; only the
            // result is added.
            let event = if answered {
                CallEvent::RecordResult {
                    result: result.clone(),
                }
            } else {
                CallEvent::Finish {
                    status,
                    result: result.clone(),
                }
            };
            let mut changes = vec![Change::Call {
                id: call.id.clone(),
                event,
            }];
            changes.extend(result_changes(run_id, call, status, &result));
            Ok((result, changes))
        }
        .instrument(span)
    })
    .await
}

/// The span of a call's tool running now.
fn tool_span(call: &PersistedToolCall, run_id: RunId, exporting: bool) -> tracing::Span {
    let span = tracing::info_span!(
        "tool",
        tool_call_id = %call.id,
        tool = %call.name,
        outcome = tracing::field::Empty,
        idempotency_key = tracing::field::Empty,
    );
    if exporting {
        // What a trace viewer shows of the call; log lines do without.
        span.record("idempotency_key", format!("{run_id}:{}", call.id));
    }
    span
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
    /// The tool asks a person questions, or waits for work elsewhere
    /// (checked: a set that can be shown, a state that can be journaled,
    /// within the rounds a call may ask).
    Round(Round),
}

async fn invoke(
    agent: &Agent,
    registry: &Registry,
    ctx: &RunContext,
    call: &PersistedToolCall,
    decision: Option<&SettledReply>,
    answers: Option<ToolAnswers>,
) -> Invocation {
    let offered = agent.tools.iter().any(|t| t == &call.name);
    let Some(tool) = registry.tool(&call.name).filter(|_| offered) else {
        return Invocation::Failed(json!({ "error": format!("unknown tool {:?}", call.name) }));
    };
    // Text a model wrote that is not JSON was kept as a string.
    if !call.arguments.is_object() {
        return Invocation::Failed(json!({
            "error": "invalid arguments: expected a JSON object",
            "arguments": call.arguments,
        }));
    }
    let issues = tool.validate(&call.arguments);
    if !issues.is_empty() {
        let (shown, more) = agentenkit_core::questions::shown_issues(&issues);
        let mut failure = json!({ "error": "invalid arguments", "issues": shown });
        if more {
            failure["moreIssues"] = json!(true);
        }
        return Invocation::Failed(failure);
    }
    let tool_ctx = ToolContext {
        run_id: ctx.lease.run_id,
        thread_id: ctx.lease.thread_id,
        tool_call_id: call.id.clone(),
        approval: decision.map(|d| Approval {
            approved: true,
            payload: d.payload.clone(),
        }),
        answers,
    };
    let resumed = tool_ctx.approval.is_some() || tool_ctx.answers.is_some();
    let round = tool_ctx.answers.as_ref().map_or(1, |a| a.round + 1);
    match tool.tool.execute(call.arguments.clone(), &tool_ctx).await {
        Ok(value) => Invocation::Done(without_nul(value)),
        // A tool's own words may hold what Postgres cannot store.
        Err(ToolError::Failed(message)) => {
            Invocation::Failed(without_nul(json!({ "error": message })))
        }
        Err(ToolError::Transient(message)) => Invocation::Unavailable(message),
        Err(ToolError::Park(_)) if resumed => Invocation::Failed(json!({
            "error": "the tool parked again from its resumed call; a second wait needs a new tool call"
        })),
        // A tool's words again: a NUL would fail the park's insert, every
        // time the step is retried.
        Err(ToolError::Park(request)) => Invocation::Park(crate::tool::ParkRequest {
            reason: request.reason.replace('\0', "\u{FFFD}"),
            payload: without_nul(request.payload),
            ttl_ms: request.ttl_ms,
        }),
        Err(ToolError::Ask(request)) => asked(*request, round),
        Err(ToolError::Await(request)) => awaited(*request, round),
    }
}

/// A tool's wait as the call can park it, or the failure the model sees
/// instead: a state or payload too large to journal, or one round too
/// many.
fn awaited(request: AwaitRequest, round: u32) -> Invocation {
    if round > MAX_ASK_ROUNDS {
        return Invocation::Failed(json!({
            "error": format!("the tool asked more than {MAX_ASK_ROUNDS} rounds of questions or waits in one call"),
        }));
    }
    let json_len = agentenkit_core::canonical::json_len;
    if json_len(&request.state) > MAX_ASK_STATE_BYTES
        || json_len(&request.payload) > MAX_ASK_STATE_BYTES
    {
        return Invocation::Failed(json!({
            "error": format!("the tool's wait carries over {MAX_ASK_STATE_BYTES} bytes of state or payload"),
        }));
    }
    // The tool's words: a NUL would fail the park's insert on every retry.
    Invocation::Round(Round::Await(AwaitRequest {
        reason: request.reason.replace('\0', "\u{FFFD}"),
        payload: without_nul(request.payload),
        state: without_nul(request.state),
        ..request
    }))
}

/// A tool's questions as the call can ask them, or the failure the model
/// sees instead: a set nobody could answer, a state too large to journal,
/// or one round too many.
fn asked(request: AskRequest, round: u32) -> Invocation {
    if round > MAX_ASK_ROUNDS {
        return Invocation::Failed(json!({
            "error": format!("the tool asked more than {MAX_ASK_ROUNDS} rounds of questions or waits in one call"),
        }));
    }
    let issues = request.questions.issues();
    if !issues.is_empty() {
        let (shown, _) = agentenkit_core::questions::shown_issues(&issues);
        return Invocation::Failed(without_nul(json!({
            "error": "the tool asked questions that cannot be shown",
            "issues": shown,
        })));
    }
    if agentenkit_core::canonical::json_len(&request.state) > MAX_ASK_STATE_BYTES {
        return Invocation::Failed(json!({
            "error": format!("the tool's question state is over {MAX_ASK_STATE_BYTES} bytes"),
        }));
    }
    let request = serde_json::to_value(&request)
        .map(without_nul)
        .and_then(serde_json::from_value);
    match request {
        Ok(request) => Invocation::Round(Round::Ask(request)),
        Err(e) => Invocation::Failed(json!({ "error": format!("the tool's questions: {e}") })),
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

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
