//! Moving a run to another version of its agent, on purpose (README,
//! "Deploying changes"): `agentenkit runs upgrade`.
//!
//! The move is one transaction under the run's lock: the run must still be
//! queued or waiting on the version it was read on; its open calls are
//! read under the lock and judged by the caller (does each call's tool
//! exist in the new version, do its arguments fit); then the run row names
//! the new version and a `version:<hash>` entry is appended to its journal,
//! which a replay steps over. `RUN_STARTED` keeps saying the version the
//! run started on.

use agentenkit_core::journal::names;
use agentenkit_core::{JournalEntry, RunId, ThreadId, ToolKind};
use serde_json::{json, Value};

use crate::{Lease, Result, Store};

/// An open run of an agent, as an upgrade lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRun {
    pub id: RunId,
    pub thread_id: ThreadId,
    pub status: String,
    pub agent_version: Option<String>,
}

/// A call of a run that has not run yet: what the new version must still
/// be able to do.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenCall {
    pub id: String,
    pub name: String,
    pub kind: ToolKind,
    pub arguments: Value,
}

/// What became of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeOutcome {
    /// Moved (or, in a dry run, would be).
    Moved,
    /// Left as it was: the check's reason.
    Incompatible(String),
    /// No longer queued or waiting on the version it was read on (it ran,
    /// finished, or was moved meanwhile).
    Changed,
}

impl Store {
    /// The queued and waiting runs of `agent` not on version `to`, oldest
    /// first, at most `limit`. An operator's read: it scans the runs.
    pub async fn open_runs_of_agent(
        &self,
        agent: &str,
        to: &str,
        limit: i64,
    ) -> Result<Vec<OpenRun>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT id, thread_id, status, agent_version FROM runs
                 WHERE name = $1 AND status IN ('queued', 'waiting')
                   AND agent_version IS DISTINCT FROM $2
                 ORDER BY created_at, id LIMIT $3",
                &[&agent, &to, &limit],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|row| OpenRun {
                id: RunId(row.get(0)),
                thread_id: ThreadId(row.get(1)),
                status: row.get(2),
                agent_version: row.get(3),
            })
            .collect())
    }

    /// Moves `run` from version `from` to `to` if it is still queued or
    /// waiting on `from` and `check` passes its open calls (read under
    /// the run's lock). `dry_run` checks and changes nothing.
    pub async fn upgrade_run(
        &self,
        run: &OpenRun,
        to: &str,
        check: &Check<'_>,
        dry_run: bool,
    ) -> Result<UpgradeOutcome> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let locked = tx
            .query_opt(
                "SELECT 1 FROM runs WHERE id = $1 AND status IN ('queued', 'waiting')
                   AND agent_version IS NOT DISTINCT FROM $2
                 FOR NO KEY UPDATE",
                &[&run.id.0, &run.agent_version],
            )
            .await?;
        if locked.is_none() {
            return Ok(UpgradeOutcome::Changed);
        }
        let outcome = move_run(&tx, run, to, check, dry_run, "upgrade").await?;
        if outcome.0 == UpgradeOutcome::Moved && !dry_run {
            tx.commit().await?;
        }
        Ok(outcome.0)
    }

    /// The switch of `on_deploy = "upgrade"`: the run `lease` holds moves
    /// from `from` to `to` at the start of a segment if `check` passes its
    /// open calls, in one transaction fenced by the lease. Returns the
    /// journal entry it appended (for the segment's replay), or `None`
    /// when the run stays (the check's reason) or the lease was lost.
    pub async fn switch_version(
        &self,
        lease: &Lease,
        from: &str,
        to: &str,
        check: &Check<'_>,
    ) -> Result<std::result::Result<JournalEntry, String>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let locked = tx
            .query_opt(
                "SELECT 1 FROM runs WHERE id = $1 AND lease_token = $2 AND status = 'running'
                   AND lease_expires_at > now() AND agent_version = $3
                 FOR NO KEY UPDATE",
                &[&lease.run_id.0, &lease.token, &from],
            )
            .await?;
        if locked.is_none() {
            return Ok(Err("the lease was lost".into()));
        }
        let run = OpenRun {
            id: lease.run_id,
            thread_id: lease.thread_id,
            status: "running".into(),
            agent_version: Some(from.to_owned()),
        };
        match move_run(&tx, &run, to, check, false, "on_deploy").await? {
            (UpgradeOutcome::Moved, Some(entry)) => {
                tx.commit().await?;
                Ok(Ok(entry))
            }
            (UpgradeOutcome::Incompatible(reason), _) => Ok(Err(reason)),
            _ => Ok(Err("the run changed".into())),
        }
    }

    /// Whether version `candidate` was first seen after version `than`
    /// (a worker's own version is taken only when it is the newer one).
    pub async fn is_newer_version(&self, candidate: &str, than: &str) -> Result<bool> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT coalesce((SELECT first_seen FROM agent_versions WHERE hash = $1)
                               > (SELECT first_seen FROM agent_versions WHERE hash = $2), false)",
            )
            .await?;
        Ok(client.query_one(&stmt, &[&candidate, &than]).await?.get(0))
    }
}

/// Judges a run's open calls: `Err` says why it cannot move.
pub type Check<'a> = dyn Fn(&[OpenCall]) -> std::result::Result<(), String> + Send + Sync + 'a;

/// Moves `run`, locked by the caller's transaction `tx`, to `to` if `check`
/// passes its open calls: the journal entry, the run row, `RUN_STARTED`.
/// Commits nothing.
async fn move_run(
    tx: &deadpool_postgres::Transaction<'_>,
    run: &OpenRun,
    to: &str,
    check: &Check<'_>,
    dry_run: bool,
    by: &str,
) -> Result<(UpgradeOutcome, Option<JournalEntry>)> {
    // Calls whose tool has not run: parked, or answered and not run yet
    // (an approval's tool runs when the run resumes).
    let calls: Vec<OpenCall> = tx
        .query(
            "SELECT id, name, kind, arguments_whole FROM tool_calls_whole
                 WHERE run_id = $1 AND result IS NULL
                   AND status IN ('proposed', 'pending_approval', 'executed')
                 ORDER BY created_at, id",
            &[&run.id.0],
        )
        .await?
        .iter()
        .map(|row| {
            Ok(OpenCall {
                id: row.get(0),
                name: row.get(1),
                kind: row.get::<_, &str>(2).parse()?,
                arguments: row.get(3),
            })
        })
        .collect::<Result<_>>()?;
    if let Err(reason) = check(&calls) {
        return Ok((UpgradeOutcome::Incompatible(reason), None));
    }
    if dry_run {
        return Ok((UpgradeOutcome::Moved, None));
    }
    let name = names::version(to);
    let value = json!({ "from": run.agent_version, "to": to, "by": by });
    let position: i32 = tx
        .query_one(
            "INSERT INTO journal (run_id, position, name, value)
                 SELECT $1, coalesce(max(position) + 1, 0), $2, $3 FROM journal WHERE run_id = $1
                 RETURNING position",
            &[&run.id.0, &name, &value],
        )
        .await?
        .get(0);
    tx.execute(
        "UPDATE runs SET agent_version = $2, updated_at = now() WHERE id = $1",
        &[&run.id.0, &to],
    )
    .await?;
    // RUN_STARTED left its version to the run row (packed bit 64): it
    // keeps the one the run started on.
    tx.execute(
        "UPDATE events SET data = data || jsonb_build_object('agentVersion', $3::text),
                    packed = packed & ~64::smallint
             WHERE thread_id = $1 AND run_id = $2 AND type = 'RUN_STARTED' AND packed & 64 <> 0",
        &[&run.thread_id.0, &run.id.0, &run.agent_version],
    )
    .await?;
    Ok((
        UpgradeOutcome::Moved,
        Some(JournalEntry {
            position: position.max(0) as u32,
            name,
            value,
        }),
    ))
}
