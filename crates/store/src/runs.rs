//! Runs: the lease a worker takes to advance one, and the run's reads.

use agentenkit_core::conversation::Message;
use agentenkit_core::reply::SettledReply;
use agentenkit_core::{
    JournalEntry, Owner, QueueMessage, RunId, RunStatus, ThreadId, ToolCallId, ToolCallStatus,
    ToolKind,
};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::format::journal::{self as stored_journal, StoredEntry};
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
    /// The run row's name (the agent's; a sub-agent's for a child run) and
    /// depth, which never change: an event of this run may leave them to
    /// the row (`format::event`).
    pub run_name: String,
    pub depth: i32,
    /// The root of the run's tree (its own id for a turn's run), where a
    /// child run it starts belongs too.
    pub root_run_id: RunId,
}

/// What a worker needs to advance a run it now holds.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub lease: Lease,
    /// The delegation this (child) run answers, if it is one.
    pub parent_tool_call_id: Option<String>,
    pub parent_run_id: Option<RunId>,
    /// Failed attempts so far, across workers.
    pub attempts: i32,
    /// Workers that died holding this step before this one (each taken
    /// over after its lease ran out).
    pub takeovers: i32,
    /// The whole journal, in position order.
    pub journal: Vec<JournalEntry>,
    /// The conversation before this run's own steps: earlier turns and this
    /// run's user message. The run's own steps come back from the journal.
    pub history: Vec<Message>,
    /// The run's tool-call rows as the lease found them. While a worker
    /// holds the run nobody else changes them (answers, expiries and child
    /// runs settle rows only of a waiting run), so the step reads them here
    /// instead of asking the store once per call.
    pub calls: Vec<CallRow>,
}

/// A tool-call row of a run, as its worker sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRow {
    pub id: ToolCallId,
    pub kind: ToolKind,
    pub status: ToolCallStatus,
    /// A self-parking tool's request, kept before its park committed.
    pub park_request: Option<serde_json::Value>,
    pub payload: Option<serde_json::Value>,
    pub result: Option<serde_json::Value>,
    pub defaulted: Option<Vec<String>>,
    pub answered_by: Option<String>,
    pub answered_at: Option<DateTime<Utc>>,
    /// The child run a delegation started.
    pub child: Option<RunId>,
}

impl CallRow {
    /// A call the model just proposed (not written yet, or just written).
    pub fn proposed(id: ToolCallId, kind: ToolKind) -> Self {
        Self {
            id,
            kind,
            status: ToolCallStatus::Proposed,
            park_request: None,
            payload: None,
            result: None,
            defaulted: None,
            answered_by: None,
            answered_at: None,
            child: None,
        }
    }

    /// The settled reply, or the status while the call is not settled.
    pub fn reply(&self) -> Result<std::result::Result<SettledReply, ToolCallStatus>> {
        crate::answer::settled_reply(
            self.status,
            self.kind,
            self.payload.clone(),
            self.result.as_ref(),
            self.defaulted.clone(),
            self.answered_by.clone(),
            self.answered_at,
        )
    }

    /// Where the delegation of this call stands: `None` before its child
    /// run exists.
    pub fn delegation(&self) -> Option<Delegation> {
        match (self.status, self.child) {
            (ToolCallStatus::Proposed, None) => None,
            (ToolCallStatus::Proposed, Some(child)) => Some(Delegation::Running { child }),
            (status, _) => Some(Delegation::Settled {
                status,
                result: self.result.clone().unwrap_or_default(),
            }),
        }
    }
}

/// A call row as the acquire statement renders it (JSON).
#[derive(Deserialize)]
struct CallSnapshot {
    id: String,
    kind: String,
    status: String,
    park_request: Option<serde_json::Value>,
    payload: Option<serde_json::Value>,
    result: Option<serde_json::Value>,
    defaulted: Option<Vec<String>>,
    answered_by: Option<String>,
    answered_at: Option<DateTime<Utc>>,
    child: Option<Uuid>,
}

impl CallSnapshot {
    fn into_row(self) -> Result<CallRow> {
        Ok(CallRow {
            id: ToolCallId(self.id),
            kind: self.kind.parse()?,
            status: self.status.parse()?,
            park_request: self.park_request,
            payload: self.payload,
            result: self.result,
            defaulted: self.defaulted,
            answered_by: self.answered_by,
            answered_at: self.answered_at,
            child: self.child.map(RunId),
        })
    }
}

/// Takes the lease and reads what the segment needs, in one statement.
/// The reads see the snapshot the UPDATE started from, which is all they
/// need: the lease row is the only one the statement changes.
const ACQUIRE: &str = concat!(
    "
WITH consumed AS (
    -- the segment is being handled: its outbox row has done its work
    DELETE FROM outbox WHERE key = $6
),
acquired AS (
    UPDATE runs SET status = 'running', lease_owner = $4, lease_token = lease_token + 1,
           lease_expires_at = now() + $3 * interval '1 millisecond', updated_at = now(),
           -- taking over from a worker whose lease ran out is counted (apart
           -- from failed attempts), so a segment that kills its worker every
           -- time ends instead of looping
           takeovers = takeovers + CASE WHEN status = 'running' THEN 1 ELSE 0 END
    WHERE id = $1 AND segment_seq = $2 AND status = ANY($5)
      AND (lease_expires_at IS NULL OR lease_expires_at <= now())
      -- a child created while its tree was being stopped never runs
      AND NOT EXISTS (SELECT 1 FROM runs root WHERE root.id = runs.root_run_id
                      AND root.status = 'cancelled')
    RETURNING id, thread_id, lease_token, name, depth, parent_run_id, attempts, parent_tool_call_id,
              takeovers, root_run_id
)
SELECT a.thread_id, a.lease_token, a.name, a.depth, a.parent_run_id, a.attempts, a.parent_tool_call_id,
       (SELECT coalesce(jsonb_agg(jsonb_build_array(j.position, j.name, j.value, j.packed) ORDER BY j.position), '[]')
        FROM journal j WHERE j.run_id = a.id),
       -- a root run sees the thread's earlier turns (root runs only) and its
       -- own user message; a child run sees only its task
       -- (the run of each message looked up by key: a join let the planner
       -- hash every run of the database)
       (SELECT coalesce(jsonb_agg(",
    message_body_sql!(),
    " ORDER BY m.id), '[]')
        FROM messages m
        WHERE m.thread_id = a.thread_id
          AND CASE WHEN a.parent_run_id IS NULL
                   THEN (m.run_id <> a.id OR m.body->>'role' = 'user')
                        AND (SELECT r.parent_run_id IS NULL FROM runs r WHERE r.id = m.run_id)
                   ELSE m.run_id = a.id AND m.body->>'role' = 'user' END),
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'id', tc.id, 'kind', tc.kind, 'status', tc.status,
                   'park_request', tc.park_request, 'payload', tc.payload, 'result', tc.result,
                   'defaulted', tc.defaulted, 'answered_by', tc.answered_by,
                   'answered_at', tc.answered_at, 'child', c.id)), '[]')
        FROM tool_calls tc
        LEFT JOIN runs c ON c.parent_run_id = tc.run_id AND c.parent_tool_call_id = tc.id
        WHERE tc.run_id = a.id),
       a.takeovers, a.root_run_id
FROM acquired a"
);

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
    /// Another worker holds the run until then, which is `left` from now
    /// by the database's clock (wait for `left`, not for `until` by the
    /// local clock, which may be skewed).
    Held {
        until: DateTime<Utc>,
        left: std::time::Duration,
    },
    /// The segment is not the run's current one, or the run is not
    /// runnable (waiting, finished): a duplicate or late delivery to drop.
    Stale,
}

impl Store {
    /// Takes the run's lease for `ttl_ms` if segment `seq` is current and
    /// nobody holds it, moving the run to `running`. One statement, one
    /// round trip: the lease, the journal, the conversation before the run
    /// and the run's tool-call rows come back together, and the segment's
    /// outbox row is deleted (whatever the outcome: a stale or duplicate
    /// delivery has been handled too).
    pub async fn acquire_lease(&self, run: RunId, seq: i64, ttl_ms: u64) -> Result<LeaseAttempt> {
        let client = self.client().await?;
        let sources = RunStatus::sources_of(RunStatus::Running);
        let stmt = client.prepare_cached(ACQUIRE).await?;
        let worker = Uuid::now_v7();
        let key = QueueMessage::Segment { run_id: run, seq }.outbox_key();
        let pg: &tokio_postgres::Client = &client;
        // Committed without waiting for its WAL flush, in one round trip: a
        // lease matters only to the writes fenced by it, and the first
        // durable commit of the segment (before any tool runs, at the park,
        // at the finish) flushes the WAL this commit wrote before its own.
        // If Postgres crashes first, the lease and the consumed outbox row
        // are lost together: the fence refuses the worker's next commit,
        // and the reaper re-publishes the segment.
        let ttl = ttl_ms as f64;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
            [&run.0, &seq, &ttl, &worker, &sources, &key];
        let (begun, acquired, committed) = futures::join!(
            pg.batch_execute("BEGIN; SET LOCAL synchronous_commit = off"),
            pg.query_opt(&stmt, &params),
            pg.batch_execute("COMMIT"),
        );
        begun?;
        let acquired = acquired?;
        committed?;
        let Some(row) = acquired else {
            let stmt = client
                .prepare_cached(
                    "SELECT segment_seq, status, lease_expires_at,
                            extract(epoch FROM greatest(lease_expires_at - now(), interval '0'))::float8
                     FROM runs WHERE id = $1",
                )
                .await?;
            return Ok(match client.query_opt(&stmt, &[&run.0]).await? {
                Some(row) => {
                    let current: i64 = row.get(0);
                    let status: RunStatus = row.get::<_, &str>(1).parse()?;
                    let until: Option<DateTime<Utc>> = row.get(2);
                    let left: Option<f64> = row.get(3);
                    match until {
                        Some(until) if current == seq && status == RunStatus::Running => {
                            LeaseAttempt::Held {
                                until,
                                left: std::time::Duration::from_secs_f64(
                                    left.unwrap_or(0.0).max(0.0),
                                ),
                            }
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
            run_name: row.get(2),
            depth: row.get(3),
            root_run_id: RunId(row.get(11)),
        };
        let journal: Vec<(i32, String, serde_json::Value, i16)> =
            serde_json::from_value(row.get(7))?;
        let journal = unpack_journal(
            journal
                .into_iter()
                .map(|(position, name, value, packed)| StoredEntry {
                    position: position as u32,
                    name,
                    value,
                    packed,
                })
                .collect(),
        )?;
        let history: Vec<Message> = serde_json::from_value(row.get(8))?;
        let calls: Vec<CallSnapshot> = serde_json::from_value(row.get(9))?;
        Ok(LeaseAttempt::Acquired(Box::new(RunContext {
            lease,
            parent_tool_call_id: row.get(6),
            parent_run_id: row.get::<_, Option<Uuid>>(4).map(RunId),
            attempts: row.get(5),
            takeovers: row.get(10),
            journal,
            history,
            calls: calls
                .into_iter()
                .map(CallSnapshot::into_row)
                .collect::<Result<_>>()?,
        })))
    }

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

    /// How many runs have the status, across owners (operators and the
    /// bench; the reaper's statuses are indexed, the others are a scan).
    pub async fn count_runs(&self, status: RunStatus) -> Result<i64> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT count(*) FROM runs WHERE status = $1",
                &[&status.as_str()],
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
                        r.attempts, r.output, r.error, r.created_at, r.finished_at
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
            "SELECT position, name, value, packed FROM journal WHERE run_id = $1 ORDER BY position",
        )
        .await?;
    unpack_journal(
        client
            .query(&stmt, &[&run.0])
            .await?
            .into_iter()
            .map(|r| StoredEntry {
                position: r.get::<_, i32>(0) as u32,
                name: r.get(1),
                value: r.get(2),
                packed: r.get(3),
            })
            .collect(),
    )
}

/// The journal as written, from its stored rows: an entry that cannot be
/// read back is a corrupt run (replay must not guess).
fn unpack_journal(stored: Vec<StoredEntry>) -> Result<Vec<JournalEntry>> {
    stored_journal::unpack(stored).map_err(|e| Error::Corrupt(e.to_string()))
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
