//! What the store returns to readers (the API): plain serializable rows.

use agentenkit_core::{EventType, RunId, RunStatus, ThreadId, ThreadStatus, ToolKind};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ThreadView {
    pub id: ThreadId,
    pub agent: String,
    pub status: ThreadStatus,
    pub current_run_id: Option<RunId>,
    pub metadata: Value,
    /// The first open requests (at most 100), in inbox order.
    pub pending_inputs: Vec<PendingInput>,
    /// More open requests than `pending_inputs` holds: page them from
    /// `GET /threads/{id}/pending-inputs`. Left out when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more_pending_inputs: bool,
    pub created_at: DateTime<Utc>,
    /// The thread's newest event when this view was read (0 before its
    /// first): a stream opened with it as `Last-Event-ID` carries on from
    /// this view, with nothing replayed and nothing missed.
    pub last_event_id: i64,
    /// Messages sent with `onActive: "enqueue"` that wait for the active
    /// run to end, oldest first. Left out when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queued_messages: Vec<QueuedTurn>,
    /// The thread this one was forked from (`POST /threads/{id}/fork`).
    /// Left out for a thread that is no fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ThreadId>,
    /// The last message of that thread's conversation this one kept (its
    /// id there). Left out for a thread that is no fork, or a fork of a
    /// thread with no message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_at_message_id: Option<i64>,
    /// What the thread's runs (its sub-agents' included) have spent, as
    /// their journals say: what a thread budget counts (docs/budgets.md).
    /// `Store::get_thread` leaves it zero (it is a scan of the thread's
    /// journals); `Store::thread_spending` reads it, as `GET /threads/{id}`
    /// does.
    #[serde(default)]
    pub spent: Spending,
}

/// Model and tool calls made, and the tokens the providers reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Spending {
    pub model_calls: u64,
    pub tool_calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// A turn waiting for the thread's active run to end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct QueuedTurn {
    /// The run it will start.
    pub run_id: RunId,
    /// The run it waits to join at its next model call (`steer`); a turn of
    /// its own if that run ends first. Left out for a queued turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steers: Option<RunId>,
    pub content: String,
    pub created_at: DateTime<Utc>,
}

/// An open request: a tool call waiting for a person or an outside system.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PendingInput {
    pub tool_call_id: String,
    pub run_id: RunId,
    pub thread_id: ThreadId,
    pub tool_name: String,
    pub arguments: Value,
    /// SHA-256 of `arguments` in RFC 8785 canonical form, lowercase hex: an
    /// answer that sends it back is refused if the call's arguments differ
    /// from what was shown.
    pub arguments_hash: String,
    pub kind: ToolKind,
    pub reason: Option<String>,
    pub run_name: String,
    pub depth: i32,
    pub expires_at: Option<DateTime<Utc>>,
    /// When the call was made.
    pub created_at: DateTime<Utc>,
    /// The question set, for asks.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<agentenkit_core::questions::QuestionSet>))]
    pub request: Option<Value>,
    /// For a call that needs several approvals: how many it has so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvals_given: Option<u32>,
    /// For a call that needs several approvals: how many (the rule of its
    /// tool in the version of its agent the run is pinned to, which the
    /// API fills in).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvals_required: Option<u32>,
    /// The version of its agent the run is pinned to: what it will do once
    /// answered is what that version says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
}

impl PendingInput {
    /// Where the request stands in the inbox's order.
    pub fn position(&self) -> InboxPosition {
        InboxPosition {
            created_at: self.created_at,
            run_id: self.run_id,
            tool_call_id: self.tool_call_id.clone(),
        }
    }
}

/// An open request's place in the inbox's order (`Store::inbox`): when its
/// call was made, then its run and call ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxPosition {
    pub created_at: DateTime<Utc>,
    pub run_id: RunId,
    pub tool_call_id: String,
}

#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MessageView {
    pub id: i64,
    pub run_id: RunId,
    /// The message itself: `role` and what that role carries.
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(value_type = agentenkit_core::conversation::Message))]
    pub body: Value,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    pub id: i64,
    pub thread_id: ThreadId,
    pub run_id: Option<RunId>,
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub data: Value,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    pub id: RunId,
    pub thread_id: ThreadId,
    pub status: RunStatus,
    pub name: String,
    pub depth: i32,
    pub parent_run_id: Option<RunId>,
    pub parent_tool_call_id: Option<String>,
    /// The version of its agent the run is pinned to (SHA-256 of the
    /// agent's definition); absent for a run from before versions or of an
    /// agent built in code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    pub attempts: i32,
    pub output: Option<String>,
    pub error: Option<String>,
    pub usage: Vec<UsageView>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct UsageView {
    pub model_call: i32,
    pub input_tokens: i64,
    pub output_tokens: i64,
}
