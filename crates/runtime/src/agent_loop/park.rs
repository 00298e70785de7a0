//! The park of a finished step: one transaction for every request it opens
//! and every child run it starts.

use agentenkit_core::{CallEvent, EventType, QueueMessage, RunId, ToolKind};
use agentenkit_store::{Change, RunContext};
use chrono::SubsecRound;
use serde_json::{json, Value};

use super::checkpoint::Checkpointer;
use super::error::SegmentError;
use super::outcome::{ParkItem, PersistedToolCall, Wait};
use crate::agent::Registry;
use crate::tool::ParkRequest;

/// The shortest wait for work elsewhere: a server's `ttlMs` of 0 must not
/// expire (and so give up) its task the moment it parks.
const MIN_WAIT_MS: u64 = 1_000;
use crate::metrics;

/// Writes the park of a finished step in one transaction: each new
/// request becomes open with its expiry and one `INPUT_REQUIRED`, each
/// new delegation starts its child run, the run waits and its lease is
/// released. A stop that committed first took the lease: the park
/// changes nothing.
pub(super) async fn park(
    registry: &Registry,
    ctx: &RunContext,
    cp: &mut Checkpointer<'_>,
    to_park: Vec<ParkItem>,
) -> Result<(), SegmentError> {
    let agent_ttl_ms = registry
        .agent(&ctx.lease.run_name)
        .map_or(crate::config::DEFAULT_HITL_TTL_MS, |a| a.hitl_ttl_ms);
    let mut changes = Vec::with_capacity(to_park.len() * 3 + 1);
    let mut requests = 0u64;
    for item in &to_park {
        let (item_changes, opens_request) = park_item(registry, ctx, item, agent_ttl_ms);
        requests += u64::from(opens_request);
        changes.extend(item_changes);
    }
    changes.push(Change::WaitRun);
    cp.commit_end(changes, "park").await?;
    ::metrics::counter!(metrics::PARKS).increment(requests);
    tracing::info!(
        requests,
        delegations = to_park.len() as u64 - requests,
        "run waits"
    );
    Ok(())
}

/// The changes that park one call, and whether it opens a request (a
/// delegation starts a child run instead).
fn park_item(
    registry: &Registry,
    ctx: &RunContext,
    ParkItem { call, wait }: &ParkItem,
    agent_ttl_ms: u64,
) -> (Vec<Change>, bool) {
    match wait {
        // The child runs on its agent's version as this run's registry has
        // it (its own, pinned apart from this run's).
        Wait::Delegate { task } => (
            vec![Change::StartChild {
                call_id: call.id.clone(),
                child_run_id: RunId::new(),
                name: call.name.clone(),
                version: registry.agent_version(&call.name).map(|v| v.hash.clone()),
                task: task.clone(),
                trace: delegation_span(call),
            }],
            false,
        ),
        // Questions never expire: a timer that applied the defaults would
        // manufacture consent from silence. The row holds the validated
        // set the frame carries, so the inbox, the frame and answer
        // resolution agree.
        Wait::Ask { frame, reason } => (
            vec![
                Change::Call {
                    id: call.id.clone(),
                    event: CallEvent::Park {
                        kind: ToolKind::Ask,
                        reason: reason.clone(),
                        arguments: Some(frame["request"].clone()),
                        expires_at: None,
                    },
                },
                Change::Event {
                    event_type: EventType::Elicitation,
                    data: frame.clone(),
                },
            ],
            true,
        ),
        // A tool's questions: shown as any question set, but they belong
        // to a call in progress, which they must not hold for ever.
        // (Their watch, if any, was recorded with their row.)
        Wait::ToolAsk { frame, reason, .. } => {
            (tool_questions(ctx, call, frame, reason, agent_ttl_ms), true)
        }
        Wait::Approval => {
            let wait = (ToolKind::Approval, "approval", None);
            (timed_request(registry, ctx, call, wait, agent_ttl_ms), true)
        }
        Wait::Budget => {
            let wait = (ToolKind::Approval, "budget", None);
            (timed_request(registry, ctx, call, wait, agent_ttl_ms), true)
        }
        Wait::Job(request) => (job(registry, ctx, call, request, agent_ttl_ms), true),
        // A job a worker checks on (its first check went with its row),
        // for no longer than the agent's `hitl_ttl_ms`.
        Wait::Polled { request } => {
            let request = ParkRequest {
                ttl_ms: Some(
                    request
                        .ttl_ms
                        .map_or(agent_ttl_ms, |ttl| ttl.min(agent_ttl_ms))
                        .max(MIN_WAIT_MS),
                ),
                ..request.clone()
            };
            (job(registry, ctx, call, &request, agent_ttl_ms), true)
        }
    }
}

/// A job's request: the tool's payload shown as its arguments, open until
/// its own expiry (the agent's `hitl_ttl_ms` when it set none).
fn job(
    registry: &Registry,
    ctx: &RunContext,
    call: &PersistedToolCall,
    request: &crate::tool::ParkRequest,
    agent_ttl_ms: u64,
) -> Vec<Change> {
    let wait = (
        ToolKind::Park,
        request.reason.as_str(),
        Some(request.payload.clone()),
    );
    let ttl_ms = request.ttl_ms.unwrap_or(agent_ttl_ms);
    timed_request(registry, ctx, call, wait, ttl_ms)
}

/// An approval's or a job's request: open until it expires, with one
/// `INPUT_REQUIRED`, its expiry, and a reminder when its tool escalates.
fn timed_request(
    registry: &Registry,
    ctx: &RunContext,
    call: &PersistedToolCall,
    (kind, reason, arguments): (ToolKind, &str, Option<Value>),
    ttl_ms: u64,
) -> Vec<Change> {
    let run_id = ctx.lease.run_id;
    let (ttl_ms, expires_at) = deadline(ttl_ms);
    let event = json!({
        "toolCallId": call.id,
        "runId": run_id,
        "toolName": call.name,
        "arguments": arguments.as_ref().unwrap_or(&call.arguments),
        "kind": kind,
        "reason": reason,
        "runName": ctx.lease.run_name,
        "depth": ctx.lease.depth,
        "expiresAt": expires_at,
    });
    let mut changes = vec![
        Change::Call {
            id: call.id.clone(),
            event: CallEvent::Park {
                kind,
                reason: reason.to_owned(),
                arguments,
                expires_at: Some(expires_at),
            },
        },
        Change::Event {
            event_type: EventType::InputRequired,
            data: event,
        },
        expiry(ctx, call, ttl_ms),
    ];
    // A reminder due before the expiry goes with it, on the delay ladder;
    // it finds the request answered, or reminds.
    if let Some(escalation) = registry.escalation(&call.name) {
        let remind_ms = escalation.remind_after.as_millis() as u64;
        if remind_ms < ttl_ms {
            changes.push(Change::Outbox {
                message: QueueMessage::Remind {
                    run_id,
                    tool_call_id: call.id.clone(),
                },
                delay_ms: remind_ms,
            });
        }
    }
    changes
}

/// The park of a round of a tool's questions (its own row): open until
/// the agent's `hitl_ttl_ms` runs out, with its `ELICITATION` frame, which
/// says when.
fn tool_questions(
    ctx: &RunContext,
    row: &PersistedToolCall,
    frame: &Value,
    reason: &str,
    ttl_ms: u64,
) -> Vec<Change> {
    let (ttl_ms, expires_at) = deadline(ttl_ms);
    let mut frame = frame.clone();
    frame["expiresAt"] = json!(expires_at);
    vec![
        Change::Call {
            id: row.id.clone(),
            event: CallEvent::Park {
                kind: ToolKind::Ask,
                reason: reason.to_owned(),
                arguments: None,
                expires_at: Some(expires_at),
            },
        },
        Change::Event {
            event_type: EventType::Elicitation,
            data: frame,
        },
        expiry(ctx, row, ttl_ms),
    ]
}

/// A request's wait from now: its ttl as the delay ladder can hold it (a
/// Rust tool may ask for anything; the ladder reaches 49 days), and when it
/// expires, to the microsecond Postgres keeps, so the event says what the
/// row says.
fn deadline(ttl_ms: u64) -> (u64, chrono::DateTime<chrono::Utc>) {
    let ttl_ms = ttl_ms.clamp(1, crate::tool::MAX_TTL_MS);
    let expires_at =
        (chrono::Utc::now() + chrono::Duration::milliseconds(ttl_ms as i64)).trunc_subsecs(6);
    (ttl_ms, expires_at)
}

/// The expiry message of `call`'s request, due after `ttl_ms`.
fn expiry(ctx: &RunContext, call: &PersistedToolCall, ttl_ms: u64) -> Change {
    Change::Outbox {
        message: QueueMessage::Expiry {
            run_id: ctx.lease.run_id,
            tool_call_id: call.id.clone(),
        },
        delay_ms: ttl_ms,
    }
}

/// The context a child run's trace continues from: a span of the
/// delegating call (when traces are exported), so that the sub-agent's
/// run is its child.
fn delegation_span(call: &PersistedToolCall) -> Option<agentenkit_core::TraceContext> {
    if !crate::trace::exporting() {
        return None;
    }
    let span = tracing::info_span!(
        "tool",
        tool_call_id = %call.id,
        tool = %call.name,
        outcome = "delegated",
    );
    crate::trace::of(&span)
}
