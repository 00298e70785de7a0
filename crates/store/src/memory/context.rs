//! The run as the in-memory engine's lease hands it to a worker: what the
//! Postgres engine's acquire statement reads.

use agentenkit_core::conversation::Message;
use agentenkit_core::{RunCall, RunId};

use super::{Memory, MemoryRun};
use crate::calls::CallColumns;
use crate::lease::{Lease, RunContext};

impl Memory {
    /// What the Postgres engine's acquire reads: a root run sees the
    /// thread's earlier turns (root runs only) and its own user message (not
    /// the messages that steered it, which its journal holds); a child run
    /// sees only its task.
    pub(super) fn context_of(&self, run: &MemoryRun) -> RunContext {
        let is_root = |id: &RunId| self.runs.get(id).is_some_and(|r| r.parent.is_none());
        let history = self
            .messages
            .iter()
            .enumerate()
            .filter(|(i, (thread, from, message))| {
                let user = matches!(message, Message::User { .. });
                let own_task = user && !self.steered_messages.contains(i);
                *thread == run.thread
                    && match run.parent {
                        None => (*from != run.id || own_task) && is_root(from),
                        Some(_) => *from == run.id && user,
                    }
            })
            .map(|(_, (_, _, message))| message.clone())
            .collect();
        let calls = self
            .calls
            .iter()
            .filter(|c| c.run == run.id)
            .map(|c| {
                let child = self
                    .runs
                    .values()
                    .find(|r| r.parent.as_ref() == Some(&(run.id, c.id.clone())))
                    .map(|r| r.id);
                // What the Postgres engine's worker reads: the call as its
                // columns keep it.
                CallColumns::of(&RunCall {
                    id: c.id.clone(),
                    kind: c.kind,
                    state: c.state.clone(),
                    child,
                })
                .decode()
                .expect("the columns of a call read back")
            })
            .collect();
        RunContext {
            lease: Lease {
                run_id: run.id,
                thread_id: run.thread,
                token: run.token,
                ttl_ms: 60_000,
                run_name: run.name.clone(),
                depth: run.depth,
                root_run_id: run.root,
                slot_owner: None,
            },
            parent_tool_call_id: run.parent.as_ref().map(|(_, call)| call.to_string()),
            parent_run_id: run.parent.as_ref().map(|(parent, _)| *parent),
            attempts: run.attempts,
            takeovers: run.takeovers,
            deferrals: run.deferrals,
            agent_version: run.version.clone(),
            steered: self.steered(run.id),
            journal: self.journal.get(&run.id).cloned().unwrap_or_default(),
            history,
            calls,
        }
    }
}
