//! The agent loop: a deterministic function replayed over the run's journal.
//!
//! Every effect goes through [`Checkpointer::checkpoint`]: replayed from the
//! journal when it is there, run and journaled (with the rows it changes, in
//! one transaction) when it is not. A worker that dies anywhere leaves a
//! journal from which the next worker carries on without repeating an effect.

use std::future::Future;
use std::sync::Arc;

use agentenkit_core::conversation::{Message, ModelResponse, ToolCallRequest};
use agentenkit_core::journal::names;
use agentenkit_core::{
    EventType, JournalEntry, Replay, ReplayStep, ToolCallId, ToolCallStatus, ToolKind,
};
use agentenkit_store::{Change, Lease, RunContext, Store};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tracing::Instrument;

use crate::agent::{Agent, Registry};
use crate::model::ModelRequest;
use crate::relay::Relay;
use crate::tool::{ToolContext, ToolError};
use crate::worker::SegmentError;

/// A run makes at most this many model calls: a model that never stops
/// calling tools fails the run instead of looping for ever.
pub const MAX_MODEL_CALLS: u32 = 64;

/// A test hook: called with each new checkpoint's name right after it
/// committed; `true` makes the worker die there (no ack, no release).
pub type CrashPoint = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// How a segment of a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Completed { output: Option<String> },
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

/// Journal access for one segment of one run, fenced by its lease.
pub struct Checkpointer<'a> {
    store: &'a Store,
    relay: &'a Relay,
    lease: &'a Lease,
    replay: Replay,
    crash: Option<&'a CrashPoint>,
}

impl<'a> Checkpointer<'a> {
    pub fn new(
        store: &'a Store,
        relay: &'a Relay,
        lease: &'a Lease,
        journal: Vec<JournalEntry>,
        crash: Option<&'a CrashPoint>,
    ) -> Self {
        Self {
            store,
            relay,
            lease,
            replay: Replay::new(journal),
            crash,
        }
    }

    /// Starts reading the journal from the top again (a retried attempt).
    pub fn rewind(&mut self) {
        self.replay = Replay::new(self.replay.entries().to_vec());
    }

    /// The checkpoint `name`: its journaled value, or else the value of
    /// `effect`, committed together with the changes the effect returns.
    pub async fn checkpoint<T, F, Fut>(
        &mut self,
        name: String,
        effect: F,
    ) -> Result<T, SegmentError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(T, Vec<Change>), SegmentError>>,
    {
        let position = match self.replay.next(&name) {
            Ok(ReplayStep::Replayed(value)) => {
                return serde_json::from_value(value).map_err(|e| {
                    SegmentError::Permanent(format!("journal entry {name} is unreadable: {e}"))
                });
            }
            Ok(ReplayStep::Record { position }) => position,
            Err(e) => return Err(SegmentError::Permanent(e.to_string())),
        };
        let (value, mut changes) = effect().await?;
        let json = serde_json::to_value(&value)
            .map_err(|e| SegmentError::Permanent(format!("checkpoint {name}: {e}")))?;
        changes.insert(
            0,
            Change::Journal {
                position,
                name: name.clone(),
                value: json.clone(),
            },
        );
        let outbox = self.store.commit(self.lease, &changes).await?;
        self.relay.publish(&outbox).await;
        self.replay.recorded(JournalEntry {
            position,
            name: name.clone(),
            value: json,
        });
        if self.crash.is_some_and(|crash| crash(&name)) {
            return Err(SegmentError::Crashed);
        }
        Ok(value)
    }
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
    for n in 0..MAX_MODEL_CALLS {
        let response: ModelResponse = cp
            .checkpoint(names::model(n), || async {
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
        if response.tool_calls.is_empty() {
            return Ok(Outcome::Completed {
                output: response.text,
            });
        }
        for call in &response.tool_calls {
            let persisted = persist_tool_call(cp, agent, registry, run_id, call).await?;
            match persisted.kind {
                ToolKind::Function => {
                    let result = execute(cp, agent, registry, ctx, &persisted).await?;
                    conversation.push(Message::Tool {
                        tool_call_id: persisted.id.clone(),
                        name: persisted.name.clone(),
                        content: result,
                    });
                }
                other => {
                    return Err(SegmentError::Permanent(format!(
                        "tool call {} has kind {other}, which this worker cannot run",
                        persisted.id
                    )))
                }
            }
        }
    }
    Err(SegmentError::Permanent(format!(
        "the run made {MAX_MODEL_CALLS} model calls without finishing"
    )))
}

/// Resolves the call's kind and persists the row; on replay the kind comes
/// back from the journal, never from the registry of this process.
async fn persist_tool_call(
    cp: &mut Checkpointer<'_>,
    _agent: &Agent,
    _registry: &Registry,
    run_id: agentenkit_core::RunId,
    call: &ToolCallRequest,
) -> Result<PersistedToolCall, SegmentError> {
    cp.checkpoint(names::persist_toolcall(&call.id), || async {
        let kind = ToolKind::Function;
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
    })
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
) -> Result<Value, SegmentError> {
    let span = tracing::info_span!("tool", tool_call_id = %call.id, tool = %call.name);
    let run_id = ctx.lease.run_id;
    cp.checkpoint(names::exec(&call.id), || {
        async {
            let (result, status) = match invoke(agent, registry, ctx, call).await {
                Invocation::Done(value) => (value, ToolCallStatus::Executed),
                Invocation::Failed(value) => (value, ToolCallStatus::Failed),
                Invocation::Unavailable(message) => return Err(SegmentError::Retry(message)),
            };
            ::metrics::counter!(crate::metrics::TOOL_EXECUTIONS, "status" => status.as_str())
                .increment(1);
            let changes = vec![
                Change::SettleToolCall {
                    id: call.id.clone(),
                    status,
                    result: result.clone(),
                },
                Change::Message(Message::Tool {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                    content: result.clone(),
                }),
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
            ];
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
}

async fn invoke(
    agent: &Agent,
    registry: &Registry,
    ctx: &RunContext,
    call: &PersistedToolCall,
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
        approval: None,
    };
    match tool.tool.execute(call.arguments.clone(), &tool_ctx).await {
        Ok(value) => Invocation::Done(value),
        Err(ToolError::Failed(message)) => Invocation::Failed(json!({ "error": message })),
        Err(ToolError::Transient(message)) => Invocation::Unavailable(message),
    }
}
