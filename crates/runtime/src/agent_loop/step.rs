//! The step loop of a segment: model call, the calls it makes, their
//! results or waits, until the run completes or parks.

use std::collections::HashSet;

use agentenkit_core::conversation::{Message, ModelResponse};
use agentenkit_core::denials::DeniedCalls;
use agentenkit_core::journal::names;
use agentenkit_core::reply::DEFAULT_REJECTION;
use agentenkit_core::{EventType, ToolCallId, ToolCallStatus, ToolKind};
use agentenkit_store::{Change, RunContext};
use serde_json::json;
use tracing::Instrument;

use super::budget::{self, RunBudget};
use super::calls::{needs_park, persist_tool_call};
use super::checkpoint::{Checkpointer, Durability};
use super::delegation::{await_delegation, delegation_task, StepDelegations};
use super::elicitation;
use super::error::SegmentError;
use super::outcome::{Outcome, ParkItem, PersistedToolCall, Wait};
use super::results::{await_reply, record_unrun, tool_message, without_nul};
use super::rounds::{run_function, run_to_end, Ran};
use crate::agent::{Agent, Registry};
use crate::model::ModelRequest;
use crate::tool::ToolSpec;

/// What one turn of a run works with: the agent, its tools, the run, and
/// the conversation as the steps add to it.
struct Turn<'a> {
    agent: &'a Agent,
    registry: &'a Registry,
    ctx: &'a RunContext,
    tools: Vec<ToolSpec>,
    conversation: Vec<Message>,
    /// The calls a person denied so far in this run (rebuilt by replay).
    denied: DeniedCalls,
}

/// Advances the run until it completes (or fails with an error that says
/// what to do with it).
pub async fn run_turn(
    agent: &Agent,
    registry: &Registry,
    ctx: &RunContext,
    cp: &mut Checkpointer<'_>,
) -> Result<Outcome, SegmentError> {
    let mut turn = Turn {
        agent,
        registry,
        ctx,
        tools: registry.tool_specs(agent),
        conversation: ctx.history.clone(),
        denied: DeniedCalls::default(),
    };
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
        elicitation::intake(cp, agent.intake.as_ref(), ctx, &mut turn.conversation).await?
    {
        return Ok(Outcome::Park { to_park });
    }
    // A model that never stops calling tools parks at its budget (64
    // model calls unless the agent says) and asks for more.
    let mut run_budget = RunBudget::new(agent);
    for n in 0.. {
        if let Some(to_park) = budget::check(cp, ctx, &mut run_budget, n).await? {
            return Ok(Outcome::Park { to_park });
        }
        turn.join_steering(cp, n).await?;
        let response = turn.model_call(cp, n).await?;
        run_budget.spend(&response);
        turn.conversation.push(Message::assistant(&response));
        for call in &response.tool_calls {
            // An id is shown to people and keys the call's row: one that is
            // too long or hides characters fails the run (decided from the
            // journaled response, so replay agrees).
            if let Err(invalid) = ToolCallId::check(call.id.as_str()) {
                return Err(SegmentError::Permanent(format!(
                    "the model gave a tool call id that cannot be used: {invalid}"
                )));
            }
            // The rows of budget requests are `budget~<n>`.
            if call.id.as_str().starts_with("budget~") {
                return Err(SegmentError::Permanent(format!(
                    "the model gave tool call id {:?}, which names a budget request",
                    call.id.as_str()
                )));
            }
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
        let waiting = turn.start_calls(cp, &response).await?;
        if let Some(to_park) = turn.settle_waits(cp, waiting).await? {
            return Ok(Outcome::Park { to_park });
        }
    }
    Err(SegmentError::Permanent(
        "the run made more model calls than can be counted".into(),
    ))
}

/// The span of model call `n` by the OpenTelemetry GenAI conventions
/// (operation, system, requested model, then token usage); no prompt or
/// answer text. Made only when traces are exported, and only for a call
/// made now: a replayed call reads the journal and makes none.
fn model_span(model: &dyn crate::Model, n: u32) -> tracing::Span {
    if !crate::trace::exporting() {
        return tracing::Span::none();
    }
    let id = model.id();
    tracing::info_span!(
        "chat",
        otel.name = format!("chat {}", id.model),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.system = id.provider,
        gen_ai.provider.name = id.provider,
        gen_ai.request.model = id.model,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        model_call = n,
    )
}

fn record_usage(span: &tracing::Span, response: &ModelResponse) {
    span.record("gen_ai.usage.input_tokens", response.usage.input_tokens);
    span.record("gen_ai.usage.output_tokens", response.usage.output_tokens);
}

impl Turn<'_> {
    /// The messages sent to the run while it worked join the conversation
    /// before model call `n`, journaled as `steer:<n>` with their messages
    /// and `MESSAGE` events, and taken out of the queue in that commit:
    /// each joins once, whatever crashes. Asked of the store only when the
    /// lease or the last commit said some wait; a replay reads the journal.
    async fn join_steering(
        &mut self,
        cp: &mut Checkpointer<'_>,
        n: u32,
    ) -> Result<(), SegmentError> {
        let waiting = if cp.next_is_numbered("steer", n) {
            Vec::new()
        } else if !cp.is_replaying() && cp.steered() {
            let waiting = cp.engine.steering(self.ctx.lease.run_id).await?;
            if waiting.is_empty() {
                return Ok(());
            }
            waiting
        } else {
            return Ok(());
        };
        let run_id = self.ctx.lease.run_id;
        let texts: Vec<String> = cp
            .checkpoint(names::steer(n), Durability::Decided, || async move {
                let mut changes = vec![Change::TakeSteering {
                    positions: waiting.iter().map(|w| w.position).collect(),
                }];
                for steering in &waiting {
                    let message = Message::User {
                        content: steering.content.clone(),
                    };
                    changes.push(Change::Event {
                        event_type: EventType::Message,
                        data: json!({ "runId": run_id, "message": message, "steered": true }),
                    });
                    changes.push(Change::SteeredMessage {
                        content: steering.content.clone(),
                    });
                }
                let texts = waiting.into_iter().map(|w| w.content).collect();
                Ok((texts, changes))
            })
            .await?;
        self.conversation
            .extend(texts.into_iter().map(|content| Message::User { content }));
        Ok(())
    }

    /// Model call `n`: journaled with the assistant message and its
    /// `MESSAGE` event, or read back from the journal on replay.
    async fn model_call(
        &self,
        cp: &mut Checkpointer<'_>,
        n: u32,
    ) -> Result<ModelResponse, SegmentError> {
        let run_id = self.ctx.lease.run_id;
        let engine = cp.engine;
        cp.checkpoint(names::model(n), Durability::Decided, || async {
            let request = ModelRequest {
                call_index: n,
                system: &self.agent.system,
                messages: &self.conversation,
                tools: &self.tools,
            };
            let reservation = super::provider_limit::reserve(engine, self.agent, &request).await?;
            let span = model_span(&*self.agent.model, n);
            let response = self
                .agent
                .model
                .complete(request)
                .instrument(span.clone())
                .await
                .inspect(|response| record_usage(&span, response))
                .map_err(|e| match e {
                    crate::ModelError::Transient(_) => SegmentError::Retry(e.to_string()),
                    crate::ModelError::Refused { status, message } => {
                        SegmentError::ModelRefused { status, message }
                    }
                    crate::ModelError::Unusable(_) => SegmentError::Permanent(e.to_string()),
                    crate::ModelError::RateLimited { provider, wait, .. } => {
                        SegmentError::RateLimited {
                            provider: provider.to_owned(),
                            cause: "retry_after",
                            wait,
                            message: e.to_string(),
                        }
                    }
                })?;
            let response: ModelResponse = serde_json::to_value(&response)
                .map(without_nul)
                .and_then(serde_json::from_value)
                .map_err(|e| SegmentError::Permanent(format!("model response: {e}")))?;
            ::metrics::counter!(crate::metrics::MODEL_CALLS).increment(1);
            let message = Message::assistant(&response);
            let mut changes = vec![
                Change::Event {
                    event_type: EventType::Message,
                    data: json!({ "runId": run_id, "message": message }),
                },
                Change::Message(message),
                // No usage row: the journal's `model:<n>` holds it.
            ];
            if let Some(reservation) = reservation {
                changes.push(Change::RecordProviderUsage {
                    reservation,
                    tokens: response.usage.input_tokens + response.usage.output_tokens,
                });
            }
            Ok((response, changes))
        })
        .await
    }

    /// Persists each call of a response and runs its function tools at
    /// once; returns the calls that wait (approvals, parks, questions,
    /// delegations), handled once every call of the step is, so a park is
    /// written only for a step that finished.
    async fn start_calls(
        &mut self,
        cp: &mut Checkpointer<'_>,
        response: &ModelResponse,
    ) -> Result<Vec<Waiting>, SegmentError> {
        let (agent, registry, ctx) = (self.agent, self.registry, self.ctx);
        let run_id = ctx.lease.run_id;
        let mut waiting = Vec::new();
        let mut delegations = StepDelegations::default();
        for (index, call) in response.tool_calls.iter().enumerate() {
            let persisted = persist_tool_call(cp, agent, registry, run_id, call).await?;
            if let Some(refused) = self.past_call_cap(cp, index, &persisted).await? {
                self.conversation.push(tool_message(&persisted, refused));
                continue;
            }
            let started = match persisted.kind {
                ToolKind::Function => {
                    match run_function(cp, agent, registry, ctx, &persisted).await? {
                        Ran::Result(result) => Err(result),
                        Ran::Parked(wait) => Ok(wait),
                        // Its tool's questions: settled (or not) by its
                        // rounds, not by a reply of its own.
                        Ran::Waits(item) => {
                            waiting.push(Waiting::Asking(item));
                            continue;
                        }
                    }
                }
                ToolKind::Approval => match self.refused_repeat(cp, &persisted).await? {
                    Some(refused) => Err(refused),
                    None => Ok(Some(Wait::Approval)),
                },
                ToolKind::Ask => elicitation::ask_call(cp, ctx, &persisted).await?.map(Some),
                ToolKind::Delegate => delegation_task(
                    cp,
                    &ctx.lease,
                    &persisted,
                    registry.delegation_limits(),
                    &mut delegations,
                )
                .await?
                .map(|task| Some(Wait::Delegate { task })),
                other => {
                    return Err(SegmentError::Permanent(format!(
                        "tool call {} has kind {other}, which this worker cannot run",
                        persisted.id
                    )))
                }
            };
            match started {
                Ok(wait) => waiting.push(Waiting::Reply(persisted, wait)),
                Err(result) => self.conversation.push(tool_message(&persisted, result)),
            }
        }
        Ok(waiting)
    }

    /// The failure of call `index` of a response past
    /// `max_tool_calls_per_step`, journaled as its `exec:` entry (nothing
    /// runs, nobody is asked); `None` for a call within the cap. Once
    /// journaled a replay reads it back whatever the cap has become, and a
    /// call that waits on something other than its own run is never
    /// refused on replay.
    async fn past_call_cap(
        &self,
        cp: &mut Checkpointer<'_>,
        index: usize,
        call: &PersistedToolCall,
    ) -> Result<Option<serde_json::Value>, SegmentError> {
        let cap = self.registry.max_tool_calls_per_step();
        // A function call's `exec:` entry is its own outcome, read back by
        // running it; any other kind's is a refusal like this one.
        let journaled = call.kind != ToolKind::Function && cp.next_is(&names::exec(&call.id));
        let refuse_now = !cp.is_replaying() && index >= cap as usize;
        if !journaled && !refuse_now {
            return Ok(None);
        }
        let failure = json!({
            "error": "too many tool calls",
            "message": format!(
                "one response may make at most {cap} tool calls (max_tool_calls_per_step); make the rest in a later step"
            ),
        });
        let run_id = self.ctx.lease.run_id;
        let refused = record_unrun(cp, run_id, call, ToolCallStatus::Failed, failure).await?;
        Ok(Some(refused))
    }

    /// The refusal of an approval call a person denied before in this run
    /// with the same arguments, journaled as its `exec:` entry (nobody is
    /// asked); `None` when the call is to be asked. Once journaled, a
    /// replay refuses it again whatever the tool's setting has become, and
    /// a call that was asked is never refused on replay.
    async fn refused_repeat(
        &self,
        cp: &mut Checkpointer<'_>,
        call: &PersistedToolCall,
    ) -> Result<Option<serde_json::Value>, SegmentError> {
        let refusal = self.denied.refusal(&call.name, &call.arguments);
        let journaled = cp.next_is(&names::exec(&call.id));
        let refuse_now = !cp.is_replaying()
            && refusal.is_some()
            && self
                .registry
                .tool(&call.name)
                .is_some_and(|tool| tool.tool.refuses_repeated_denials());
        if !journaled && !refuse_now {
            return Ok(None);
        }
        if refuse_now {
            tracing::info!(tool_call_id = %call.id, "a denied call proposed again: refused without asking");
            ::metrics::counter!(crate::metrics::REPEATED_DENIALS).increment(1);
        }
        // On replay the journaled refusal is what the model reads.
        let result = refusal.unwrap_or(serde_json::Value::Null);
        let run_id = self.ctx.lease.run_id;
        let refused = record_unrun(cp, run_id, call, ToolCallStatus::Rejected, result).await?;
        Ok(Some(refused))
    }

    /// Settles the waiting calls that have their answer (or child run's
    /// end), in call order; `Some(to_park)` once one still waits: every
    /// later one waits with it (but is parked now if it is new).
    async fn settle_waits(
        &mut self,
        cp: &mut Checkpointer<'_>,
        waiting: Vec<Waiting>,
    ) -> Result<Option<Vec<ParkItem>>, SegmentError> {
        let mut to_park: Vec<ParkItem> = Vec::new();
        let mut blocked = false;
        for waits in waiting {
            let (call, wait) = match waits {
                // Its rounds found it waiting: park what they said.
                Waiting::Asking(item) => {
                    blocked = true;
                    to_park.extend(item);
                    continue;
                }
                Waiting::Reply(call, wait) => (call, wait),
            };
            let settled = if blocked {
                Ran::Waits(None)
            } else {
                self.settled_result(cp, &call).await?
            };
            match settled {
                Ran::Result(result) => self.conversation.push(tool_message(&call, result)),
                Ran::Waits(Some(item)) => {
                    blocked = true;
                    to_park.push(item);
                }
                // Its reply, or its tool's next round, is still awaited.
                Ran::Parked(_) | Ran::Waits(None) => {
                    blocked = true;
                    if let Some(wait) = wait {
                        if needs_park(cp, &call)? {
                            to_park.push(ParkItem { call, wait });
                        }
                    }
                }
            }
        }
        Ok(blocked.then_some(to_park))
    }

    /// The result of a waiting call once it has one: its child run's end,
    /// or its reply (a denial or answers as they are, an approval by
    /// running the tool with the reply's payload, which may ask questions
    /// and wait again).
    async fn settled_result(
        &mut self,
        cp: &mut Checkpointer<'_>,
        call: &PersistedToolCall,
    ) -> Result<Ran, SegmentError> {
        let run_id = self.ctx.lease.run_id;
        if call.kind == ToolKind::Delegate {
            let ended = await_delegation(cp, run_id, call).await?;
            return Ok(ended.map_or(Ran::Waits(None), Ran::Result));
        }
        let name = names::tool(run_id, &call.id);
        let Ok(reply) = await_reply(cp, run_id, call, name, true).await? else {
            return Ok(Ran::Waits(None));
        };
        // A person's denial (not an expiry) is remembered: the same call
        // proposed again is refused without asking.
        if call.kind == ToolKind::Approval
            && !reply.approved
            && reply.status == ToolCallStatus::Rejected
        {
            let reason = reply.reason.as_deref().unwrap_or(DEFAULT_REJECTION);
            self.denied
                .remember(call.id.as_str(), &call.name, &call.arguments, reason);
        }
        if let Some(result) = reply.answers_result().or_else(|| reply.denial()) {
            return Ok(Ran::Result(result));
        }
        let (agent, registry, ctx) = (self.agent, self.registry, self.ctx);
        run_to_end(cp, agent, registry, ctx, call, Some(&reply)).await
    }
}

/// A call of the step that did not finish when it started.
enum Waiting {
    /// It waits for its own reply or child run (with how to park it when it
    /// has not been parked).
    Reply(PersistedToolCall, Option<Wait>),
    /// Its tool asked questions, and their round still waits (with the row
    /// to park when it is new).
    Asking(Option<ParkItem>),
}
