//! The port the agent loop holds a run through: what a worker's segment
//! asks of the store between taking the lease and letting it go. Two
//! engines implement it: [`Store`] on Postgres, and
//! [`crate::memory::MemoryEngine`], plain maps the agent loop's unit tests
//! run on.

use agentenkit_core::{RunId, ThreadId};
use async_trait::async_trait;

use crate::change::Change;
use crate::lease::Lease;
use crate::{Result, Store};

#[async_trait]
pub trait RunEngine: Send + Sync {
    /// Writes `changes` in one transaction, fenced by `lease`: all of them
    /// or none, and none once the lease is lost ([`crate::Error::LeaseLost`]).
    async fn commit_changes(&self, lease: &Lease, changes: &[Change]) -> Result<()>;

    /// How many runs the tree rooted at `root` has, the root included.
    async fn runs_in_tree(&self, root: RunId) -> Result<i64>;

    /// Whether an earlier run of `agent` on `thread` had its intake
    /// answered or skipped.
    async fn intake_asked_before(&self, thread: ThreadId, run: RunId, agent: &str) -> Result<bool>;
}

#[async_trait]
impl RunEngine for Store {
    async fn commit_changes(&self, lease: &Lease, changes: &[Change]) -> Result<()> {
        self.commit(lease, changes).await.map(drop)
    }

    async fn runs_in_tree(&self, root: RunId) -> Result<i64> {
        Store::runs_in_tree(self, root).await
    }

    async fn intake_asked_before(&self, thread: ThreadId, run: RunId, agent: &str) -> Result<bool> {
        Store::intake_asked_before(self, thread, run, agent).await
    }
}
