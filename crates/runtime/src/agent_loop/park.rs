//! The park of a finished step: one transaction for every request it opens
//! and every child run it starts.

use agentenkit_core::{CallEvent, EventType, QueueMessage, RunId, ToolKind};
use agentenkit_store::{Change, RunContext};
use chrono::SubsecRound;
use serde_json::json;

use super::checkpoint::Checkpointer;
use super::error::SegmentError;
use super::outcome::{ParkItem, Wait};
use crate::agent::Registry;
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
    let run_id = ctx.lease.run_id;
    let mut changes = Vec::with_capacity(to_park.len() * 3 + 1);
    let mut requests = 0u64;
    for ParkItem { call, wait } in &to_park {
        let (kind, reason, arguments, ttl_ms) = match wait {
            Wait::Delegate { task } => {
                // The child runs on its agent's version as this run's
                // registry has it (its own, pinned apart from this run's).
                changes.push(Change::StartChild {
                    call_id: call.id.clone(),
                    child_run_id: RunId::new(),
                    name: call.name.clone(),
                    version: registry.agent_version(&call.name).map(|v| v.hash.clone()),
                    task: task.clone(),
                });
                continue;
            }
            Wait::Ask { frame, reason } => {
                // Questions never expire: a timer that applied the
                // defaults would manufacture consent from silence.
                requests += 1;
                // The row holds the validated set the frame carries, so
                // the inbox, the frame and answer resolution agree.
                changes.push(Change::Call {
                    id: call.id.clone(),
                    event: CallEvent::Park {
                        kind: ToolKind::Ask,
                        reason: reason.clone(),
                        arguments: Some(frame["request"].clone()),
                        expires_at: None,
                    },
                });
                changes.push(Change::Event {
                    event_type: EventType::Elicitation,
                    data: frame.clone(),
                });
                continue;
            }
            Wait::Approval => (ToolKind::Approval, "approval", None, agent_ttl_ms),
            Wait::Job(request) => (
                ToolKind::Park,
                request.reason.as_str(),
                Some(request.payload.clone()),
                request.ttl_ms.unwrap_or(agent_ttl_ms),
            ),
        };
        requests += 1;
        // A Rust tool may ask for anything; the ladder reaches 49 days.
        let ttl_ms = ttl_ms.clamp(1, crate::tool::MAX_TTL_MS);
        // Postgres keeps microseconds: the event must say what the row says.
        let expires_at =
            (chrono::Utc::now() + chrono::Duration::milliseconds(ttl_ms as i64)).trunc_subsecs(6);
        changes.push(Change::Call {
            id: call.id.clone(),
            event: CallEvent::Park {
                kind,
                reason: reason.to_owned(),
                arguments: arguments.clone(),
                expires_at: Some(expires_at),
            },
        });
        changes.push(Change::Event {
            event_type: EventType::InputRequired,
            data: json!({
                "toolCallId": call.id,
                "runId": run_id,
                "toolName": call.name,
                "arguments": arguments.as_ref().unwrap_or(&call.arguments),
                "kind": kind,
                "reason": reason,
                "runName": ctx.lease.run_name,
                "depth": ctx.lease.depth,
                "expiresAt": expires_at,
            }),
        });
        changes.push(Change::Outbox {
            message: QueueMessage::Expiry {
                run_id,
                tool_call_id: call.id.clone(),
            },
            delay_ms: ttl_ms,
        });
        // A reminder due before the expiry goes with it, on the delay
        // ladder; it finds the request answered, or reminds.
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
