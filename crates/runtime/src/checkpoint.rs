//! The checkpointer: the journal access of one segment of one run.
//!
//! Every effect of a run goes through [`Checkpointer::checkpoint`]: replayed
//! from the journal when it is there, run and journaled (with the rows it
//! changes, in one transaction fenced by the lease) when it is not.

use std::future::Future;

use agentenkit_core::{JournalEntry, Replay, ReplayStep, RunId, ToolCallId, ToolCallStatus};
use agentenkit_store::{Change, Lease, Store};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::agent_loop::CrashPoint;
use crate::relay::Relay;
use crate::worker::SegmentError;

/// Journal access for one segment of one run, fenced by its lease.
pub struct Checkpointer<'a> {
    pub(crate) store: &'a Store,
    relay: &'a Relay,
    lease: &'a Lease,
    replay: Replay,
    crash: Option<&'a CrashPoint>,
}

impl<'a> Checkpointer<'a> {
    pub fn new(
        store: &'a Store,
        relay: &'a Relay,
        lease: &'a Lease,
        journal: Vec<JournalEntry>,
        crash: Option<&'a CrashPoint>,
    ) -> Self {
        Self {
            store,
            relay,
            lease,
            replay: Replay::new(journal),
            crash,
        }
    }

    /// True when the next journal entry is `name`; never an error (for
    /// calls whose entry may legitimately be elsewhere, like a parked one).
    pub fn next_is(&self, name: &str) -> bool {
        self.replay.is_next(name).unwrap_or(false)
    }

    /// Commits changes that are not a checkpoint (fenced by the lease).
    pub async fn commit(&self, changes: Vec<Change>) -> Result<(), SegmentError> {
        let outbox = self.store.commit(self.lease, &changes).await?;
        self.relay.publish(&outbox).await;
        Ok(())
    }

    /// True when the next checkpoint is `name` and already recorded.
    pub fn is_recorded(&self, name: &str) -> Result<bool, SegmentError> {
        self.replay
            .is_next(name)
            .map_err(|e| SegmentError::Permanent(e.to_string()))
    }

    /// The status of a call that waits behind another (not journaled).
    pub(crate) async fn store_status(
        &self,
        run: RunId,
        call: &ToolCallId,
    ) -> Result<ToolCallStatus, SegmentError> {
        Ok(match self.store.tool_call_reply(run, call).await? {
            Ok(reply) => reply.status,
            Err(status) => status,
        })
    }

    /// Starts reading the journal from the top again (a retried attempt).
    pub fn rewind(&mut self) {
        self.replay = Replay::new(self.replay.entries().to_vec());
    }

    /// The checkpoint `name`: its journaled value, or else the value of
    /// `effect`, committed together with the changes the effect returns.
    pub async fn checkpoint<T, F, Fut>(
        &mut self,
        name: String,
        effect: F,
    ) -> Result<T, SegmentError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(T, Vec<Change>), SegmentError>>,
    {
        let position = match self.replay.next(&name) {
            Ok(ReplayStep::Replayed(value)) => {
                return serde_json::from_value(value).map_err(|e| {
                    SegmentError::Permanent(format!("journal entry {name} is unreadable: {e}"))
                });
            }
            Ok(ReplayStep::Record { position }) => position,
            Err(e) => return Err(SegmentError::Permanent(e.to_string())),
        };
        let (value, mut changes) = effect().await?;
        let json = serde_json::to_value(&value)
            .map_err(|e| SegmentError::Permanent(format!("checkpoint {name}: {e}")))?;
        changes.insert(
            0,
            Change::Journal {
                position,
                name: name.clone(),
                value: json.clone(),
            },
        );
        let outbox = self.store.commit(self.lease, &changes).await?;
        self.relay.publish(&outbox).await;
        self.replay.recorded(JournalEntry {
            position,
            name: name.clone(),
            value: json,
        });
        if self.crash.is_some_and(|crash| crash(&name)) {
            return Err(SegmentError::Crashed);
        }
        Ok(value)
    }
}
