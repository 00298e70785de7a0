//! The checkpointer: the journal access of one segment of one run.
//!
//! Every effect of a run goes through [`Checkpointer::checkpoint`]: replayed
//! from the journal when it is there, run and recorded when it is not. A new
//! entry is not committed on its own: the entries of a step are buffered
//! with the rows they change and committed together, in one transaction
//! fenced by the lease, at the boundaries that need durability:
//!
//! * before an outside effect (a tool runs), when the buffer holds a value
//!   decided outside the journal (a model's answer): a tool never runs for
//!   a decision a crash could forget;
//! * right after a tool returns (its output is committed at once, so it
//!   never runs twice);
//! * at the park and at the end of the run (with the run's own change);
//! * before a retry (with the failure counted).
//!
//! A worker that dies with entries still buffered loses only what it can
//! compute again: a value derived from durable state, or a model call
//! (which a replay then makes again; docs/architecture.md says so).
//!
//! Crash points (for tests) are named where the transitions are: each entry
//! name right after the commit that made it durable, `before:<name>` right
//! before that commit, `invoke:<callId>` right before a tool runs, and
//! `park` / `finish` (and `before:park` / `before:finish`) around the
//! commits that end a segment.

use std::collections::HashMap;
use std::future::Future;

use agentenkit_core::journal::names;
use agentenkit_core::{JournalEntry, Replay, ReplayStep, RunCall, ToolCallId, ToolCallStatus};
use agentenkit_store::{Change, Lease, RunContext, RunEngine};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::Instrument;

use super::error::{CrashPoint, SegmentError};

/// How durable a new journal entry must be before the run goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The value can be computed again from durable state (a settled row,
    /// the run's own journal): buffered until the next commit.
    Derived,
    /// The value was decided outside the journal (a model's answer, the
    /// configuration): buffered, but committed before any outside effect.
    Decided,
    /// An outside effect happened (a tool ran): committed at once.
    Effect,
}

/// Journal access for one segment of one run, fenced by its lease.
pub struct Checkpointer<'a> {
    /// The store, as the port a segment holds its run through.
    pub(super) engine: &'a dyn RunEngine,
    lease: &'a Lease,
    replay: Replay,
    crash: Option<&'a CrashPoint>,
    /// The run's tool-call rows: as the lease found them, then as this
    /// segment's changes (committed or buffered) leave them.
    calls: HashMap<ToolCallId, RunCall>,
    /// Changes not committed yet, and the names of their journal entries.
    pending: Vec<Change>,
    pending_names: Vec<String>,
    /// The buffer holds a `Decided` entry.
    pending_decided: bool,
    /// Checkpoints read back from the journal in this segment (a trace
    /// marks the segment with it; replayed steps make no spans).
    replayed: u32,
    /// Messages wait to join the run (`onActive: "steer"`), as the lease
    /// and then the last commit said.
    steered: bool,
}

/// The span of one commit (one transaction, the outbox published after
/// it): its changes and what ends with it. Made only when traces are
/// exported; the messages it publishes carry it, so the next segment is
/// its child.
fn commit_span(changes: usize, label: Option<&str>) -> tracing::Span {
    if !crate::trace::exporting() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        "commit",
        db.system.name = "postgresql",
        db.transactions = 1,
        changes,
        ends = label,
    )
}

impl<'a> Checkpointer<'a> {
    /// The journal access of a segment of the run `ctx` holds.
    pub fn new(
        engine: &'a dyn RunEngine,
        ctx: &'a RunContext,
        crash: Option<&'a CrashPoint>,
    ) -> Self {
        Self {
            engine,
            lease: &ctx.lease,
            replay: Replay::new(ctx.journal.clone()),
            crash,
            calls: ctx
                .calls
                .iter()
                .map(|c| (c.id.clone(), c.clone()))
                .collect(),
            pending: Vec::new(),
            pending_names: Vec::new(),
            pending_decided: false,
            replayed: 0,
            steered: ctx.steered,
        }
    }

    /// Messages wait to join the run at its next model call.
    pub(super) fn steered(&self) -> bool {
        self.steered
    }

    /// Checkpoints read back from the journal so far in this segment
    /// (counted again after a [`Checkpointer::rewind`]).
    pub fn replayed(&self) -> u32 {
        self.replayed
    }

    /// True when the next journal entry is `name`; never an error (for
    /// calls whose entry may legitimately be elsewhere, like a parked one).
    pub fn next_is(&self, name: &str) -> bool {
        self.replay.next_name() == Some(name)
    }

    /// True when the next journal entry is `<prefix>:<n>`: the checks made
    /// before every model call look without making the name.
    pub(super) fn next_is_numbered(&self, prefix: &str, n: u32) -> bool {
        self.replay
            .next_name()
            .is_some_and(|next| names::is_numbered(next, prefix, n))
    }

    /// True while the journal still has entries to read back.
    pub fn is_replaying(&self) -> bool {
        self.replay.is_replaying()
    }

    /// True when the next checkpoint is `name` and already recorded.
    pub fn is_recorded(&self, name: &str) -> Result<bool, SegmentError> {
        self.replay
            .is_next(name)
            .map_err(|e| SegmentError::Permanent(e.to_string()))
    }

    /// The run's row of `call`, as this segment knows it.
    pub(super) fn call(&self, call: &ToolCallId) -> Result<&RunCall, SegmentError> {
        self.calls.get(call).ok_or_else(|| {
            SegmentError::Permanent(format!("tool call {call} has no row in its run"))
        })
    }

    /// Starts reading the journal from the top again (a retried attempt).
    /// Only committed entries may be read back: call after a commit.
    pub fn rewind(&mut self) {
        debug_assert!(self.pending.is_empty());
        self.replay = Replay::new(self.replay.entries().to_vec());
    }

    /// Adds changes to the next commit.
    pub(super) fn buffer(&mut self, changes: Vec<Change>) {
        for change in &changes {
            self.track(change);
        }
        self.pending.extend(changes);
    }

    /// Right before a tool runs: what the buffer holds of decisions made
    /// outside the journal is committed first, so a tool never runs for a
    /// step a crash could make again differently.
    pub(super) async fn before_effect(&mut self, call: &ToolCallId) -> Result<(), SegmentError> {
        if self.pending_decided {
            self.flush(None).await?;
        }
        self.crash_point(&format!("invoke:{call}"))
    }

    /// Commits the buffer (if it holds anything).
    pub(super) async fn flush(&mut self, label: Option<&str>) -> Result<(), SegmentError> {
        if self.pending.is_empty() && label.is_none() {
            return Ok(());
        }
        for name in &self.pending_names {
            self.crash_point(&format!("before:{name}"))?;
        }
        if let Some(label) = label {
            self.crash_point(&format!("before:{label}"))?;
        }
        let span = commit_span(self.pending.len(), label);
        let committed = self
            .engine
            .commit_changes(self.lease, &self.pending)
            .instrument(span)
            .await?;
        self.steered = committed.steered;
        self.pending.clear();
        self.pending_decided = false;
        let names = std::mem::take(&mut self.pending_names);
        for name in &names {
            self.crash_point(name)?;
        }
        if let Some(label) = label {
            self.crash_point(label)?;
        }
        Ok(())
    }

    /// Commits the buffer together with the change that ends the segment
    /// (`label`: `park` or `finish`).
    pub(super) async fn commit_end(
        &mut self,
        changes: Vec<Change>,
        label: &str,
    ) -> Result<(), SegmentError> {
        self.buffer(changes);
        self.flush(Some(label)).await
    }

    /// Forgets what is buffered: the run ends in a way that must not depend
    /// on it (a failure whose cause may be in the buffer itself).
    pub(super) fn discard(&mut self) {
        self.pending.clear();
        self.pending_names.clear();
        self.pending_decided = false;
    }

    fn crash_point(&self, name: &str) -> Result<(), SegmentError> {
        if self.crash.is_some_and(|crash| crash(name)) {
            return Err(SegmentError::Crashed);
        }
        Ok(())
    }

    /// Keeps the view of the run's rows in step with a buffered change.
    fn track(&mut self, change: &Change) {
        match change {
            Change::ProposeToolCall { id, kind, .. } => {
                self.calls
                    .insert(id.clone(), RunCall::proposed(id.clone(), *kind));
            }
            Change::Call { id, event } => {
                // An event the call cannot take is not written either: a
                // park or a settle fails its commit (`calls::write_one`), a
                // park request or result recorded twice changes no row. The
                // view keeps the state it had, as the row does.
                if let Some(call) = self.calls.get_mut(id) {
                    let _ = call.apply(event.clone());
                }
            }
            _ => {}
        }
    }

    /// The checkpoint `name`: its journaled value, or else the value of
    /// `effect`, recorded with the changes the effect returns and made as
    /// durable as `durability` says.
    pub async fn checkpoint<T, F, Fut>(
        &mut self,
        name: String,
        durability: Durability,
        effect: F,
    ) -> Result<T, SegmentError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(T, Vec<Change>), SegmentError>>,
    {
        let position = match self.replay.next(&name) {
            Ok(ReplayStep::Replayed(value)) => {
                self.replayed += 1;
                return serde_json::from_value(value).map_err(|e| {
                    SegmentError::Permanent(format!("journal entry {name} is unreadable: {e}"))
                });
            }
            Ok(ReplayStep::Record { position }) => position,
            Err(e) => return Err(SegmentError::Permanent(e.to_string())),
        };
        let (value, changes) = effect().await?;
        let json = serde_json::to_value(&value)
            .map_err(|e| SegmentError::Permanent(format!("checkpoint {name}: {e}")))?;
        self.buffer(vec![Change::Journal {
            position,
            name: name.clone(),
            value: json.clone(),
        }]);
        self.buffer(changes);
        self.pending_names.push(name.clone());
        self.pending_decided |= durability == Durability::Decided;
        self.replay.recorded(JournalEntry {
            position,
            name,
            value: json,
        });
        if durability == Durability::Effect {
            self.flush(None).await?;
        }
        Ok(value)
    }

    /// The status of a call, as this segment knows it.
    pub(super) fn status(&self, call: &ToolCallId) -> Result<ToolCallStatus, SegmentError> {
        Ok(self.call(call)?.state.status())
    }
}
