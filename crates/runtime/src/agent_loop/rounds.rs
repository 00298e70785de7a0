//! A call's tool run to its end, in rounds when the tool asks questions (an
//! MCP server's `input_required`) or waits for work elsewhere (an MCP
//! server's task).
//!
//! Round `k`'s questions are journaled as `asked:<callId>:<k>` the moment
//! the tool returns them, with the row that asks them (`<callId>~<k>`, of
//! kind `ask`) in the same commit: a crash before it asks the tool again,
//! never a person; a crash after it finds the row. The row parks with the
//! step as a question set that expires after the agent's `hitl_ttl_ms`, is
//! shown and answered like any other, and its reply (`tool:<runId>:<row>`)
//! invokes the tool again with the answers, a skip or the expiry. A wait
//! is a round too: its row is of kind `park`, parked like a job with its
//! own expiry, and a worker checks on the work (`Tool::poll`) through
//! delayed messages until it is ready, then replies to the row as
//! `respond` would. Nothing of a round reaches the conversation: the model
//! reads the call's one result, journaled as `exec:<callId>` when the tool
//! finishes.

use agentenkit_core::journal::names;
use agentenkit_core::reply::SettledReply;
use agentenkit_core::{CallEvent, QueueMessage, RunId, ToolCallId, ToolCallStatus, ToolKind};
use agentenkit_store::{Change, RunContext};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::calls::execute;
use super::checkpoint::{Checkpointer, Durability};
use super::elicitation::frame;
use super::error::SegmentError;
use super::outcome::{ParkItem, PersistedToolCall, Round, Wait};
use super::results::await_reply;
use crate::agent::{Agent, Registry};
use crate::tool::{AskOutcome, AskRequest, ParkRequest, ToolAnswers, MAX_ASK_ROUNDS};

/// What a call came to: its result, or it waits.
pub(super) enum Ran {
    Result(Value),
    /// For its own reply (an approval's, a job's), with how to park it
    /// when it parked just now, without when it parked earlier.
    Parked(Option<Wait>),
    /// For the reply to its tool's questions, with the round's row to park
    /// when it is new.
    Waits(Option<ParkItem>),
}

/// The value of `asked:<callId>:<round>`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Asked {
    /// The row that asks this round's questions, or waits.
    row: ToolCallId,
    #[serde(flatten)]
    round: Round,
}

/// A function call: its journaled output, or it runs now; a tool that asks
/// to park (first call) waits like an approval, one that parked earlier
/// waits for its reply without running again, and one that asks questions
/// runs in rounds.
pub(super) async fn run_function(
    cp: &mut Checkpointer<'_>,
    agent: &Agent,
    registry: &Registry,
    ctx: &RunContext,
    call: &PersistedToolCall,
) -> Result<Ran, SegmentError> {
    // Whether the call ran, parked, asked, or is still to run comes from
    // durable state only: its `exec:` or `asked:` entry, its recorded park
    // request, its row.
    if !cp.next_is(&names::exec(&call.id)) && !journaled_round(cp, call, 1) {
        let row = cp.call(&call.id)?;
        if row.state.status() != ToolCallStatus::Proposed {
            return Ok(Ran::Parked(None));
        }
        if let Some(recorded) = row.park_request().cloned() {
            let request: ParkRequest = serde_json::from_value(recorded)
                .map_err(|e| SegmentError::Permanent(format!("unreadable park request: {e}")))?;
            return Ok(Ran::Parked(Some(Wait::Job(request))));
        }
    }
    match run_to_end(cp, agent, registry, ctx, call, None).await {
        Err(SegmentError::Parked(request)) => {
            let recorded = serde_json::to_value(&request)
                .map_err(|e| SegmentError::Permanent(e.to_string()))?;
            // The tool ran its first half: its decision to park is
            // committed at once, like any effect's outcome.
            cp.buffer(vec![Change::Call {
                id: call.id.clone(),
                event: CallEvent::RecordParkRequest { request: recorded },
            }]);
            cp.flush(None).await?;
            Ok(Ran::Parked(Some(Wait::Job(request))))
        }
        other => other,
    }
}

/// Runs `call`'s tool (with the person's `decision`, once they approved
/// it) until it finishes, round after round while its questions have
/// replies.
pub(super) async fn run_to_end(
    cp: &mut Checkpointer<'_>,
    agent: &Agent,
    registry: &Registry,
    ctx: &RunContext,
    call: &PersistedToolCall,
    decision: Option<&SettledReply>,
) -> Result<Ran, SegmentError> {
    let run_id = ctx.lease.run_id;
    let mut answers = None;
    // The last round's reply still reaches the tool; a round past the
    // last is refused before it is journaled (`calls::asked`), so the
    // final iteration only ever invokes.
    for round in 1..=MAX_ASK_ROUNDS + 1 {
        let asked: Asked = if journaled_round(cp, call, round) {
            let name = names::asked(&call.id, round);
            cp.checkpoint(name, Durability::Derived, || async {
                Err(SegmentError::Permanent(
                    "journaled questions were asked again".into(),
                ))
            })
            .await?
        } else {
            let invocation =
                execute(cp, agent, registry, ctx, call, decision, answers.take()).await;
            match invocation {
                Ok(result) => return Ok(Ran::Result(result)),
                Err(SegmentError::Asked(asked)) => {
                    record_asked(cp, run_id, call, round, *asked).await?
                }
                Err(other) => return Err(other),
            }
        };
        let row = round_call(call, &asked);
        let name = names::tool(run_id, &row.id);
        match await_reply(cp, run_id, &row, name, false).await? {
            Ok(reply) => {
                answers = Some(ToolAnswers {
                    round,
                    outcome: outcome(&asked.round, reply),
                    state: asked.round.state().clone(),
                })
            }
            Err(status) => {
                let wait = (status == ToolCallStatus::Proposed)
                    .then(|| round_wait(ctx, call, &row, asked.round));
                return Ok(Ran::Waits(wait.map(|wait| ParkItem { call: row, wait })));
            }
        }
    }
    // Only a journal from another build can get here: the tool's last
    // round is refused before it is journaled.
    Err(SegmentError::Permanent(format!(
        "tool call {} asked more than {MAX_ASK_ROUNDS} rounds of questions or waits",
        call.id
    )))
}

/// Whether the journal's next entry is round `round` of `call`'s
/// questions. A run that is not replaying has no next entry: the name is
/// not even made then, which every call of a cycle would pay for.
fn journaled_round(cp: &Checkpointer<'_>, call: &PersistedToolCall, round: u32) -> bool {
    cp.is_replaying() && cp.next_is(&names::asked(&call.id, round))
}

/// How a round's new row parks: as a question set of the tool's, or as a
/// job a worker checks on.
fn round_wait(
    ctx: &RunContext,
    call: &PersistedToolCall,
    row: &PersistedToolCall,
    round: Round,
) -> Wait {
    match round {
        Round::Ask(request) => {
            let run_id = ctx.lease.run_id;
            let mut frame = frame(run_id, &row.id, &row.arguments, ctx, &request.reason);
            frame["toolName"] = Value::String(call.name.clone());
            Wait::ToolAsk {
                frame,
                reason: request.reason,
                watch: request.watch,
            }
        }
        Round::Await(request) => Wait::Polled {
            request: ParkRequest {
                reason: request.reason,
                payload: request.payload,
                ttl_ms: request.ttl_ms,
            },
        },
    }
}

/// Journals round `round` (its questions, or its wait) with the row that
/// asks them, at once: the tool ran its first half.
async fn record_asked(
    cp: &mut Checkpointer<'_>,
    run_id: RunId,
    call: &PersistedToolCall,
    round: u32,
    asked: Round,
) -> Result<Asked, SegmentError> {
    let row = round_row_id(cp, &call.id, round);
    let (kind, arguments) = asked.row();
    cp.checkpoint(
        names::asked(&call.id, round),
        Durability::Effect,
        || async move {
            let mut changes = vec![Change::ProposeToolCall {
                id: row.clone(),
                name: call.name.clone(),
                arguments,
                kind,
            }];
            // Work elsewhere is checked on (or watched) from this commit
            // on, before the park: a stop that comes first still finds it.
            let first_check = match &asked {
                Round::Await(request) => Some(request.poll_after_ms),
                Round::Ask(AskRequest {
                    watch: Some(watch), ..
                }) => {
                    changes.push(Change::Call {
                        id: row.clone(),
                        event: CallEvent::RecordParkRequest {
                            request: serde_json::json!({ "watch": watch }),
                        },
                    });
                    Some(crate::tool::WATCH_FIRST_CHECK_MS)
                }
                Round::Ask(_) => None,
            };
            if let Some(delay_ms) = first_check {
                changes.push(Change::Outbox {
                    message: QueueMessage::Poll {
                        run_id,
                        tool_call_id: row.clone(),
                        attempt: 0,
                    },
                    delay_ms: delay_ms
                        .clamp(crate::tool::MIN_CHECK_INTERVAL_MS, crate::tool::MAX_TTL_MS),
                });
            }
            let counter = match kind {
                ToolKind::Ask => crate::metrics::TOOL_QUESTIONS,
                _ => crate::metrics::TOOL_WAITS,
            };
            ::metrics::counter!(counter).increment(1);
            Ok((Asked { row, round: asked }, changes))
        },
    )
    .await
}

/// The id of the row that asks round `round` of `call`: `<callId>~<round>`
/// (cut to fit), with `~` added while another row of the run has it. Read
/// back from the journal afterwards, never derived again.
fn round_row_id(cp: &Checkpointer<'_>, call: &ToolCallId, round: u32) -> ToolCallId {
    let suffix = format!("~{round}");
    let keep = ToolCallId::MAX_LEN.saturating_sub(suffix.len() + 8);
    let base: String = call.as_str().chars().take(keep).collect();
    let mut id = format!("{base}{suffix}");
    while cp.call(&ToolCallId(id.clone())).is_ok() {
        id.push('~');
    }
    ToolCallId(id)
}

/// The row of a round as the loop handles a parked call.
fn round_call(call: &PersistedToolCall, asked: &Asked) -> PersistedToolCall {
    let (kind, arguments) = asked.round.row();
    PersistedToolCall {
        id: asked.row.clone(),
        name: call.name.clone(),
        arguments,
        kind,
        tool_type: kind.tool_type().to_owned(),
    }
}

/// How the tool sees a round's reply.
fn outcome(round: &Round, reply: SettledReply) -> AskOutcome {
    match (reply.status, round) {
        (ToolCallStatus::Executed, Round::Ask(_)) => {
            AskOutcome::Answered(reply.answers.unwrap_or_default())
        }
        (ToolCallStatus::Executed, Round::Await(_)) => AskOutcome::Woke(reply.payload),
        (ToolCallStatus::Expired, _) => AskOutcome::Expired,
        _ => AskOutcome::Skipped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Journals written before waits were rounds keep the questions under
    /// `request`, and still read back.
    #[test]
    fn a_round_is_journaled_as_before_and_a_wait_beside_it() {
        let questions = serde_json::json!({ "questions": [
            { "id": "q", "prompt": "Why?", "multiple": false, "options": [], "defaults": [] } ] });
        let before = serde_json::json!({
            "row": "c1~1",
            "request": { "reason": "mcp", "questions": questions, "state": { "k": 1 } },
        });
        let asked: Asked = serde_json::from_value(before.clone()).expect("an old entry reads");
        assert!(matches!(&asked.round, Round::Ask(r) if r.reason == "mcp" && r.watch.is_none()));
        assert_eq!(
            serde_json::to_value(&asked).unwrap(),
            before,
            "and writes the same"
        );

        let waited = serde_json::json!({
            "row": "c1~2",
            "await": { "reason": "task", "payload": { "taskId": "t" }, "ttlMs": null,
                       "pollAfterMs": 100, "state": { "task": "t" } },
        });
        let asked: Asked = serde_json::from_value(waited.clone()).expect("a wait reads");
        assert_eq!(asked.round.row().0, ToolKind::Park);
        assert_eq!(asked.round.reason(), "task");
        assert_eq!(serde_json::to_value(&asked).unwrap(), waited);
    }
}
