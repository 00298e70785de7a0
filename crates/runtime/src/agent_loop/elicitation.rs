//! Asking the user: the configured intake (before the first model call) and
//! the model's built-in `ask` tool. Both write one pending row named `ask`,
//! emit the same `ELICITATION` frame, and wait on the same reply an approval
//! waits on; they differ only in the journal names they spend.

use agentenkit_core::conversation::{Message, ToolCallRequest};
use agentenkit_core::journal::names;
use agentenkit_core::questions::{Issue, QuestionSet};
use agentenkit_core::{EventType, RunId, ToolCallId, ToolCallStatus, ToolKind};
use agentenkit_store::{Change, RunContext};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::checkpoint::{Checkpointer, Durability};
use super::error::SegmentError;
use super::outcome::{ParkItem, PersistedToolCall, Wait};
use super::results::{await_reply, record_failure, tool_message};
use crate::agent::{Intake, ASK_TOOL};
use crate::config::IntakeWhen;

/// The call id of a turn's intake row (unique within its run).
pub const INTAKE_CALL_ID: &str = names::INTAKE_CALL_ID;

/// The frame a client renders: the whole request and the run to answer it
/// against.
pub fn frame(
    run_id: RunId,
    call: &ToolCallId,
    request: &Value,
    ctx: &RunContext,
    reason: &str,
) -> Value {
    json!({
        "runId": run_id,
        "toolCallId": call,
        "request": request,
        "reason": reason,
        "runName": ctx.lease.run_name,
        "depth": ctx.lease.depth,
    })
}

fn intake_call(set: &QuestionSet) -> PersistedToolCall {
    PersistedToolCall {
        id: ToolCallId(INTAKE_CALL_ID.to_owned()),
        name: ASK_TOOL.to_owned(),
        arguments: serde_json::to_value(set).unwrap_or_default(),
        kind: ToolKind::Ask,
        tool_type: ToolKind::Ask.tool_type().to_owned(),
    }
}

/// The intake's own assistant message: its preamble and the `ask` call.
fn intake_message(call: &PersistedToolCall, set: &QuestionSet) -> Message {
    Message::Assistant {
        content: set.preamble.clone(),
        tool_calls: vec![ToolCallRequest {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        }],
    }
}

/// The `intake:ask` journal entry: whether this turn asks, and the question
/// set it asked, so that a deploy that edits or removes the intake does not
/// change what a run in flight replays. Stored as `false` for a turn that
/// does not ask (the verdict, as SPEC's journal table has it), and as
/// `{"asks": true, "set": …}` for one that does.
#[derive(Debug, Clone, PartialEq)]
enum IntakeAsk {
    Skips,
    Asks(QuestionSet),
}

/// How [`IntakeAsk`] is stored.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum StoredIntakeAsk {
    Verdict(bool),
    Asked { asks: bool, set: QuestionSet },
}

impl Serialize for IntakeAsk {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            IntakeAsk::Skips => StoredIntakeAsk::Verdict(false),
            IntakeAsk::Asks(set) => StoredIntakeAsk::Asked {
                asks: true,
                set: set.clone(),
            },
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for IntakeAsk {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match StoredIntakeAsk::deserialize(deserializer)? {
            StoredIntakeAsk::Verdict(false) | StoredIntakeAsk::Asked { asks: false, .. } => {
                Ok(IntakeAsk::Skips)
            }
            StoredIntakeAsk::Asked { asks: true, set } => Ok(IntakeAsk::Asks(set)),
            StoredIntakeAsk::Verdict(true) => Err(serde::de::Error::custom(
                "an intake verdict that asks without the question set it asked",
            )),
        }
    }
}

/// Runs the intake before the first model call: `intake:ask` (the verdict
/// and the question set, read back from the journal on replay, never
/// recomputed) and, on turns that ask, `intake:answers`. `Some(to_park)`
/// when the turn must wait. A run whose journal holds an intake replays it
/// even if the agent has none any more; `Ok(None)` without either.
pub async fn intake(
    cp: &mut Checkpointer<'_>,
    intake: Option<&Intake>,
    ctx: &RunContext,
    conversation: &mut Vec<Message>,
) -> Result<Option<Vec<ParkItem>>, SegmentError> {
    // The journal decides for a run that has one: it asked an intake (even
    // if the agent has none now), or it began without one (even if the
    // agent has one now). Only a fresh run asks the configured intake.
    let journaled = cp.next_is(names::INTAKE_ASK);
    if !journaled && (intake.is_none() || cp.is_replaying()) {
        return Ok(None);
    }
    let run_id = ctx.lease.run_id;
    let engine = cp.engine;
    let verdict: IntakeAsk = cp
        .checkpoint(
            names::INTAKE_ASK.to_owned(),
            Durability::Decided,
            || async {
                let intake = intake.ok_or_else(|| {
                    SegmentError::Permanent("an intake ran without one configured".into())
                })?;
                let asks = match intake.when {
                    IntakeWhen::EveryTurn => true,
                    // Asked before = answered or skipped on an earlier turn;
                    // an asking stopped before anyone answered asks again.
                    IntakeWhen::ThreadStart => {
                        !engine
                            .intake_asked_before(ctx.lease.thread_id, run_id, &ctx.lease.run_name)
                            .await?
                    }
                };
                if !asks {
                    return Ok((IntakeAsk::Skips, Vec::new()));
                }
                let changes = intake_asked(run_id, &intake.set);
                Ok((IntakeAsk::Asks(intake.set.clone()), changes))
            },
        )
        .await?;
    let IntakeAsk::Asks(set) = verdict else {
        return Ok(None);
    };
    let call = intake_call(&set);
    conversation.push(intake_message(&call, &set));
    match await_reply(cp, run_id, &call, names::INTAKE_ANSWERS.to_owned(), true).await? {
        Ok(reply) => {
            let result = reply.answers_result().unwrap_or_default();
            conversation.push(tool_message(&call, result));
            Ok(None)
        }
        Err(status) => {
            let to_park = if status == ToolCallStatus::Proposed {
                let frame = frame(run_id, &call.id, &call.arguments, ctx, "intake");
                vec![ParkItem {
                    call,
                    wait: Wait::Ask {
                        frame,
                        reason: "intake".into(),
                    },
                }]
            } else {
                vec![]
            };
            Ok(Some(to_park))
        }
    }
}

/// What asking the intake `set` writes: the message that asks it, its
/// event, and the `ask` call it is.
fn intake_asked(run_id: RunId, set: &QuestionSet) -> Vec<Change> {
    let call = intake_call(set);
    let message = intake_message(&call, set);
    vec![
        Change::Event {
            event_type: EventType::Message,
            data: json!({ "runId": run_id, "message": message }),
        },
        Change::Message(message),
        Change::ProposeToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            kind: ToolKind::Ask,
        },
    ]
}

/// A model's `ask` call: an invalid question set is an ordinary tool
/// failure listing the issues (journaled as `exec:`), so the model fixes
/// it; a valid one journals its frame (`stream:elicitation:`) and waits.
pub async fn ask_call(
    cp: &mut Checkpointer<'_>,
    ctx: &RunContext,
    call: &PersistedToolCall,
) -> Result<Result<Wait, Value>, SegmentError> {
    let run_id = ctx.lease.run_id;
    // A page to open is a server's (its URL-mode request) or the file
    // author's to show, never what a model (or whoever steers it) writes.
    let set = QuestionSet::parse(&call.arguments).and_then(|set| {
        let linked: Vec<Issue> = set
            .questions
            .iter()
            .enumerate()
            .filter(|(_, q)| q.link.is_some())
            .map(|(i, _)| {
                Issue::new(
                    &format!("/questions/{i}/link"),
                    "a model's question cannot carry a link",
                )
            })
            .collect();
        if linked.is_empty() {
            Ok(set)
        } else {
            Err(linked)
        }
    });
    let set = match set {
        Ok(set) => set,
        Err(issues) => {
            let failure = json!({ "error": "invalid question set", "issues": issues });
            return Ok(Err(record_failure(cp, run_id, call, failure).await?));
        }
    };
    let request = serde_json::to_value(&set).unwrap_or_default();
    let frame: Value = cp
        .checkpoint(
            names::stream_elicitation(&call.id),
            Durability::Derived,
            || async { Ok((frame(run_id, &call.id, &request, ctx, "ask"), vec![])) },
        )
        .await?;
    Ok(Ok(Wait::Ask {
        frame,
        reason: "ask".into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_intake_verdict_is_stored_as_spec_says_and_read_back() {
        let set = QuestionSet {
            preamble: Some("Before I start".into()),
            questions: vec![],
        };
        let asked = IntakeAsk::Asks(set.clone());
        let written = serde_json::to_value(&asked).unwrap();
        assert_eq!(written["asks"], true);
        assert_eq!(
            serde_json::from_value::<IntakeAsk>(written).unwrap(),
            IntakeAsk::Asks(set)
        );
        // A turn that does not ask journals the bare verdict.
        assert_eq!(
            serde_json::to_value(IntakeAsk::Skips).unwrap(),
            json!(false)
        );
        assert_eq!(
            serde_json::from_value::<IntakeAsk>(json!(false)).unwrap(),
            IntakeAsk::Skips
        );
        // A verdict that asks must carry its set: replay never guesses it.
        assert!(serde_json::from_value::<IntakeAsk>(json!(true)).is_err());
    }
}
