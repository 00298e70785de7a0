//! The port the agent loop holds a run through: what a worker's segment
//! asks of the store between taking the lease and letting it go. Two
//! engines implement it: [`Store`] on Postgres, and
//! [`crate::memory::MemoryEngine`], plain maps the agent loop's unit tests
//! run on.

use agentenkit_core::budget::Spent;
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

    /// What the runs of `thread` but `run` spent, as their journals say:
    /// model calls, tool calls, tokens (asked only by a run whose agent
    /// has a thread budget, once a segment).
    async fn thread_spent(&self, thread: ThreadId, run: RunId) -> Result<Spent>;
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

    async fn thread_spent(&self, thread: ThreadId, run: RunId) -> Result<Spent> {
        let client = self.client().await?;
        // The thread's runs by its messages (each run has its own first
        // one; runs has no index by thread), their entries by key.
        let stmt = client
            .prepare_cached(
                "SELECT count(*) FILTER (WHERE j.name LIKE 'model:%'),
                        count(*) FILTER (WHERE j.name LIKE 'persist:toolcall:%'),
                        coalesce(sum(coalesce((j.value->'usage'->>'inputTokens')::bigint, 0)), 0)::bigint,
                        coalesce(sum(coalesce((j.value->'usage'->>'outputTokens')::bigint, 0)), 0)::bigint
                 FROM (SELECT DISTINCT run_id FROM messages WHERE thread_id = $1) r
                 JOIN journal j ON j.run_id = r.run_id
                 WHERE r.run_id <> $2
                   AND (j.name LIKE 'model:%' OR j.name LIKE 'persist:toolcall:%')",
            )
            .await?;
        let row = client.query_one(&stmt, &[&thread.0, &run.0]).await?;
        let count = |i| row.get::<_, i64>(i).max(0) as u64;
        Ok(Spent {
            model_calls: count(0),
            tool_calls: count(1),
            input_tokens: count(2),
            output_tokens: count(3),
            cost_micro_usd: 0,
        })
    }
}
