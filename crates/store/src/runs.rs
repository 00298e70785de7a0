//! Reads of runs: one run as the API shows it, its journal, its tree, and
//! what a segment asks of earlier runs (an intake asked before).

use agentenkit_core::canonical::json_len;
use agentenkit_core::{JournalEntry, Owner, RunId, RunStatus, ThreadId};
use tokio_postgres::Row;
use uuid::Uuid;

use crate::bounded::{read_bounded, ReadBound, ReadPage};
use crate::format::journal::{self as stored_journal, StoredEntry};
use crate::views::{RunView, UsageView};
use crate::{Error, Result, Store};

impl Store {
    /// Whether an earlier run of `agent` on this thread had its intake
    /// answered or skipped (for `when = "thread-start"`): an asking that was
    /// stopped (or failed) before anyone answered does not count, so the
    /// next turn asks again.
    pub async fn intake_asked_before(
        &self,
        thread: ThreadId,
        run: RunId,
        agent: &str,
    ) -> Result<bool> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM tool_calls tc JOIN runs r ON r.id = tc.run_id
                                WHERE tc.thread_id = $1 AND tc.run_id <> $2 AND tc.id = 'intake'
                                  AND tc.kind = 'ask' AND r.name = $3
                                  AND tc.status IN ('executed', 'rejected'))",
            )
            .await?;
        Ok(client
            .query_one(&stmt, &[&thread.0, &run.0, &agent])
            .await?
            .get(0))
    }

    /// How many runs the tree of root run `root` holds, the root included.
    pub async fn runs_in_tree(&self, root: RunId) -> Result<i64> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT 1 + count(*) FROM runs WHERE root_run_id = $1 AND parent_run_id IS NOT NULL",
            )
            .await?;
        Ok(client.query_one(&stmt, &[&root.0]).await?.get(0))
    }

    /// How many runs have the status, across owners (operators and the
    /// bench; the reaper's statuses are indexed, the others are a scan).
    /// The status is written into the statement, not bound: a generic plan
    /// (see `StoreConfig::plan_for_growth`) of `status = $1` could not use
    /// the partial index of the reaper's statuses.
    pub async fn count_runs(&self, status: RunStatus) -> Result<i64> {
        let client = self.client().await?;
        let row = client
            .query_one(
                &format!(
                    "SELECT count(*) FROM runs WHERE status = '{}'",
                    status.as_str()
                ),
                &[],
            )
            .await?;
        Ok(row.get(0))
    }

    /// Which of `runs` have `status` now (one query, primary-key lookups).
    pub async fn runs_with_status(&self, runs: &[RunId], status: RunStatus) -> Result<Vec<RunId>> {
        let client = self.client().await?;
        let ids: Vec<Uuid> = runs.iter().map(|r| r.0).collect();
        let rows = client
            .query(
                "SELECT id FROM runs WHERE id = ANY($1) AND status = $2",
                &[&ids, &status.as_str()],
            )
            .await?;
        Ok(rows.iter().map(|r| RunId(r.get(0))).collect())
    }

    /// A run as its owner sees it, with the usage of each model call.
    pub async fn get_run(&self, run: RunId, owner: &Owner) -> Result<RunView> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT r.id, r.thread_id, r.status, r.name, r.depth, r.parent_run_id, r.parent_tool_call_id,
                        r.attempts, r.output, r.error, r.created_at, r.finished_at, r.agent_version
                 FROM runs r JOIN threads t ON t.id = r.thread_id
                 WHERE r.id = $1 AND t.owner = $2",
            )
            .await?;
        let row = client
            .query_opt(&stmt, &[&run.0, &owner.as_str()])
            .await?
            .ok_or_else(|| not_found(run))?;
        // Usage is what each journaled model answer reported.
        let stmt = client
            .prepare_cached(
                "SELECT substr(name, 7)::int,
                        coalesce((value->'usage'->>'inputTokens')::bigint, 0),
                        coalesce((value->'usage'->>'outputTokens')::bigint, 0)
                 FROM journal WHERE run_id = $1 AND name LIKE 'model:%' ORDER BY position",
            )
            .await?;
        let usage = client
            .query(&stmt, &[&run.0])
            .await?
            .into_iter()
            .map(|u| UsageView {
                model_call: u.get(0),
                input_tokens: u.get(1),
                output_tokens: u.get(2),
            })
            .collect();
        run_view(&row, usage)
    }

    /// The run's journal entries at positions above `after` (`None`: from
    /// the first), in order, as many as `bound` holds, if `owner` owns the
    /// run. Only the page is read, with the one model entry before it that
    /// a packed entry of the page may refer to.
    pub async fn get_journal(
        &self,
        run: RunId,
        owner: &Owner,
        after: Option<u32>,
        bound: ReadBound,
    ) -> Result<ReadPage<JournalEntry>> {
        let mut client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT 1 FROM runs r JOIN threads t ON t.id = r.thread_id WHERE r.id = $1 AND t.owner = $2",
            )
            .await?;
        client
            .query_opt(&stmt, &[&run.0, &owner.as_str()])
            .await?
            .ok_or_else(|| not_found(run))?;
        let after = after.map_or(-1, |p| i32::try_from(p).unwrap_or(i32::MAX));
        let stmt = client
            .prepare_cached(
                "SELECT position, name, value, packed FROM journal
                 WHERE run_id = $1 AND position <= $2 AND name LIKE 'model:%'
                 ORDER BY position DESC LIMIT 1",
            )
            .await?;
        let context = client
            .query_opt(&stmt, &[&run.0, &after])
            .await?
            .map(|r| stored_entry(&r));
        let page = read_bounded(
            &mut client,
            "SELECT position, name, value, packed FROM journal
             WHERE run_id = $1 AND position > $2 ORDER BY position LIMIT $3",
            &[
                &run.0,
                &after,
                &i64::from(i32::try_from(bound.rows).unwrap_or(i32::MAX)),
            ],
            bound,
            |r| {
                let entry = stored_entry(r);
                let size = json_len(&entry.value);
                Ok((entry, size))
            },
        )
        .await?;
        let items = stored_journal::unpack(context.into_iter().chain(page.items).collect())?
            .into_iter()
            .filter(|entry| i64::from(entry.position) > i64::from(after))
            .collect();
        Ok(ReadPage {
            items,
            more: page.more,
        })
    }
}

fn stored_entry(r: &Row) -> StoredEntry {
    StoredEntry {
        position: r.get::<_, i32>(0) as u32,
        name: r.get(1),
        value: r.get(2),
        packed: r.get(3),
    }
}

fn not_found(run: RunId) -> Error {
    Error::NotFound {
        what: "run",
        id: run.to_string(),
    }
}

fn run_view(row: &Row, usage: Vec<UsageView>) -> Result<RunView> {
    Ok(RunView {
        id: RunId(row.get(0)),
        thread_id: ThreadId(row.get(1)),
        status: row.get::<_, &str>(2).parse()?,
        name: row.get(3),
        depth: row.get(4),
        parent_run_id: row.get::<_, Option<Uuid>>(5).map(RunId),
        parent_tool_call_id: row.get(6),
        agent_version: row.get(12),
        attempts: row.get(7),
        output: row.get(8),
        error: row.get(9),
        usage,
        created_at: row.get(10),
        finished_at: row.get(11),
    })
}
