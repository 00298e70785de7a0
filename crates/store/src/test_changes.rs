//! Changes the unit tests of the commit path build commits from.

use agentenkit_core::{CallEvent, ToolCallId, ToolKind};
use serde_json::json;

use crate::change::Change;

/// An approval `send_email` proposed as call `id`.
pub(crate) fn propose(id: &str) -> Change {
    Change::ProposeToolCall {
        id: ToolCallId(id.into()),
        name: "send_email".into(),
        arguments: json!({"to": "ops@example.com"}),
        kind: ToolKind::Approval,
    }
}

/// Call `id` parked for approval, with its proposed arguments and an expiry.
pub(crate) fn park(id: &str) -> Change {
    Change::Call {
        id: ToolCallId(id.into()),
        event: CallEvent::Park {
            kind: ToolKind::Approval,
            reason: "approval".into(),
            arguments: None,
            expires_at: Some("2026-12-02T13:34:37.934023Z".parse().expect("a timestamp")),
        },
    }
}
