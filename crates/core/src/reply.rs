//! Replies to parked tool calls: what a person (or a webhook) said, how it
//! settles the row, what the model sees, and why a late reply is refused.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use std::collections::BTreeMap;

use crate::questions::{Issue, QuestionSet, Resolved};
use crate::{ToolCallStatus, ToolKind};

/// The literal reason an unanswered request resolves with.
pub const TIMEOUT_DENIAL: &str = "user had no response, action cancelled";

/// The reason a rejection carries when the person gave none.
pub const DEFAULT_REJECTION: &str = "the user rejected this call";

/// A note or a reason a person gives is at most this many characters: the
/// model reads it with every later step of the run.
pub const MAX_NOTE_CHARS: usize = 4096;

/// Edited arguments are at most this many bytes of JSON: they are stored
/// with the decision and sent to the tool.
pub const MAX_EDITED_ARGUMENTS_BYTES: usize = 256 * 1024;

/// A payload (a job's result, what an approval hands the tool) and a
/// question set's answers are at most this many bytes of JSON: each is
/// stored with the decision and read by the model or the tool.
pub const MAX_FREE_FORM_BYTES: usize = 256 * 1024;

/// What a person (or a webhook) sent about a parked call.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Approve {
        payload: Option<Value>,
        /// The arguments the call runs with instead of the proposed ones:
        /// edits, for approvals only (checked against the tool's schema).
        arguments: Option<Value>,
        /// The person's note, which the model reads with the result.
        message: Option<String>,
    },
    Reject {
        reason: Option<String>,
    },
    /// Answers to a question set: `{ "<questionId>": ["value", …] }`.
    Answer {
        answers: Value,
    },
    /// A question set left unanswered on purpose.
    Skip,
}

impl Verdict {
    /// What makes this verdict too large to take, if anything: a note or
    /// reason past [`MAX_NOTE_CHARS`], edits past
    /// [`MAX_EDITED_ARGUMENTS_BYTES`], a payload or answers past
    /// [`MAX_FREE_FORM_BYTES`].
    pub fn oversized(&self) -> Option<String> {
        let past = |value: &Value, max: usize| crate::canonical::json_len(value) > max;
        let (text, name) = match self {
            Verdict::Approve {
                arguments: Some(arguments),
                ..
            } if past(arguments, MAX_EDITED_ARGUMENTS_BYTES) => {
                return Some(format!(
                    "arguments: edited arguments are at most {MAX_EDITED_ARGUMENTS_BYTES} bytes of JSON"
                ))
            }
            Verdict::Approve {
                payload: Some(payload),
                ..
            } if past(payload, MAX_FREE_FORM_BYTES) => {
                return Some(format!(
                    "payload: at most {MAX_FREE_FORM_BYTES} bytes of JSON"
                ))
            }
            Verdict::Answer { answers } if past(answers, MAX_FREE_FORM_BYTES) => {
                return Some(format!(
                    "answers: at most {MAX_FREE_FORM_BYTES} bytes of JSON"
                ))
            }
            Verdict::Approve { message, .. } => (message, "message"),
            Verdict::Reject { reason } => (reason, "reason"),
            Verdict::Answer { .. } | Verdict::Skip => return None,
        };
        let chars = text.as_deref().map_or(0, |t| t.chars().count());
        (chars > MAX_NOTE_CHARS)
            .then(|| format!("{name}: at most {MAX_NOTE_CHARS} characters, not {chars}"))
    }

    /// A plain yes: no payload, edits or note.
    pub fn approve() -> Verdict {
        Verdict::Approve {
            payload: None,
            arguments: None,
            message: None,
        }
    }

    /// `respond(threadId, toolCallId, approved, payload)` as a verdict.
    pub fn from_respond(approved: bool, payload: Option<Value>) -> Verdict {
        if approved {
            Verdict::Approve {
                payload,
                arguments: None,
                message: None,
            }
        } else {
            // A webhook's payload is its own: its reason is cut to what
            // the model reads, not refused.
            Verdict::Reject {
                reason: payload.as_ref().and_then(|p| match p {
                    Value::String(s) => Some(crate::questions::clip(s, MAX_NOTE_CHARS)),
                    other => other
                        .get("reason")
                        .and_then(Value::as_str)
                        .map(|s| crate::questions::clip(s, MAX_NOTE_CHARS)),
                }),
            }
        }
    }
}

/// Why a reply cannot settle the call it is addressed to. Nothing is
/// recorded for either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyError {
    /// Answers (or a skip) addressed to a call waiting on a verdict: a set
    /// of answers is not a verdict on proposed work.
    Mismatch,
    /// Answers that do not fit the stored question set.
    InvalidAnswers(Vec<Issue>),
    /// Edited arguments for a call that is not an approval (a job's wait
    /// or a question set has no arguments a person could change).
    CannotEdit,
}

/// How a reply settles a parked call: the one-way reduction of SPEC §5.
///
/// | wait \ reply     | approve   | reject    | answer    | skip      |
/// |------------------|-----------|-----------|-----------|-----------|
/// | approval / park  | executed  | rejected  | mismatch  | mismatch  |
/// | ask / intake     | defaults, executed | = skip | executed | defaults, rejected |
pub fn reduce(
    kind: ToolKind,
    verdict: &Verdict,
    stored_request: &Value,
) -> Result<SettledReply, ReplyError> {
    let settled = |status, approved, payload, reason, resolved: Option<Resolved>| SettledReply {
        approved,
        payload,
        reason,
        answers: resolved.as_ref().map(|r| r.answers.clone()),
        defaulted: resolved.map(|r| r.defaulted),
        ..SettledReply::bare(status)
    };
    if let Verdict::Approve {
        arguments: Some(_), ..
    } = verdict
    {
        if kind != ToolKind::Approval {
            return Err(ReplyError::CannotEdit);
        }
    }
    match kind {
        ToolKind::Approval | ToolKind::Park => match verdict {
            Verdict::Approve {
                payload,
                arguments,
                message,
            } => Ok(SettledReply {
                arguments: arguments.clone(),
                message: message.clone(),
                ..settled(ToolCallStatus::Executed, true, payload.clone(), None, None)
            }),
            Verdict::Reject { reason } => Ok(settled(
                ToolCallStatus::Rejected,
                false,
                None,
                reason.clone(),
                None,
            )),
            Verdict::Answer { .. } | Verdict::Skip => Err(ReplyError::Mismatch),
        },
        ToolKind::Ask => {
            let set = QuestionSet::parse(stored_request).map_err(ReplyError::InvalidAnswers)?;
            match verdict {
                Verdict::Approve { .. } => Ok(settled(
                    ToolCallStatus::Executed,
                    true,
                    None,
                    None,
                    Some(set.defaults()),
                )),
                Verdict::Answer { answers } => {
                    let resolved = set.resolve(answers).map_err(ReplyError::InvalidAnswers)?;
                    Ok(settled(
                        ToolCallStatus::Executed,
                        true,
                        None,
                        None,
                        Some(resolved),
                    ))
                }
                Verdict::Reject { .. } | Verdict::Skip => Ok(settled(
                    ToolCallStatus::Rejected,
                    false,
                    None,
                    None,
                    Some(set.defaults()),
                )),
            }
        }
        ToolKind::Function | ToolKind::Delegate => Err(ReplyError::Mismatch),
    }
}

/// The settled reply, journaled under `tool:<runId>:<callId>` and carried by
/// `INPUT_RESOLVED`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettledReply {
    pub status: ToolCallStatus,
    pub approved: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For question sets: every question's values, resolved on the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<BTreeMap<String, Vec<String>>>,
    /// For question sets: the ids that took their defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaulted: Option<Vec<String>>,
    pub answered_by: Option<String>,
    pub answered_at: Option<DateTime<Utc>>,
    /// The arguments an approval edited the call to run with (the proposed
    /// ones stay in the model's entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// The person's note on an approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The `argumentsHash` of the call as it was decided on (see
    /// [`crate::canonical`]); none for a reply nobody gave (an expiry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_hash: Option<String>,
    /// The id of the API key that decided (a key made with `agentenkit
    /// keys`); none for `AGENTENKIT_API_KEYS` keys and Rust callers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// For a call several people approved: each approval
    /// (`[{principal, answeredBy, answeredAt, message?}]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<Value>,
}

/// What the model reads of an approved call's result when the person
/// edited its arguments or left a note: the tool's output under `result`,
/// beside `editedArguments` and `message`; the output as it is otherwise.
pub fn approved_result(output: Value, edited: Option<&Value>, message: Option<&str>) -> Value {
    if edited.is_none() && message.is_none() {
        return output;
    }
    let mut result = json!({ "result": output });
    if let Some(edited) = edited {
        result["editedArguments"] = edited.clone();
        result["note"] = json!(
            "the user edited the arguments before approving; the tool ran with editedArguments"
        );
    }
    if let Some(message) = message {
        result["message"] = json!(message);
    }
    result
}

impl SettledReply {
    /// A reply of `status` that carries nothing else (no payload, answers,
    /// answerer or decision): approved when the call ran. What other
    /// replies are built on.
    pub fn bare(status: ToolCallStatus) -> SettledReply {
        SettledReply {
            status,
            approved: status == ToolCallStatus::Executed,
            payload: None,
            reason: None,
            answers: None,
            defaulted: None,
            answered_by: None,
            answered_at: None,
            arguments: None,
            message: None,
            arguments_hash: None,
            key_id: None,
            approvals: None,
        }
    }

    /// What the model sees of an answered question set: the values, which
    /// were defaulted, and whether the person skipped (a skip is not a
    /// confirmation). `None` for other calls.
    pub fn answers_result(&self) -> Option<Value> {
        let answers = self.answers.as_ref()?;
        Some(json!({
            "answers": answers,
            "defaulted": self.defaulted.clone().unwrap_or_default(),
            "skipped": self.status == ToolCallStatus::Rejected,
        }))
    }

    /// What the model sees instead of the tool's output when the call did
    /// not run: `None` when it was approved (the tool runs and its output
    /// is the result).
    pub fn denial(&self) -> Option<Value> {
        if self.approved {
            return None;
        }
        let reason = match self.status {
            ToolCallStatus::Expired => TIMEOUT_DENIAL,
            _ => self.reason.as_deref().unwrap_or(DEFAULT_REJECTION),
        };
        Some(json!({ "denied": true, "reason": reason }))
    }
}

/// A request of a turn the thread has moved on from.
const NO_LONGER_CURRENT: &str = "This request is no longer current";

/// Why a reply to a row that is not (or no longer) open was not delivered;
/// `None` when the row is open and the reply can be applied. `moved_on`:
/// the thread has started another turn since (a request an interrupt or
/// an edit cancelled is no longer current, the seeds' "the thread moved
/// on").
pub fn refusal(
    status: ToolCallStatus,
    in_current_run: bool,
    moved_on: bool,
) -> Option<&'static str> {
    match status {
        ToolCallStatus::PendingApproval if in_current_run => None,
        ToolCallStatus::PendingApproval => Some(NO_LONGER_CURRENT),
        ToolCallStatus::Cancelled if moved_on => Some(NO_LONGER_CURRENT),
        ToolCallStatus::Executed | ToolCallStatus::Rejected | ToolCallStatus::Failed => {
            Some("This request was already answered")
        }
        ToolCallStatus::Expired => Some("This request has expired"),
        ToolCallStatus::Cancelled => Some("This request was cancelled"),
        ToolCallStatus::Proposed => Some("This request is not open"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_reasons_and_edits_past_their_bounds_are_too_large() {
        let note = |n: usize| Some("é".repeat(n));
        let approve = |arguments: Option<Value>, message: Option<String>| Verdict::Approve {
            // At its own cap: `"…"` is 2 bytes around the text.
            payload: Some(json!("x".repeat(MAX_FREE_FORM_BYTES - 2))),
            arguments,
            message,
        };
        assert_eq!(approve(None, note(MAX_NOTE_CHARS)).oversized(), None);
        assert!(approve(None, note(MAX_NOTE_CHARS + 1))
            .oversized()
            .unwrap()
            .starts_with("message:"));
        let reject = |reason| Verdict::Reject { reason };
        assert_eq!(reject(note(MAX_NOTE_CHARS)).oversized(), None);
        assert!(reject(note(MAX_NOTE_CHARS + 1))
            .oversized()
            .unwrap()
            .starts_with("reason:"));
        // `{"k":"…"}` is 8 bytes around the text.
        let edits = |n: usize| Some(json!({ "k": "x".repeat(n) }));
        assert_eq!(
            approve(edits(MAX_EDITED_ARGUMENTS_BYTES - 8), None).oversized(),
            None
        );
        assert!(approve(edits(MAX_EDITED_ARGUMENTS_BYTES - 7), None)
            .oversized()
            .unwrap()
            .starts_with("arguments:"));
        assert_eq!(Verdict::Skip.oversized(), None);
    }

    #[test]
    fn payloads_and_answers_past_their_bound_are_too_large() {
        let payload = |n: usize| Verdict::Approve {
            payload: Some(json!("x".repeat(n))),
            arguments: None,
            message: None,
        };
        assert_eq!(payload(MAX_FREE_FORM_BYTES - 2).oversized(), None);
        assert!(payload(MAX_FREE_FORM_BYTES - 1)
            .oversized()
            .unwrap()
            .starts_with("payload:"));
        // `{"q":["…"]}` is 10 bytes around the text.
        let answers = |n: usize| Verdict::Answer {
            answers: json!({ "q": ["x".repeat(n)] }),
        };
        assert_eq!(answers(MAX_FREE_FORM_BYTES - 10).oversized(), None);
        assert!(answers(MAX_FREE_FORM_BYTES - 9)
            .oversized()
            .unwrap()
            .starts_with("answers:"));
    }

    #[test]
    fn a_webhooks_rejection_reason_is_cut_not_refused() {
        let long = "r".repeat(MAX_NOTE_CHARS * 3);
        for payload in [json!(long), json!({ "reason": long })] {
            let verdict = Verdict::from_respond(false, Some(payload));
            assert_eq!(verdict.oversized(), None);
            let Verdict::Reject {
                reason: Some(reason),
            } = verdict
            else {
                panic!("a rejection with its reason")
            };
            assert_eq!(reason.chars().count(), MAX_NOTE_CHARS);
            assert!(reason.ends_with('…'));
        }
    }

    fn reply(status: ToolCallStatus, approved: bool, reason: Option<&str>) -> SettledReply {
        SettledReply {
            approved,
            reason: reason.map(str::to_owned),
            ..SettledReply::bare(status)
        }
    }

    #[test]
    fn denials_say_why() {
        assert_eq!(reply(ToolCallStatus::Executed, true, None).denial(), None);
        assert_eq!(
            reply(ToolCallStatus::Rejected, false, Some("not today")).denial(),
            Some(json!({"denied": true, "reason": "not today"}))
        );
        assert_eq!(
            reply(ToolCallStatus::Rejected, false, None).denial(),
            Some(json!({"denied": true, "reason": DEFAULT_REJECTION}))
        );
        assert_eq!(
            reply(ToolCallStatus::Expired, false, Some("ignored")).denial(),
            Some(json!({"denied": true, "reason": "user had no response, action cancelled"}))
        );
    }

    #[test]
    fn respond_maps_to_a_verdict() {
        assert_eq!(
            Verdict::from_respond(true, Some(json!({"ok": 1}))),
            Verdict::Approve {
                payload: Some(json!({"ok": 1})),
                arguments: None,
                message: None,
            }
        );
        assert_eq!(
            Verdict::from_respond(false, Some(json!({"reason": "no"}))),
            Verdict::Reject {
                reason: Some("no".into())
            }
        );
        assert_eq!(
            Verdict::from_respond(false, None),
            Verdict::Reject { reason: None }
        );
    }

    #[test]
    fn only_an_open_row_of_the_current_run_takes_a_reply() {
        for &status in ToolCallStatus::ALL {
            for current in [true, false] {
                for moved_on in [true, false] {
                    let refused = refusal(status, current, moved_on);
                    let open = status == ToolCallStatus::PendingApproval && current;
                    assert_eq!(refused.is_none(), open, "{status} current={current}");
                }
            }
        }
        assert_eq!(
            refusal(ToolCallStatus::Executed, true, false),
            Some("This request was already answered")
        );
        assert_eq!(
            refusal(ToolCallStatus::Expired, true, false),
            Some("This request has expired")
        );
        // A stop cancels; an interrupt or an edit moves the thread on.
        assert_eq!(
            refusal(ToolCallStatus::Cancelled, false, false),
            Some("This request was cancelled")
        );
        assert_eq!(
            refusal(ToolCallStatus::Cancelled, false, true),
            Some("This request is no longer current")
        );
    }

    /// Every row of the reduction table, rejected pairs included.
    #[test]
    fn the_reduction_runs_one_way_only() {
        let set = json!({ "questions": [{ "id": "q", "prompt": "p", "options": [
            {"value": "a", "label": "A"}, {"value": "b", "label": "B"}], "defaults": ["a"] }] });
        let approve = Verdict::Approve {
            payload: Some(json!(1)),
            arguments: None,
            message: Some("go".into()),
        };
        let edited = Verdict::Approve {
            payload: None,
            arguments: Some(json!({ "to": "b@c.d" })),
            message: None,
        };
        let reject = Verdict::Reject {
            reason: Some("no".into()),
        };
        let answer = Verdict::Answer {
            answers: json!({ "q": ["b"] }),
        };
        for kind in [ToolKind::Approval, ToolKind::Park] {
            let ok = reduce(kind, &approve, &Value::Null).unwrap();
            assert_eq!(
                (ok.status, ok.approved, ok.payload, ok.message.as_deref()),
                (ToolCallStatus::Executed, true, Some(json!(1)), Some("go"))
            );
            let no = reduce(kind, &reject, &Value::Null).unwrap();
            assert_eq!(
                (no.status, no.approved, no.reason.as_deref()),
                (ToolCallStatus::Rejected, false, Some("no"))
            );
            assert_eq!(
                reduce(kind, &answer, &Value::Null),
                Err(ReplyError::Mismatch)
            );
            assert_eq!(
                reduce(kind, &Verdict::Skip, &Value::Null),
                Err(ReplyError::Mismatch)
            );
        }
        // Only an approval's arguments can be edited.
        let ok = reduce(ToolKind::Approval, &edited, &Value::Null).unwrap();
        assert_eq!(ok.arguments, Some(json!({ "to": "b@c.d" })));
        for kind in [ToolKind::Park, ToolKind::Ask] {
            assert_eq!(reduce(kind, &edited, &set), Err(ReplyError::CannotEdit));
        }
        let confirmed = reduce(ToolKind::Ask, &approve, &set).unwrap();
        assert_eq!(confirmed.status, ToolCallStatus::Executed);
        assert_eq!(confirmed.answers.as_ref().unwrap()["q"], ["a"]);
        assert_eq!(confirmed.defaulted.as_deref(), Some(&["q".to_owned()][..]));
        let answered = reduce(ToolKind::Ask, &answer, &set).unwrap();
        assert_eq!(answered.status, ToolCallStatus::Executed);
        assert_eq!(answered.answers.as_ref().unwrap()["q"], ["b"]);
        assert_eq!(answered.defaulted.as_deref(), Some(&[][..]));
        for skipped in [
            reduce(ToolKind::Ask, &reject, &set).unwrap(),
            reduce(ToolKind::Ask, &Verdict::Skip, &set).unwrap(),
        ] {
            assert_eq!(
                (skipped.status, skipped.approved),
                (ToolCallStatus::Rejected, false)
            );
            assert_eq!(skipped.answers.as_ref().unwrap()["q"], ["a"]);
            assert_eq!(skipped.defaulted.as_deref(), Some(&["q".to_owned()][..]));
            assert_eq!(skipped.answers_result().unwrap()["skipped"], true);
        }
        assert!(matches!(
            reduce(
                ToolKind::Ask,
                &Verdict::Answer {
                    answers: json!({ "q": ["z"] })
                },
                &set
            ),
            Err(ReplyError::InvalidAnswers(_))
        ));
        for kind in [ToolKind::Function, ToolKind::Delegate] {
            assert_eq!(
                reduce(kind, &approve, &Value::Null),
                Err(ReplyError::Mismatch)
            );
        }
    }

    #[test]
    fn an_edited_or_noted_approval_shows_the_model_both() {
        assert_eq!(approved_result(json!(7), None, None), json!(7));
        let shown = approved_result(
            json!({"ok": true}),
            Some(&json!({"to": "x"})),
            Some("careful"),
        );
        assert_eq!(shown["result"], json!({"ok": true}));
        assert_eq!(shown["editedArguments"], json!({"to": "x"}));
        assert_eq!(shown["message"], "careful");
        assert!(shown["note"].as_str().unwrap().contains("edited"));
        let noted = approved_result(json!(1), None, Some("fine"));
        assert_eq!(noted, json!({"result": 1, "message": "fine"}));
    }

    #[test]
    fn settled_reply_wire_form() {
        let r = reply(ToolCallStatus::Executed, true, None);
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"status": "executed", "approved": true, "answeredBy": null, "answeredAt": null})
        );
    }
}
