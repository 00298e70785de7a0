//! The port the agent loop holds a run through: what a worker's segment
//! asks of the store between taking the lease and letting it go. Two
//! engines implement it: [`Store`] on Postgres, and
//! [`crate::memory::MemoryEngine`], plain maps the agent loop's unit tests
//! run on.

use agentenkit_core::{RunId, ThreadId};
use async_trait::async_trait;

use crate::change::Change;
use crate::commit::Committed;
use crate::lease::Lease;
use crate::{Result, Store};

/// A message sent to a run while it works, waiting to join it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steering {
    /// Its place in the thread's queue.
    pub position: i64,
    pub content: String,
}

#[async_trait]
pub trait RunEngine: Send + Sync {
    /// Writes `changes` in one transaction, fenced by `lease`: all of them
    /// or none, and none once the lease is lost ([`crate::Error::LeaseLost`]).
    async fn commit_changes(&self, lease: &Lease, changes: &[Change]) -> Result<Committed>;

    /// The messages waiting to join `run` at its next model call, in the
    /// order they were sent (asked only when a commit or the lease said
    /// some wait).
    async fn steering(&self, run: RunId) -> Result<Vec<Steering>>;

    /// How many runs the tree rooted at `root` has, the root included.
    async fn runs_in_tree(&self, root: RunId) -> Result<i64>;

    /// Whether an earlier run of `agent` on `thread` had its intake
    /// answered or skipped.
    async fn intake_asked_before(&self, thread: ThreadId, run: RunId, agent: &str) -> Result<bool>;
}

#[async_trait]
impl RunEngine for Store {
    async fn commit_changes(&self, lease: &Lease, changes: &[Change]) -> Result<Committed> {
        self.commit(lease, changes).await
    }

    async fn steering(&self, run: RunId) -> Result<Vec<Steering>> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT position, content FROM queued_turns WHERE steers = $1 ORDER BY position",
            )
            .await?;
        Ok(client
            .query(&stmt, &[&run.0])
            .await?
            .iter()
            .map(|row| Steering {
                position: row.get(0),
                content: row.get(1),
            })
            .collect())
    }

    async fn runs_in_tree(&self, root: RunId) -> Result<i64> {
        Store::runs_in_tree(self, root).await
    }

    async fn intake_asked_before(&self, thread: ThreadId, run: RunId, agent: &str) -> Result<bool> {
        Store::intake_asked_before(self, thread, run, agent).await
    }
}
