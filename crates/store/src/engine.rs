//! The port the agent loop holds a run through: what a worker's segment
//! asks of the store between taking the lease and letting it go. Two
//! engines implement it: [`Store`] on Postgres, and
//! [`crate::memory::MemoryEngine`], plain maps the agent loop's unit tests
//! run on.

use agentenkit_core::budget::{Limits, Spent, ThreadSpending};
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

/// A model's limits across the fleet (docs/budgets.md, "Provider limits").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderLimit {
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u64>,
}

/// What reserving a provider call found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    /// The call may go now; its row gets the tokens the provider reports
    /// ([`Change::RecordProviderUsage`]).
    Granted(i64),
    /// The limit is reached: room frees up after this long.
    Wait(std::time::Duration),
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

    /// What the runs of `thread` but `run` spent, as their journals say
    /// (model calls, tool calls, tokens), and the thread budget their
    /// answers granted (asked only by a run whose agent has a thread
    /// budget, once a segment).
    async fn thread_spent(&self, thread: ThreadId, run: RunId) -> Result<ThreadSpending>;

    /// Reserves a call of the model limited as `limit` under `key`, which
    /// the caller estimates at `tokens`, in a transaction of its own (asked
    /// only before a call the run is about to make, of a model with a
    /// limit).
    async fn reserve_provider_call(
        &self,
        key: &str,
        limit: ProviderLimit,
        tokens: u64,
    ) -> Result<Reservation>;
}

/// What the runs of thread `$1` but `$2` spent and were granted (see
/// `RunEngine::thread_spent`). Sums saturate at what a bigint holds.
pub(crate) const THREAD_SPENT_SQL: &str = "
    WITH entries AS (
        SELECT j.name, j.value FROM (SELECT DISTINCT run_id FROM messages WHERE thread_id = $1) r
        -- each run's entries by its key: OFFSET 0 keeps the lookup from
        -- being planned as a join, which, on tables analyzed while empty,
        -- may walk the whole journal index
        CROSS JOIN LATERAL (SELECT name, value FROM journal
                            WHERE journal.run_id = r.run_id OFFSET 0) j
        WHERE r.run_id <> $2
          AND (j.name LIKE 'model:%' OR j.name LIKE 'persist:toolcall:%'
               OR j.name LIKE 'budget:%:granted')),
    sums AS (
        SELECT count(*) FILTER (WHERE name LIKE 'model:%') AS model_calls,
               count(*) FILTER (WHERE name LIKE 'persist:toolcall:%') AS tool_calls,
               sum((value->'usage'->>'inputTokens')::numeric) AS input_tokens,
               sum((value->'usage'->>'outputTokens')::numeric) AS output_tokens,
               sum((value->'add'->>'model_calls')::numeric) FILTER (WHERE value->>'scope' = 'thread') AS g_model,
               sum((value->'add'->>'tool_calls')::numeric) FILTER (WHERE value->>'scope' = 'thread') AS g_tool,
               sum((value->'add'->>'input_tokens')::numeric) FILTER (WHERE value->>'scope' = 'thread') AS g_in,
               sum((value->'add'->>'output_tokens')::numeric) FILTER (WHERE value->>'scope' = 'thread') AS g_out
        FROM entries)
    SELECT model_calls, tool_calls,
           least(coalesce(input_tokens, 0), 9223372036854775807)::bigint,
           least(coalesce(output_tokens, 0), 9223372036854775807)::bigint,
           least(coalesce(g_model, 0), 9223372036854775807)::bigint,
           least(coalesce(g_tool, 0), 9223372036854775807)::bigint,
           least(coalesce(g_in, 0), 9223372036854775807)::bigint,
           least(coalesce(g_out, 0), 9223372036854775807)::bigint
    FROM sums";

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

    async fn reserve_provider_call(
        &self,
        key: &str,
        limit: ProviderLimit,
        tokens: u64,
    ) -> Result<Reservation> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT reservation, wait_ms FROM reserve_provider_call($1, $2, $3, $4)",
            )
            .await?;
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let row = client
            .query_one(
                &stmt,
                &[
                    &key,
                    &limit
                        .requests_per_minute
                        .map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
                    &limit.tokens_per_minute.map(clamp),
                    &clamp(tokens),
                ],
            )
            .await?;
        Ok(match row.get::<_, Option<i64>>(0) {
            Some(id) => Reservation::Granted(id),
            None => Reservation::Wait(std::time::Duration::from_millis(
                row.get::<_, i64>(1).max(1) as u64,
            )),
        })
    }

    async fn intake_asked_before(&self, thread: ThreadId, run: RunId, agent: &str) -> Result<bool> {
        Store::intake_asked_before(self, thread, run, agent).await
    }

    async fn thread_spent(&self, thread: ThreadId, run: RunId) -> Result<ThreadSpending> {
        let client = self.client().await?;
        // The thread's runs by its messages (each run has its own first
        // one; runs has no index by thread), their entries by key.
        let stmt = client.prepare_cached(THREAD_SPENT_SQL).await?;
        let row = client.query_one(&stmt, &[&thread.0, &run.0]).await?;
        let count = |i| row.get::<_, i64>(i).max(0) as u64;
        let granted = |i| Some(count(i)).filter(|n| *n > 0);
        Ok(ThreadSpending {
            spent: Spent {
                model_calls: count(0),
                tool_calls: count(1),
                input_tokens: count(2),
                output_tokens: count(3),
                cost_micro_usd: 0,
            },
            granted: Limits {
                model_calls: granted(4),
                tool_calls: granted(5),
                input_tokens: granted(6),
                output_tokens: granted(7),
                cost_micro_usd: None,
            },
        })
    }
}
