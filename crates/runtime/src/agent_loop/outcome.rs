//! What a step comes to: the values the loop hands to the end of its
//! segment (complete, or park these calls) and the journaled shape of a
//! persisted call. No behaviour: every other part of the loop imports these.

use agentenkit_core::{ToolCallId, ToolKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tool::{AskRequest, AwaitRequest, ParkRequest};

/// How a segment of a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Completed {
        output: Option<String>,
    },
    /// The step finished with calls that wait for an answer; `to_park` are
    /// the ones not parked yet (a resumed run whose rows are still open
    /// parks nothing new).
    Park {
        to_park: Vec<ParkItem>,
    },
}

/// A call of the finished step that waits, and how to park it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParkItem {
    pub call: PersistedToolCall,
    pub wait: Wait,
}

/// What a call waits for.
#[derive(Debug, Clone, PartialEq)]
pub enum Wait {
    /// A person's approval, within the agent's TTL.
    Approval,
    /// A person's approval of more budget (the parked call is the
    /// request's own row), within the agent's TTL.
    Budget,
    /// An outside answer the tool asked for (`park_for_input`).
    Job(ParkRequest),
    /// A sub-agent's run, started with this task.
    Delegate { task: String },
    /// A person's answers to a question set (never expires).
    Ask { frame: Value, reason: String },
    /// A person's answers to the questions a running tool asked (the
    /// parked call is the round's own row): expires after the agent's
    /// `hitl_ttl_ms`, since the questions belong to a call in progress.
    /// With `watch`, the work the questions belong to, given up if the
    /// run is stopped first (see `AskRequest::watch`).
    ToolAsk {
        frame: Value,
        reason: String,
        watch: Option<Value>,
    },
    /// The end of work a running tool waits for (the parked call is the
    /// round's own row): parked like a job, and checked through delayed
    /// messages (the first written with the row).
    Polled { request: ParkRequest },
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

/// What a round of a call asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Round {
    /// A person's answers to the tool's questions (journaled under
    /// `request`, as before waits were rounds).
    #[serde(rename = "request")]
    Ask(AskRequest),
    /// The end of work elsewhere.
    Await(AwaitRequest),
}

impl Round {
    pub(crate) fn reason(&self) -> &str {
        match self {
            Round::Ask(request) => &request.reason,
            Round::Await(request) => &request.reason,
        }
    }

    pub(crate) fn state(&self) -> &Value {
        match self {
            Round::Ask(request) => &request.state,
            Round::Await(request) => &request.state,
        }
    }

    /// Its row's kind, and the arguments the row shows.
    pub(crate) fn row(&self) -> (ToolKind, Value) {
        match self {
            Round::Ask(request) => (
                ToolKind::Ask,
                serde_json::to_value(&request.questions).unwrap_or_default(),
            ),
            Round::Await(request) => (ToolKind::Park, request.payload.clone()),
        }
    }
}
