//! Moving a run to another version of its agent, on purpose (docs/deployment.md,
//! "Deploying changes"): `agentenkit runs upgrade`.
//!
//! The move is one transaction under the run's lock: the run must still be
//! queued or waiting on the version it was read on; its open calls are
//! read under the lock and handed back to the caller, which judges them
//! (does each call's tool exist in the new version, do its arguments fit);
//! then the run row names the new version and a `version:<hash>` entry is
//! appended to its journal, which a replay steps over. `RUN_STARTED` keeps
//! saying the version the run started on.

use agentenkit_core::journal::names;
use agentenkit_core::{JournalEntry, RunId, ThreadId, ToolKind};
use serde_json::{json, Value};

use crate::pipeline::{Answer, Expect, Op, OpenTx};
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
    /// The arguments an approver edited the call to, when one did: what
    /// the tool will run with.
    pub edited: Option<Value>,
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

    /// Locks `run` for an upgrade if it is still queued or waiting on the
    /// version it was read on, and reads its open calls under the lock:
    /// `None` when it changed meanwhile (it ran, finished, or was moved).
    /// The caller judges the calls and moves the run ([`LockedRun::move_to`]),
    /// or drops the lock, which rolls back.
    pub async fn lock_for_upgrade(&self, run: &OpenRun) -> Result<Option<LockedRun>> {
        let lock = Op::new(
            "SELECT 1 FROM runs WHERE id = $1 AND status IN ('queued', 'waiting')
               AND agent_version IS NOT DISTINCT FROM $2
             FOR NO KEY UPDATE",
            vec![Box::new(run.id.0), Box::new(run.agent_version.clone())],
        );
        self.lock_run(run.clone(), lock).await
    }

    /// The switch of `on_deploy = "upgrade"`: locks the run `lease` holds,
    /// on version `from`, fenced by the lease, at the start of a segment;
    /// `None` when the lease was lost. As [`Store::lock_for_upgrade`].
    pub async fn lock_for_switch(&self, lease: &Lease, from: &str) -> Result<Option<LockedRun>> {
        let lock = Op::new(
            "SELECT 1 FROM runs WHERE id = $1 AND lease_token = $2 AND status = 'running'
               AND lease_expires_at > now() AND agent_version = $3
             FOR NO KEY UPDATE",
            vec![
                Box::new(lease.run_id.0),
                Box::new(lease.token),
                Box::new(from.to_owned()),
            ],
        );
        let run = OpenRun {
            id: lease.run_id,
            thread_id: lease.thread_id,
            status: "running".into(),
            agent_version: Some(from.to_owned()),
        };
        self.lock_run(run, lock).await
    }

    /// `lock`, then the run's open calls read after it, in one round trip.
    async fn lock_run(&self, run: OpenRun, lock: Op) -> Result<Option<LockedRun>> {
        let tx = OpenTx::new(self.client().await?);
        // Calls whose tool has not run: parked, or answered and not run yet
        // (an approval's tool runs when the run resumes).
        let open_calls = Op::new(
            "SELECT id, name, kind, arguments_whole, decision -> 'arguments' FROM tool_calls_whole
             WHERE run_id = $1 AND result IS NULL
               AND status IN ('proposed', 'pending_approval', 'executed')
             ORDER BY created_at, id",
            vec![Box::new(run.id.0)],
        );
        let mut answers = tx
            .begin_with(vec![
                lock.expect(Expect::Rows),
                open_calls.expect(Expect::Rows),
            ])
            .await?
            .into_iter()
            .map(Answer::rows);
        let (locked, calls) = (answers.next().unwrap_or_default(), answers.next());
        if locked.is_empty() {
            tx.rollback().await?;
            return Ok(None);
        }
        let calls = calls
            .unwrap_or_default()
            .iter()
            .map(|row| {
                Ok(OpenCall {
                    id: row.get(0),
                    name: row.get(1),
                    kind: row.get::<_, &str>(2).parse()?,
                    arguments: row.get(3),
                    edited: row.get(4),
                })
            })
            .collect::<Result<_>>()?;
        Ok(Some(LockedRun { tx, run, calls }))
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

/// A run locked for a move to another version of its agent, with its open
/// calls as read under the lock: the caller judges them (does each call's
/// tool exist in the new version, do its arguments fit) and moves the run,
/// or drops this, which rolls back.
pub struct LockedRun {
    tx: OpenTx,
    run: OpenRun,
    calls: Vec<OpenCall>,
}

impl LockedRun {
    /// Calls whose tool has not run yet: what the new version must still
    /// be able to do.
    pub fn open_calls(&self) -> &[OpenCall] {
        &self.calls
    }

    /// Leaves the run as it was and lets go of its lock at once.
    pub async fn release(self) -> Result<()> {
        self.tx.rollback().await
    }

    /// Moves the run to version `to` (`by` says who moved it, in the
    /// journal entry) and commits: the `version:<hash>` entry a replay
    /// steps over, the run row, and `RUN_STARTED`, which keeps saying the
    /// version the run started on. Returns the entry, for a segment that
    /// replays on.
    pub async fn move_to(self, to: &str, by: &str) -> Result<JournalEntry> {
        let run = &self.run;
        let name = names::version(to);
        let value = json!({ "from": run.agent_version, "to": to, "by": by });
        let ops = vec![
            Op::new(
                "INSERT INTO journal (run_id, position, name, value)
                 SELECT $1, coalesce(max(position) + 1, 0), $2, $3 FROM journal WHERE run_id = $1
                 RETURNING position",
                vec![Box::new(run.id.0), Box::new(name.clone()), Box::new(value.clone())],
            )
            .expect(Expect::Rows),
            Op::new(
                "UPDATE runs SET agent_version = $2, updated_at = now() WHERE id = $1",
                vec![Box::new(run.id.0), Box::new(to.to_owned())],
            ),
            // RUN_STARTED left its version to the run row (packed bit 64):
            // it keeps the one the run started on.
            Op::new(
                "UPDATE events SET data = data || jsonb_build_object('agentVersion', $3::text),
                        packed = packed & ~64::smallint
                 WHERE thread_id = $1 AND run_id = $2 AND type = 'RUN_STARTED' AND packed & 64 <> 0",
                vec![
                    Box::new(run.thread_id.0),
                    Box::new(run.id.0),
                    Box::new(run.agent_version.clone()),
                ],
            ),
        ];
        let answers = self.tx.commit_with(ops).await?;
        let position: i32 = answers
            .into_iter()
            .next()
            .and_then(|answer| answer.rows().first().map(|row| row.get(0)))
            .ok_or_else(|| crate::Error::Corrupt(format!("run {}: no journal position", run.id)))?;
        Ok(JournalEntry {
            position: position.max(0) as u32,
            name,
            value,
        })
    }
}
