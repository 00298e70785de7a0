//! Messages that steer a run, as the in-memory engine keeps them: what
//! `queued_turns` rows with `steers` are to the Postgres engine.

use agentenkit_core::conversation::Message;
use agentenkit_core::{RunId, ThreadId};

use super::{Memory, MemoryEngine};
use crate::engine::Steering;
use crate::{Error, Result};

/// A message waiting to join run `run` at its next model call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemorySteering {
    pub run: RunId,
    pub position: i64,
    pub content: String,
}

impl MemoryEngine {
    /// Sends `content` to steer `run` (`onActive: "steer"`); its place in
    /// the queue.
    pub fn steer(&self, run: RunId, content: &str) -> i64 {
        let mut memory = self.lock();
        let position = memory
            .steering
            .iter()
            .map(|s| s.position)
            .max()
            .unwrap_or(0)
            + 1;
        memory.steering.push(MemorySteering {
            run,
            position,
            content: content.to_owned(),
        });
        position
    }
}

impl Memory {
    /// Messages wait to join `run`.
    pub(super) fn steered(&self, run: RunId) -> bool {
        self.steering.iter().any(|s| s.run == run)
    }

    /// What waits to join `run`, in the order it was sent.
    pub(super) fn steering_of(&self, run: RunId) -> Vec<Steering> {
        let mut waiting: Vec<Steering> = self
            .steering
            .iter()
            .filter(|s| s.run == run)
            .map(|s| Steering {
                position: s.position,
                content: s.content.clone(),
            })
            .collect();
        waiting.sort_by_key(|s| s.position);
        waiting
    }

    /// A message that steered `run` joins its conversation.
    pub(super) fn join(&mut self, thread: ThreadId, run: RunId, content: &str) {
        self.steered_messages.insert(self.messages.len());
        self.messages.push((
            thread,
            run,
            Message::User {
                content: content.to_owned(),
            },
        ));
    }

    /// The messages at `positions` joined `run`: all of them leave the
    /// queue, or the commit is refused (as the Postgres engine's
    /// statement refuses it).
    pub(super) fn take_steering(&mut self, run: RunId, positions: &[i64]) -> Result<()> {
        let held = |p: &i64| {
            self.steering
                .iter()
                .any(|s| s.run == run && s.position == *p)
        };
        if !positions.iter().all(held) {
            return Err(Error::LeaseLost {
                run_id: run.to_string(),
            });
        }
        self.steering
            .retain(|s| !(s.run == run && positions.contains(&s.position)));
        Ok(())
    }
}
