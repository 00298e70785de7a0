//! What a worker changes on the run it holds: a list of [`Change`]s,
//! committed together by `Store::commit` (commit.rs), fenced by its lease.

use agentenkit_core::conversation::Message;
use agentenkit_core::{
    CallEvent, EventType, QueueMessage, RunId, RunStatus, ToolCallId, ToolCallStatus, ToolKind,
};
use serde_json::Value;

/// One row-level change made by a worker on the run it holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A new journal entry (the checkpoint just ran).
    Journal {
        position: u32,
        name: String,
        value: Value,
    },
    /// A message appended to the thread's conversation.
    Message(Message),
    /// A user message sent to the run while it worked, appended to the
    /// conversation as it joins the run (marked `steered`: the lease's
    /// history takes only a run's first user message, its task; the rest
    /// come back from the journal).
    SteeredMessage { content: String },
    /// An event on the thread's stream.
    Event { event_type: EventType, data: Value },
    /// A tool call as the model proposed it, with its resolved kind.
    ProposeToolCall {
        id: ToolCallId,
        name: String,
        arguments: Value,
        kind: ToolKind,
    },
    /// A change of one of the run's calls (`agentenkit_core::call`): it
    /// parks, runs, fails, is refused, or an answered one's result is
    /// recorded. A self-parking tool's request is kept on the row the
    /// moment the tool returns it, so a retried step knows without calling
    /// the tool again.
    Call { id: ToolCallId, event: CallEvent },
    /// A message to publish once this commit is durable.
    Outbox {
        message: QueueMessage,
        delay_ms: u64,
    },
    /// A delegation starts its child run: queued, with the task as its user
    /// message, `RUN_STARTED`, and its first segment in the outbox.
    StartChild {
        call_id: ToolCallId,
        child_run_id: RunId,
        name: String,
        /// The version of the sub-agent the child is pinned to.
        version: Option<String>,
        task: String,
        /// The delegating span, when traces are exported: the child run's
        /// trace continues from it.
        trace: Option<agentenkit_core::TraceContext>,
    },
    /// This (child) run ended: settle the parent's delegation row and
    /// resume the parent if nothing else of it is open.
    FinishDelegation {
        parent_run_id: RunId,
        call_id: ToolCallId,
        status: ToolCallStatus,
        result: Value,
    },
    /// The tokens a provider reported for the call reserved as
    /// `reservation` (`RunEngine::reserve_provider_call`): what the model's
    /// `tokens_per_minute` counts from now on.
    RecordProviderUsage { reservation: i64, tokens: u64 },
    /// The run waits for its open requests; the lease is released.
    WaitRun,
    /// The run goes back to the queue, its next segment delivered in
    /// `delay_ms` (a provider asked to wait): the lease is released, no
    /// attempt is counted, and no worker holds it meanwhile.
    Defer { delay_ms: u64 },
    /// The run ends; the lease is released.
    FinishRun {
        status: RunStatus,
        output: Option<String>,
        error: Option<String>,
    },
    /// One attempt of the segment failed; counted so that a crash loop also
    /// ends.
    RecordFailure { error: String },
    /// The messages steering the run (`RunEngine::steering`, by their
    /// places in the queue) joined it: they leave the queue. Refused (the
    /// commit with it) when one of them is gone.
    TakeSteering { positions: Vec<i64> },
}
