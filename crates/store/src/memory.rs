//! The in-memory engine: the store's port ([`RunEngine`]) over plain maps,
//! so the agent loop and the answer rules are tested in microseconds.
//!
//! It keeps the rules of the Postgres engine that the loop can observe: a
//! commit is all or nothing and fenced by its lease; journal positions are
//! consecutive and never written twice; a call is inserted once and then
//! changes only by a [`CallEvent`] its state takes (`CallState::apply`, the
//! rule `store::calls` writes by); a waiting run resumes, with its next
//! segment, once none of its requests and none of its child runs is open.
//! It leaves out what only Postgres and the broker do: other processes,
//! clocks, notifications, the packed forms. Its outbox is a list.

use std::collections::BTreeMap;
use std::sync::Mutex;

use agentenkit_core::budget::ThreadSpending;
use agentenkit_core::conversation::Message;
use agentenkit_core::reply::SettledReply;
use agentenkit_core::{
    CallEvent, CallState, EventType, JournalEntry, QueueMessage, RunId, RunStatus, ThreadId,
    ToolCallId, ToolCallStatus, ToolKind,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::change::Change;
use crate::commit::Committed;
use crate::engine::{RunEngine, Steering};
use crate::lease::{Lease, RunContext};
use crate::{Error, Result};

/// One run, as the engine keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryRun {
    pub id: RunId,
    pub thread: ThreadId,
    pub name: String,
    pub status: RunStatus,
    /// The run and the delegation call a child run answers.
    pub parent: Option<(RunId, ToolCallId)>,
    pub root: RunId,
    pub depth: i32,
    pub version: Option<String>,
    pub token: i64,
    /// The current segment; a resume queues the next.
    pub seq: i64,
    pub attempts: i32,
    pub takeovers: i32,
    /// Segments deferred in a row without progress.
    pub deferrals: i32,
    pub output: Option<String>,
    pub error: Option<String>,
}

/// One tool call, as the engine keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryCall {
    pub run: RunId,
    pub id: ToolCallId,
    pub name: String,
    pub kind: ToolKind,
    pub arguments: Value,
    pub state: CallState,
}

/// One event of a thread's stream.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryEvent {
    pub thread: ThreadId,
    pub run: Option<RunId>,
    pub event_type: EventType,
    pub data: Value,
}

/// Everything the engine holds; [`MemoryEngine::snapshot`] gives a copy.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    pub runs: BTreeMap<RunId, MemoryRun>,
    pub journal: BTreeMap<RunId, Vec<JournalEntry>>,
    /// In the order they were proposed.
    pub calls: Vec<MemoryCall>,
    /// `(thread, run, message)`, in the order they were written.
    pub messages: Vec<(ThreadId, RunId, Message)>,
    pub events: Vec<MemoryEvent>,
    /// What would be published, in commit order.
    pub outbox: Vec<QueueMessage>,
    /// Messages waiting to join runs at their next model call.
    pub steering: Vec<MemorySteering>,
    /// The places in `messages` of those that joined their run.
    pub steered_messages: std::collections::BTreeSet<usize>,
    /// Provider calls reserved, for models with limits.
    pub provider_calls: Vec<spending::MemoryProviderCall>,
    /// Commits that wrote, and commits refused (all or nothing).
    pub commits: usize,
    pub refused_commits: usize,
}

/// The in-memory engine.
#[derive(Debug, Default)]
pub struct MemoryEngine {
    memory: Mutex<Memory>,
}

impl MemoryEngine {
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of everything the engine holds.
    pub fn snapshot(&self) -> Memory {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        // A test that panicked holding the lock poisoned nothing the next
        // reader cannot read: the state is replaced whole or not at all.
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new thread's first turn: a queued run of `agent` with `content`
    /// as its user message.
    pub fn start_turn(&self, agent: &str, content: &str) -> RunId {
        self.start_on(ThreadId::new(), agent, content)
    }

    /// A turn on `thread`.
    pub fn start_on(&self, thread: ThreadId, agent: &str, content: &str) -> RunId {
        let id = RunId::new();
        let mut memory = self.lock();
        memory.start(id, thread, agent, None, content, (id, 0));
        id
    }

    /// Takes the lease of a queued run (or of a running one, as a worker
    /// taking over from one that died): what a worker's segment starts
    /// from. `None` when the run is waiting or finished.
    pub fn lease(&self, run: RunId) -> Option<RunContext> {
        let mut memory = self.lock();
        let held = memory.runs.get_mut(&run)?;
        match held.status {
            RunStatus::Queued => {}
            RunStatus::Running => held.takeovers += 1,
            _ => return None,
        }
        held.status = RunStatus::Running;
        held.token += 1;
        let held = held.clone();
        Some(memory.context_of(&held))
    }

    /// A person's reply settles `call` of `run` (the store's answer, with
    /// the rules above the port already applied): the call is decided,
    /// `INPUT_RESOLVED` is written, and the run resumes if that was all it
    /// waited on.
    pub fn answer(&self, run: RunId, call: &ToolCallId, reply: SettledReply) -> Result<()> {
        let mut memory = self.lock();
        let data = json!({ "runId": run, "toolCallId": call, "status": reply.status });
        memory.settle(
            run,
            call,
            CallEvent::Answer {
                reply: Box::new(reply),
            },
            data,
        )
    }

    /// `call` of `run` expires unanswered at `at`.
    pub fn expire(&self, run: RunId, call: &ToolCallId, at: DateTime<Utc>) -> Result<()> {
        let mut memory = self.lock();
        let data = json!({ "runId": run, "toolCallId": call, "status": "expired" });
        memory.settle(run, call, CallEvent::Expire { at }, data)
    }
}

impl Memory {
    pub fn run(&self, id: RunId) -> Option<&MemoryRun> {
        self.runs.get(&id)
    }

    pub fn call(&self, run: RunId, id: &str) -> Option<&MemoryCall> {
        self.calls
            .iter()
            .find(|c| c.run == run && c.id.as_str() == id)
    }

    /// The event types of `thread`, in order.
    pub fn event_types(&self, thread: ThreadId) -> Vec<EventType> {
        self.events
            .iter()
            .filter(|e| e.thread == thread)
            .map(|e| e.event_type)
            .collect()
    }

    /// The names of `run`'s journal entries, in order.
    pub fn journal_names(&self, run: RunId) -> Vec<String> {
        self.journal
            .get(&run)
            .map(|entries| entries.iter().map(|e| e.name.clone()).collect())
            .unwrap_or_default()
    }

    fn start(
        &mut self,
        id: RunId,
        thread: ThreadId,
        name: &str,
        parent: Option<(RunId, ToolCallId, String)>,
        task: &str,
        (root, depth): (RunId, i32),
    ) {
        let (parent, version) = match parent {
            Some((run, call, version)) => (Some((run, call)), Some(version)),
            None => (None, None),
        };
        self.runs.insert(
            id,
            MemoryRun {
                id,
                thread,
                name: name.to_owned(),
                status: RunStatus::Queued,
                parent,
                root,
                depth,
                version: version.filter(|v| !v.is_empty()),
                token: 0,
                seq: 1,
                attempts: 0,
                takeovers: 0,
                deferrals: 0,
                output: None,
                error: None,
            },
        );
        self.messages.push((
            thread,
            id,
            Message::User {
                content: task.to_owned(),
            },
        ));
        self.outbox
            .push(QueueMessage::Segment { run_id: id, seq: 1 });
        self.events.push(MemoryEvent {
            thread,
            run: Some(id),
            event_type: EventType::RunStarted,
            data: json!({ "runId": id, "runName": name, "depth": depth }),
        });
    }

    fn call_mut(&mut self, run: RunId, id: &ToolCallId) -> Result<&mut MemoryCall> {
        self.calls
            .iter_mut()
            .find(|c| c.run == run && &c.id == id)
            .ok_or_else(|| Error::NotFound {
                what: "tool call",
                id: id.to_string(),
            })
    }

    /// `event` on the call, which its state must take.
    fn change_call(&mut self, run: RunId, id: &ToolCallId, event: CallEvent) -> Result<()> {
        let call = self.call_mut(run, id)?;
        call.state = call
            .state
            .clone()
            .apply(event)
            .map_err(|e| Error::Corrupt(format!("tool call {id} of run {run}: {e}")))?;
        Ok(())
    }

    /// An answer or expiry: the call settles, its event is written, and
    /// the run resumes if nothing else of it is open.
    fn settle(
        &mut self,
        run: RunId,
        call: &ToolCallId,
        event: CallEvent,
        data: Value,
    ) -> Result<()> {
        let thread = self
            .runs
            .get(&run)
            .ok_or_else(|| Error::NotFound {
                what: "run",
                id: run.to_string(),
            })?
            .thread;
        self.change_call(run, call, event)?;
        self.events.push(MemoryEvent {
            thread,
            run: Some(run),
            event_type: EventType::InputResolved,
            data,
        });
        self.resume_if_settled(run);
        Ok(())
    }

    /// A waiting run with no open request and no live child is queued with
    /// its next segment.
    fn resume_if_settled(&mut self, run: RunId) {
        let open_call = self
            .calls
            .iter()
            .any(|c| c.run == run && c.state.status() == ToolCallStatus::PendingApproval);
        let live_child = self.runs.values().any(|r| {
            r.parent.as_ref().is_some_and(|(parent, _)| *parent == run) && r.status.is_active()
        });
        let Some(waiting) = self.runs.get_mut(&run) else {
            return;
        };
        if waiting.status == RunStatus::Waiting && !open_call && !live_child {
            waiting.status = RunStatus::Queued;
            waiting.seq += 1;
            let seq = waiting.seq;
            self.outbox.push(QueueMessage::Segment { run_id: run, seq });
        }
    }

    /// One change of a commit, on this copy of the state.
    fn apply(&mut self, lease: &Lease, change: &Change) -> Result<()> {
        let run = lease.run_id;
        match change {
            Change::Journal {
                position,
                name,
                value,
            } => self.append_journal(run, *position, name, value)?,
            Change::Message(message) => self.messages.push((lease.thread_id, run, message.clone())),
            Change::Event { event_type, data } => self.events.push(MemoryEvent {
                thread: lease.thread_id,
                run: Some(run),
                event_type: *event_type,
                data: data.clone(),
            }),
            Change::ProposeToolCall {
                id,
                name,
                arguments,
                kind,
            } => self.propose(run, id, name, *kind, arguments)?,
            Change::Call { id, event } => self.write_call(run, id, event)?,
            Change::Outbox { message, .. } => self.outbox.push(message.clone()),
            Change::StartChild {
                call_id,
                child_run_id,
                name,
                version,
                task,
                trace: _,
            } => {
                let parent = (run, call_id.clone(), version.clone().unwrap_or_default());
                let at = (lease.root_run_id, lease.depth + 1);
                self.start(*child_run_id, lease.thread_id, name, Some(parent), task, at);
            }
            Change::FinishDelegation {
                parent_run_id,
                call_id,
                status,
                result,
            } => {
                let finish = CallEvent::Finish {
                    status: *status,
                    result: result.clone(),
                };
                // A parent already settled (stopped) takes nothing.
                let _ = self.change_call(*parent_run_id, call_id, finish);
            }
            Change::RecordProviderUsage {
                reservation,
                tokens,
            } => self.record_provider_usage(*reservation, *tokens),
            Change::WaitRun => self.end_segment(run, RunStatus::Waiting)?,
            Change::Defer { .. } => self.defer(run)?,
            Change::FinishRun {
                status,
                output,
                error,
            } => {
                self.end_segment(run, *status)?;
                let finished = self.runs.get_mut(&run).expect("fenced");
                finished.output = output.clone();
                finished.error = error.clone();
                // A child's end may be what its parent waited on last.
                if let Some((parent, _)) = finished.parent.clone() {
                    self.resume_if_settled(parent);
                }
            }
            Change::TakeSteering { positions } => self.take_steering(run, positions)?,
            Change::SteeredMessage { content } => self.join(lease.thread_id, run, content),
            Change::RecordFailure { error } => {
                let failed = self.runs.get_mut(&run).expect("fenced");
                failed.attempts += 1;
                failed.error = Some(error.clone());
            }
        }
        Ok(())
    }

    /// A call as the model proposed it; inserted once (the primary key).
    fn propose(
        &mut self,
        run: RunId,
        id: &ToolCallId,
        name: &str,
        kind: ToolKind,
        arguments: &Value,
    ) -> Result<()> {
        if self.call(run, id.as_str()).is_some() {
            return Err(Error::Corrupt(format!(
                "tool call {id} of run {run} exists"
            )));
        }
        self.calls.push(MemoryCall {
            run,
            id: id.clone(),
            name: name.to_owned(),
            kind,
            arguments: arguments.clone(),
            state: CallState::proposed(),
        });
        Ok(())
    }

    /// The next journal entry of `run`: positions are consecutive and each
    /// is written once (the journal's primary key).
    fn append_journal(
        &mut self,
        run: RunId,
        position: u32,
        name: &str,
        value: &Value,
    ) -> Result<()> {
        let entries = self.journal.entry(run).or_default();
        if position as usize != entries.len() {
            return Err(Error::Corrupt(format!(
                "journal position {position} of run {run} is not the next one ({})",
                entries.len()
            )));
        }
        entries.push(JournalEntry {
            position,
            name: name.to_owned(),
            value: value.clone(),
        });
        Ok(())
    }

    /// A commit's change of one of its run's calls. A park may change the
    /// call's kind, and a self-parking tool's park its arguments.
    fn write_call(&mut self, run: RunId, id: &ToolCallId, event: &CallEvent) -> Result<()> {
        let written = self.change_call(run, id, event.clone());
        if let CallEvent::Park {
            kind, arguments, ..
        } = event
        {
            let call = self.call_mut(run, id)?;
            call.kind = *kind;
            if let Some(arguments) = arguments {
                call.arguments = arguments.clone();
            }
        }
        // What `store::calls::write` writes without a row check: a request
        // recorded again, a result of a call nobody answered.
        match event {
            CallEvent::RecordParkRequest { .. } | CallEvent::RecordResult { .. } => Ok(()),
            _ => written,
        }
    }

    /// The run back to the queue, its next segment in the outbox.
    fn defer(&mut self, run: RunId) -> Result<()> {
        self.end_segment(run, RunStatus::Queued)?;
        let deferred = self.runs.get_mut(&run).expect("fenced");
        deferred.seq += 1;
        deferred.deferrals += 1;
        let seq = deferred.seq;
        self.outbox.push(QueueMessage::Segment { run_id: run, seq });
        Ok(())
    }

    fn end_segment(&mut self, run: RunId, status: RunStatus) -> Result<()> {
        let ended = self.runs.get_mut(&run).expect("fenced");
        if ended.status != RunStatus::Running {
            return Err(Error::Corrupt(format!(
                "run {run} ends its segment twice in one commit"
            )));
        }
        ended.status = status;
        Ok(())
    }
}

#[async_trait]
impl RunEngine for MemoryEngine {
    async fn commit_changes(&self, lease: &Lease, changes: &[Change]) -> Result<Committed> {
        let mut memory = self.lock();
        let fenced = memory
            .runs
            .get(&lease.run_id)
            .is_some_and(|r| r.status == RunStatus::Running && r.token == lease.token);
        if !fenced {
            memory.refused_commits += 1;
            return Err(Error::LeaseLost {
                run_id: lease.run_id.to_string(),
            });
        }
        let mut next = memory.clone();
        for change in changes {
            if let Err(e) = next.apply(lease, change) {
                memory.refused_commits += 1;
                return Err(e);
            }
        }
        // A new journal entry is progress: the failed attempts and the
        // takeovers of the step before it no longer count (the fence's
        // rule in `lease::fence`).
        if changes.iter().any(|c| matches!(c, Change::Journal { .. })) {
            let run = next.runs.get_mut(&lease.run_id).expect("fenced");
            run.attempts = 0;
            run.takeovers = 0;
            // As the Postgres fence: a deferral with progress is the first.
            run.deferrals = i32::from(changes.iter().any(|c| matches!(c, Change::Defer { .. })));
        }
        next.commits += 1;
        // As the Postgres fence says: only to a run still going.
        let going = next
            .runs
            .get(&lease.run_id)
            .is_some_and(|r| r.status == RunStatus::Running);
        let steered = going && next.steered(lease.run_id);
        *memory = next;
        Ok(Committed { steered })
    }

    async fn steering(&self, run: RunId) -> Result<Vec<Steering>> {
        Ok(self.lock().steering_of(run))
    }

    async fn runs_in_tree(&self, root: RunId) -> Result<i64> {
        let memory = self.lock();
        Ok(memory.runs.values().filter(|r| r.root == root).count() as i64)
    }

    async fn intake_asked_before(&self, thread: ThreadId, run: RunId, agent: &str) -> Result<bool> {
        let memory = self.lock();
        Ok(memory.calls.iter().any(|c| {
            c.run != run
                && c.id.as_str() == "intake"
                && c.kind == ToolKind::Ask
                && matches!(
                    c.state.status(),
                    ToolCallStatus::Executed | ToolCallStatus::Rejected
                )
                && memory
                    .runs
                    .get(&c.run)
                    .is_some_and(|r| r.thread == thread && r.name == agent)
        }))
    }

    async fn reserve_provider_call(
        &self,
        key: &str,
        limit: crate::ProviderLimit,
        tokens: u64,
    ) -> Result<crate::Reservation> {
        let now = std::time::Instant::now();
        Ok(self.lock().reserve_provider_call(key, limit, tokens, now))
    }

    async fn thread_spent(&self, thread: ThreadId, run: RunId) -> Result<ThreadSpending> {
        Ok(self.lock().thread_spending(thread, run))
    }
}

mod context;
mod spending;
mod steering;
#[cfg(test)]
mod tests;

pub use steering::MemorySteering;
