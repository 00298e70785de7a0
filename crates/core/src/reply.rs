//! Replies to parked tool calls: what a person (or a webhook) said, how it
//! settles the row, what the model sees, and why a late reply is refused.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::ToolCallStatus;

/// The literal reason an unanswered request resolves with.
pub const TIMEOUT_DENIAL: &str = "user had no response, action cancelled";

/// The reason a rejection carries when the person gave none.
pub const DEFAULT_REJECTION: &str = "the user rejected this call";

/// A verdict on a parked approval or job.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Approve { payload: Option<Value> },
    Reject { reason: Option<String> },
}

impl Verdict {
    /// `respond(threadId, toolCallId, approved, payload)` as a verdict.
    pub fn from_respond(approved: bool, payload: Option<Value>) -> Verdict {
        if approved {
            Verdict::Approve { payload }
        } else {
            Verdict::Reject {
                reason: payload.as_ref().and_then(|p| match p {
                    Value::String(s) => Some(s.clone()),
                    other => other
                        .get("reason")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                }),
            }
        }
    }

    /// The status the row settles in.
    pub fn status(&self) -> ToolCallStatus {
        match self {
            Verdict::Approve { .. } => ToolCallStatus::Executed,
            Verdict::Reject { .. } => ToolCallStatus::Rejected,
        }
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
    pub answered_by: Option<String>,
    pub answered_at: Option<DateTime<Utc>>,
}

impl SettledReply {
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

/// Why a reply to a row that is not (or no longer) open was not delivered;
/// `None` when the row is open and the reply can be applied.
pub fn refusal(status: ToolCallStatus, in_current_run: bool) -> Option<&'static str> {
    match status {
        ToolCallStatus::PendingApproval if in_current_run => None,
        ToolCallStatus::PendingApproval => Some("This request is no longer current"),
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

    fn reply(status: ToolCallStatus, approved: bool, reason: Option<&str>) -> SettledReply {
        SettledReply {
            status,
            approved,
            payload: None,
            reason: reason.map(str::to_owned),
            answered_by: None,
            answered_at: None,
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
                payload: Some(json!({"ok": 1}))
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
        assert_eq!(
            Verdict::from_respond(true, None).status(),
            ToolCallStatus::Executed
        );
        assert_eq!(
            Verdict::from_respond(false, None).status(),
            ToolCallStatus::Rejected
        );
    }

    #[test]
    fn only_an_open_row_of_the_current_run_takes_a_reply() {
        for &status in ToolCallStatus::ALL {
            for current in [true, false] {
                let refused = refusal(status, current);
                let open = status == ToolCallStatus::PendingApproval && current;
                assert_eq!(refused.is_none(), open, "{status} current={current}");
            }
        }
        assert_eq!(
            refusal(ToolCallStatus::Executed, true),
            Some("This request was already answered")
        );
        assert_eq!(
            refusal(ToolCallStatus::Expired, true),
            Some("This request has expired")
        );
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
