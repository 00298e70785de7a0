//! What a tool may ask for from within a call, and be invoked again with:
//! a person's answers to its questions ([`ask_questions`]), or the end of
//! work that runs elsewhere ([`await_work`]). Each is a round of the call,
//! parked with no worker held.

use agentenkit_core::questions::QuestionSet;
use serde::Serialize;
use serde_json::Value;

use super::ToolError;

/// A tool's request, from within a call, for a person's answers: the call
/// waits (no worker held) as a question set shown and answered like any
/// other, and the tool is invoked again with the reply in
/// [`ToolContext::answers`](super::ToolContext::answers). It may ask again, up to [`MAX_ASK_ROUNDS`]
/// times in one call.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AskRequest {
    /// What a client shows as the request's reason (`mcp`, …).
    pub reason: String,
    pub questions: QuestionSet,
    /// The tool's own state, handed back with the reply (an MCP server's
    /// `requestState` and how its questions map to the set). At most
    /// [`MAX_ASK_STATE_BYTES`] of JSON: it is journaled.
    pub state: Value,
    /// Work elsewhere the questions belong to (an MCP server's task, by
    /// the payload of its wait): while they wait, a worker watches the
    /// call, and hands this to [`Tool::abandon`](super::Tool::abandon) if
    /// the run is stopped before they are answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<Value>,
}

/// Rounds (of questions, or waits) one call may ask for: a tool that asks
/// for more fails.
pub const MAX_ASK_ROUNDS: u32 = 10;

/// The most JSON an [`AskRequest`]'s state may be.
pub const MAX_ASK_STATE_BYTES: usize = 256 * 1024;

/// How the person replied to a tool's questions.
#[derive(Debug, Clone, PartialEq)]
pub enum AskOutcome {
    /// Answered (or confirmed the defaults): every question's values.
    Answered(std::collections::BTreeMap<String, Vec<String>>),
    /// Skipped on purpose (for a wait: rejected, the work to be given up).
    Skipped,
    /// Nobody answered within the agent's `hitl_ttl_ms` (or, for a wait,
    /// its own expiry).
    Expired,
    /// The work a wait was for is ready to look at (or somebody said so
    /// with `respond`, and this payload).
    Woke(Option<Value>),
}

/// The reply to a tool's questions (or the end of its wait), with the
/// state it asked them with.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolAnswers {
    /// Which round of this call's questions this answers (1, 2, …).
    pub round: u32,
    pub outcome: AskOutcome,
    pub state: Value,
}

/// Returned from `execute` to ask a person `questions` before the call
/// can finish; see [`AskRequest`].
pub fn ask_questions(reason: impl Into<String>, questions: QuestionSet, state: Value) -> ToolError {
    ToolError::Ask(Box::new(AskRequest {
        reason: reason.into(),
        questions,
        state,
        watch: None,
    }))
}

/// A tool's request, from within a call, to wait for work that runs
/// elsewhere (an MCP server's task): the call parks like a job (its row of
/// kind `park`, with its own expiry; no worker held), and a worker asks
/// [`Tool::poll`](super::Tool::poll) after `poll_after_ms`, then at longer
/// and longer intervals, until it is ready; the tool is then invoked again
/// with [`AskOutcome::Woke`]. A `respond` to the row wakes it too (with its
/// payload); a rejection or the expiry end it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AwaitRequest {
    /// How a client tells waits apart (`task`, …).
    pub reason: String,
    /// Shown as the request's `arguments`, and what `poll` is handed.
    pub payload: Value,
    /// The wait's own expiry, at most (and by default) the agent's
    /// `hitl_ttl_ms`, at least a second.
    pub ttl_ms: Option<u64>,
    /// The first check is due this long after the park, and no check
    /// comes sooner after the one before (at least
    /// [`MIN_CHECK_INTERVAL_MS`]).
    pub poll_after_ms: u64,
    /// The tool's own state, handed back when it is invoked again (at
    /// most [`MAX_ASK_STATE_BYTES`] of JSON).
    pub state: Value,
}

/// Returned from `execute` to wait for work elsewhere; see [`AwaitRequest`].
pub fn await_work(
    reason: impl Into<String>,
    payload: Value,
    state: Value,
    poll_after_ms: u64,
    ttl_ms: Option<u64>,
) -> ToolError {
    ToolError::Await(Box::new(AwaitRequest {
        reason: reason.into(),
        payload,
        ttl_ms,
        poll_after_ms,
        state,
    }))
}

/// The shortest wait between two checks on work elsewhere, whatever a
/// tool asks for.
pub const MIN_CHECK_INTERVAL_MS: u64 = 100;

/// When a worker first looks whether the run of questions with a `watch`
/// was stopped; then half as long again each time, up to a minute (the
/// longest a stopped run's work elsewhere goes on).
pub const WATCH_FIRST_CHECK_MS: u64 = 1_000;

/// What a check of awaited work found.
#[derive(Debug, Clone, PartialEq)]
pub enum Polled {
    /// Done (or changed so that the tool must look): invoke it again.
    Ready,
    /// Not yet: check again, no sooner than `after_ms` from now.
    Pending { after_ms: u64 },
}
