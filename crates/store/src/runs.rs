//! Runs: the lease a worker takes to advance one, and the run's reads.

use agentenkit_core::conversation::Message;
use agentenkit_core::{JournalEntry, Owner, RunId, RunStatus, ThreadId};
use chrono::{DateTime, Utc};
use tokio_postgres::Row;
use uuid::Uuid;

use crate::views::{RunView, UsageView};
use crate::{Error, Result, Store};

/// A worker's hold on a run. Every write it makes carries `token`; once
/// another worker takes the run (after this lease ran out) the token no
/// longer matches and the write changes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub run_id: RunId,
    pub thread_id: ThreadId,
    pub token: i64,
    pub ttl_ms: u64,
}

/// What a worker needs to advance a run it now holds.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub lease: Lease,
    /// The delegation this (child) run answers, if it is one.
    pub parent_tool_call_id: Option<String>,
    /// The agent's name (a sub-agent's name for a child run).
    pub name: String,
    pub depth: i32,
    pub parent_run_id: Option<RunId>,
    /// Failed attempts so far, across workers.
    pub attempts: i32,
    /// The whole journal, in position order.
    pub journal: Vec<JournalEntry>,
    /// The conversation before this run's own steps: earlier turns and this
    /// run's user message. The run's own steps come back from the journal.
    pub history: Vec<Message>,
}

/// A delegation whose child run exists.
#[derive(Debug, Clone, PartialEq)]
pub enum Delegation {
    Running {
        child: RunId,
    },
    /// The child ended: `executed` with its output, or `failed`.
    Settled {
        status: agentenkit_core::ToolCallStatus,
        result: serde_json::Value,
    },
}

/// The outcome of trying to take a run's lease for segment `seq`.
#[derive(Debug)]
pub enum LeaseAttempt {
    Acquired(Box<RunContext>),
    /// Another worker holds the run until then.
    Held {
        until: DateTime<Utc>,
    },
    /// The segment is not the run's current one, or the run is not
    /// runnable (waiting, finished): a duplicate or late delivery to drop.
    Stale,
}

impl Store {
    /// Takes the run's lease for `ttl_ms` if segment `seq` is current and
    /// nobody holds it, moving the run to `running`.
    pub async fn acquire_lease(&self, run: RunId, seq: i64, ttl_ms: u64) -> Result<LeaseAttempt> {
        let client = self.client().await?;
        let sources = RunStatus::sources_of(RunStatus::Running);
        let stmt = client
            .prepare_cached(
                "UPDATE runs SET status = 'running', lease_owner = $4, lease_token = lease_token + 1,
                        lease_expires_at = now() + $3 * interval '1 millisecond', updated_at = now(),
                        -- taking over from a worker whose lease ran out counts
                        -- as an attempt, so a segment that kills its worker
                        -- every time ends instead of looping
                        attempts = attempts + CASE WHEN status = 'running' THEN 1 ELSE 0 END
                 WHERE id = $1 AND segment_seq = $2 AND status = ANY($5)
                   AND (lease_expires_at IS NULL OR lease_expires_at <= now())
                   -- a child created while its tree was being stopped never runs
                   AND NOT EXISTS (SELECT 1 FROM runs root WHERE root.id = runs.root_run_id
                                   AND root.status = 'cancelled')
                 RETURNING thread_id, lease_token, name, depth, parent_run_id, attempts, parent_tool_call_id",
            )
            .await?;
        let worker = Uuid::now_v7();
        let acquired = client
            .query_opt(&stmt, &[&run.0, &seq, &(ttl_ms as f64), &worker, &sources])
            .await?;
        let Some(row) = acquired else {
            let stmt = client
                .prepare_cached(
                    "SELECT segment_seq, status, lease_expires_at FROM runs WHERE id = $1",
                )
                .await?;
            return Ok(match client.query_opt(&stmt, &[&run.0]).await? {
                Some(row) => {
                    let current: i64 = row.get(0);
                    let status: RunStatus = row.get::<_, &str>(1).parse()?;
                    let until: Option<DateTime<Utc>> = row.get(2);
                    match until {
                        Some(until) if current == seq && status == RunStatus::Running => {
                            LeaseAttempt::Held { until }
                        }
                        _ => LeaseAttempt::Stale,
                    }
                }
                None => LeaseAttempt::Stale,
            });
        };
        let thread_id = ThreadId(row.get(0));
        let lease = Lease {
            run_id: run,
            thread_id,
            token: row.get(1),
            ttl_ms,
        };
        let journal = load_journal(&client, run).await?;
        // A root run sees the thread's earlier turns (root runs only) and
        // its own user message; a child run sees only its task.
        let stmt = client
            .prepare_cached(
                "SELECT m.body FROM messages m JOIN runs r ON r.id = m.run_id
                 WHERE m.thread_id = $1
                   AND CASE WHEN $3::uuid IS NULL
                            THEN r.parent_run_id IS NULL AND (m.run_id <> $2 OR m.body->>'role' = 'user')
                            ELSE m.run_id = $2 AND m.body->>'role' = 'user' END
                 ORDER BY m.id",
            )
            .await?;
        let parent: Option<Uuid> = row.get(4);
        let history = client
            .query(&stmt, &[&thread_id.0, &run.0, &parent])
            .await?
            .into_iter()
            .map(|r| serde_json::from_value::<Message>(r.get(0)))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(LeaseAttempt::Acquired(Box::new(RunContext {
            lease,
            parent_tool_call_id: row.get(6),
            name: row.get(2),
            depth: row.get(3),
            parent_run_id: row.get::<_, Option<Uuid>>(4).map(RunId),
            attempts: row.get(5),
            journal,
            history,
        })))
    }

    /// Where a delegation stands: `None` before its child run exists.
    pub async fn delegation(
        &self,
        run: RunId,
        call: &agentenkit_core::ToolCallId,
    ) -> Result<Option<Delegation>> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT tc.status, tc.result, c.id, c.status
                 FROM tool_calls tc
                 LEFT JOIN runs c ON c.parent_run_id = tc.run_id AND c.parent_tool_call_id = tc.id
                 WHERE tc.run_id = $1 AND tc.id = $2",
            )
            .await?;
        let Some(row) = client.query_opt(&stmt, &[&run.0, &call.as_str()]).await? else {
            return Ok(None);
        };
        let status: agentenkit_core::ToolCallStatus = row.get::<_, &str>(0).parse()?;
        let child: Option<Uuid> = row.get(2);
        Ok(match (status, child) {
            (agentenkit_core::ToolCallStatus::Proposed, None) => None,
            (agentenkit_core::ToolCallStatus::Proposed, Some(child)) => Some(Delegation::Running {
                child: RunId(child),
            }),
            (status, _) => Some(Delegation::Settled {
                status,
                result: row
                    .get::<_, Option<serde_json::Value>>(1)
                    .unwrap_or_default(),
            }),
        })
    }

    /// Whether an earlier run of `agent` on this thread already asked its
    /// intake (for `when = "thread-start"`).
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
                                  AND tc.kind = 'ask' AND r.name = $3)",
            )
            .await?;
        Ok(client
            .query_one(&stmt, &[&thread.0, &run.0, &agent])
            .await?
            .get(0))
    }

    /// How many runs a worker holds a live lease on right now.
    pub async fn leases_held(&self) -> Result<i64> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT count(*) FROM runs WHERE lease_expires_at > now() AND status = 'running'",
                &[],
            )
            .await?;
        Ok(row.get(0))
    }

    /// A run as its owner sees it, with its usage rows.
    pub async fn get_run(&self, run: RunId, owner: &Owner) -> Result<RunView> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT r.id, r.thread_id, r.status, r.name, r.depth, r.parent_run_id, r.parent_tool_call_id,
                        r.attempts, r.output, r.error, r.created_at, r.finished_at
                 FROM runs r JOIN threads t ON t.id = r.thread_id
                 WHERE r.id = $1 AND t.owner = $2",
            )
            .await?;
        let row = client
            .query_opt(&stmt, &[&run.0, &owner.as_str()])
            .await?
            .ok_or_else(|| not_found(run))?;
        let stmt = client
            .prepare_cached(
                "SELECT model_call, input_tokens, output_tokens FROM usage WHERE run_id = $1 ORDER BY model_call",
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

    /// The run's journal, in order, if `owner` owns the run.
    pub async fn get_journal(&self, run: RunId, owner: &Owner) -> Result<Vec<JournalEntry>> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT 1 FROM runs r JOIN threads t ON t.id = r.thread_id WHERE r.id = $1 AND t.owner = $2",
            )
            .await?;
        client
            .query_opt(&stmt, &[&run.0, &owner.as_str()])
            .await?
            .ok_or_else(|| not_found(run))?;
        load_journal(&client, run).await
    }
}

fn not_found(run: RunId) -> Error {
    Error::NotFound {
        what: "run",
        id: run.to_string(),
    }
}

async fn load_journal(client: &deadpool_postgres::Object, run: RunId) -> Result<Vec<JournalEntry>> {
    let stmt = client
        .prepare_cached(
            "SELECT position, name, value FROM journal WHERE run_id = $1 ORDER BY position",
        )
        .await?;
    Ok(client
        .query(&stmt, &[&run.0])
        .await?
        .into_iter()
        .map(|r| JournalEntry {
            position: r.get::<_, i32>(0) as u32,
            name: r.get(1),
            value: r.get(2),
        })
        .collect())
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
        attempts: row.get(7),
        output: row.get(8),
        error: row.get(9),
        usage,
        created_at: row.get(10),
        finished_at: row.get(11),
    })
}
