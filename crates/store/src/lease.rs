//! The lease: a worker takes a run's lease to advance one segment of it,
//! and every write it makes is fenced by it (a worker whose lease ran out
//! changes nothing).

use agentenkit_core::conversation::Message;
use agentenkit_core::{JournalEntry, QueueMessage, RunCall, RunId, RunStatus, ThreadId};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::calls::CallColumns;
use crate::change::Change;
use crate::format::journal::{self as stored_journal, StoredEntry};
use crate::pipeline::{self, Expect, Op, Param};
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
    /// The owner whose cap the run counts toward, when it started under
    /// one: its commit that stops it running admits that owner's held runs
    /// (`shares`).
    pub slot_owner: Option<String>,
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
    /// Segments of this step deferred in a row (a provider asked to wait).
    pub deferrals: i32,
    /// The version of its agent the run started on (`None`: from before
    /// versions, or an agent built in code).
    pub agent_version: Option<String>,
    /// Messages wait to join the run at its next model call
    /// (`onActive: "steer"`).
    pub steered: bool,
    /// The whole journal, in position order.
    pub journal: Vec<JournalEntry>,
    /// The conversation before this run's own steps: earlier turns and this
    /// run's user message. The run's own steps come back from the journal.
    pub history: Vec<Message>,
    /// The run's tool-call rows as the lease found them. While a worker
    /// holds the run nobody else changes them (answers, expiries and child
    /// runs settle rows only of a waiting run), so the step reads them here
    /// instead of asking the store once per call.
    pub calls: Vec<RunCall>,
}

/// Takes the lease and reads what the segment needs, in one statement.
/// The reads see the snapshot the UPDATE started from, which is all they
/// need: the lease row is the only one the statement changes.
const ACQUIRE: &str = "
WITH unflushed AS (
    -- this transaction commits without waiting for its WAL flush (see
    -- `acquire_lease`); set here, not by a statement of its own. Read only
    -- with an acquired row: a stale delivery's transaction (the outbox
    -- delete alone) waits for its flush, a rare path where that is harmless
    SELECT set_config('synchronous_commit', 'off', true)
),
consumed AS (
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
      -- a child created while its tree was being stopped never runs (the
      -- root read by its key: as an anti join planned on empty tables it
      -- could check every run)
      AND (SELECT root.status FROM runs root WHERE root.id = runs.root_run_id)
          IS DISTINCT FROM 'cancelled'
      -- a run held for a slot runs only once admitted (`shares`)
      AND held_since IS NULL
    RETURNING id, thread_id, lease_token, name, depth, parent_run_id, attempts, parent_tool_call_id,
              takeovers, root_run_id, agent_version, steered, slot_owner, deferrals
)
SELECT a.thread_id, a.lease_token, a.name, a.depth, a.parent_run_id, a.attempts, a.parent_tool_call_id,
       (SELECT coalesce(jsonb_agg(jsonb_build_array(j.position, j.name, j.value, j.packed) ORDER BY j.position), '[]')
        FROM journal j WHERE j.run_id = a.id),
       -- a root run sees the thread's earlier turns (root runs only, none
       -- cut away by an edit or a rollback) and its own user message; a
       -- child run sees only its task
       -- (the run of each message looked up by key: a join let the planner
       -- hash every run of the database)
       (SELECT coalesce(jsonb_agg(m.body_whole ORDER BY m.id), '[]')
        FROM messages_whole m
        WHERE m.thread_id = a.thread_id
          AND CASE WHEN a.parent_run_id IS NULL
                   THEN (m.run_id <> a.id
                         OR (m.body->>'role' = 'user' AND NOT m.body ? 'steered'))
                        AND (SELECT r.parent_run_id IS NULL AND NOT r.cut FROM runs r WHERE r.id = m.run_id)
                   ELSE m.run_id = a.id AND m.body->>'role' = 'user' END),
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'id', tc.id, 'kind', tc.kind, 'status', tc.status, 'reason', tc.reason,
                   'expires_at', tc.expires_at, 'approvals', tc.approvals,
                   'park_request', tc.park_request, 'payload', tc.payload, 'result', tc.result,
                   'defaulted', tc.defaulted, 'answered_by', tc.answered_by,
                   'answered_at', tc.answered_at, 'decision', tc.decision, 'child', c.id)), '[]')
        FROM tool_calls tc
        LEFT JOIN runs c ON c.parent_run_id = tc.run_id AND c.parent_tool_call_id = tc.id
        WHERE tc.run_id = a.id),
       a.takeovers, a.root_run_id, a.agent_version, a.steered, a.slot_owner, a.deferrals
FROM acquired a, unflushed";

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
        let worker = Uuid::now_v7();
        let key = QueueMessage::Segment { run_id: run, seq }.outbox_key();
        // Committed without waiting for its WAL flush, in one round trip: a
        // lease matters only to the writes fenced by it, and the first
        // durable commit of the segment (before any tool runs, at the park,
        // at the finish) flushes the WAL this commit wrote before its own.
        // If Postgres crashes first, the lease and the consumed outbox row
        // are lost together: the fence refuses the worker's next commit,
        // and the reaper re-publishes the segment. (ACQUIRE's
        // `set_config(.., true)` holds to the end of the pipeline's
        // implicit transaction.)
        let ops = vec![Op::new(
            ACQUIRE,
            vec![
                Box::new(run.0),
                Box::new(seq),
                Box::new(ttl_ms as f64),
                Box::new(worker),
                Box::new(sources),
                Box::new(key),
            ],
        )
        .expect(Expect::Rows)];
        let acquired = pipeline::transact(&client, ops)
            .await?
            .pop()
            .and_then(|answer| answer.rows().into_iter().next());
        let Some(row) = acquired else {
            return not_acquired(&client, run, seq).await;
        };
        Ok(LeaseAttempt::Acquired(Box::new(context_of(
            run, ttl_ms, &row,
        )?)))
    }
    /// Gives `lease` back without a step: the run is queued again, its
    /// lease free at once, and no takeover is counted against it (this
    /// worker cannot serve it; another may). Returns how long workers have
    /// been handing the run back (since the first time after its last
    /// committed step); `None` when the lease was lost already.
    pub async fn let_go(&self, lease: &Lease) -> Result<Option<std::time::Duration>> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "UPDATE runs SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL,
                        updated_at = now(), unserved_since = coalesce(unserved_since, now())
                 WHERE id = $1 AND lease_token = $2 AND status = 'running'
                 RETURNING extract(epoch FROM now() - unserved_since)::float8",
            )
            .await?;
        Ok(client
            .query_opt(&stmt, &[&lease.run_id.0, &lease.token])
            .await?
            .map(|row| std::time::Duration::from_secs_f64(row.get::<_, f64>(0).max(0.0))))
    }

    /// Extends `lease` (a heartbeat), in one round trip. The statement may
    /// run `within` at most on the server too: a renewal that waited on a
    /// stalled database must not land later, after its worker gave the run
    /// up, and extend a lease nobody acts on.
    pub async fn renew_lease(&self, lease: &Lease, within: std::time::Duration) -> Result<()> {
        let ops = vec![
            Op::new(
                "SELECT set_config('statement_timeout', $1, true)",
                vec![Box::new(format!("{}ms", within.as_millis().max(1)))],
            ),
            fence(lease, false, None),
        ];
        pipeline::transact(&self.client().await?, ops).await?;
        Ok(())
    }
}

/// Extends the lease if it is still this worker's, or ends it with the
/// segment (`end`: the run waits, or finishes); the row lock taken here
/// also orders concurrent writers of the same run.
pub(crate) fn fence(lease: &Lease, progress: bool, end: Option<&Change>) -> Op {
    let mut params: Vec<Param> = vec![
        Box::new(lease.run_id.0),
        Box::new(lease.token),
        Box::new(progress),
    ];
    let sql = match end {
        Some(Change::WaitRun) => {
            "UPDATE runs SET status = 'waiting', updated_at = now(), lease_owner = NULL,
                    lease_expires_at = NULL, unserved_since = NULL, attempts = CASE WHEN $3 THEN 0 ELSE attempts END,
                    takeovers = CASE WHEN $3 THEN 0 ELSE takeovers END,
                    deferrals = CASE WHEN $3 THEN 0 ELSE deferrals END
             WHERE id = $1 AND lease_token = $2 AND lease_expires_at > now() AND status = 'running'"
        }
        Some(Change::Defer { .. }) => {
            "UPDATE runs SET status = 'queued', segment_seq = segment_seq + 1, updated_at = now(),
                    lease_owner = NULL, lease_expires_at = NULL, unserved_since = NULL,
                    attempts = CASE WHEN $3 THEN 0 ELSE attempts END,
                    takeovers = CASE WHEN $3 THEN 0 ELSE takeovers END,
                    deferrals = CASE WHEN $3 THEN 1 ELSE deferrals + 1 END
             WHERE id = $1 AND lease_token = $2 AND lease_expires_at > now() AND status = 'running'"
        }
        Some(Change::FinishRun {
            status,
            output,
            error,
        }) => {
            params.push(Box::new(status.as_str()));
            params.push(Box::new(output.clone()));
            params.push(Box::new(error.clone()));
            params.push(Box::new(RunStatus::sources_of(*status)));
            "UPDATE runs SET status = $4, output = $5, error = $6, finished_at = now(),
                    updated_at = now(), lease_owner = NULL, lease_expires_at = NULL, unserved_since = NULL,
                    attempts = CASE WHEN $3 THEN 0 ELSE attempts END,
                    takeovers = CASE WHEN $3 THEN 0 ELSE takeovers END
             WHERE id = $1 AND lease_token = $2 AND lease_expires_at > now() AND status = 'running'
               AND status = ANY($7)"
        }
        _ => {
            params.push(Box::new(lease.ttl_ms as f64));
            "UPDATE runs SET lease_expires_at = now() + $4 * interval '1 millisecond', updated_at = now(),
                    unserved_since = NULL,
                    attempts = CASE WHEN $3 THEN 0 ELSE attempts END,
                    takeovers = CASE WHEN $3 THEN 0 ELSE takeovers END,
                    deferrals = CASE WHEN $3 THEN 0 ELSE deferrals END
             WHERE id = $1 AND lease_token = $2 AND lease_expires_at > now() AND status = 'running'"
        }
    };
    let lost = Error::LeaseLost {
        run_id: lease.run_id.to_string(),
    };
    // A finished run says whether a queued turn waits for it to end; a
    // run going on, whether messages wait to join it.
    Op::new(sql, params).expect(match end {
        Some(Change::FinishRun { .. }) => Expect::OneFlag(lost, "followed"),
        Some(_) => Expect::One(lost),
        None => Expect::OneFlag(lost, "steered"),
    })
}

/// The outbox row of a deferred run's next segment, due in `delay_ms`:
/// after the fence that gave the run its new seq ([`Change::Defer`]). Its
/// rows are outbox rows (`id, key, delay_ms`).
pub(crate) fn deferred_segment_op(run: RunId, delay_ms: u64) -> Op {
    Op::new(
        "INSERT INTO outbox (delay_ms, key, due_at)
         SELECT $2::bigint, 'segment:' || $1::uuid::text || ':' || segment_seq,
                now() + $2::bigint * interval '1 millisecond'
         FROM runs WHERE id = $1::uuid
         RETURNING id, key, delay_ms",
        vec![Box::new(run.0), Box::new(delay_ms as i64)],
    )
    .expect(Expect::Rows)
}

/// Why the lease was not taken: another worker holds the run (for how
/// long), or the segment is stale.
async fn not_acquired(
    client: &deadpool_postgres::Object,
    run: RunId,
    seq: i64,
) -> Result<LeaseAttempt> {
    let stmt = client
        .prepare_cached(
            "SELECT segment_seq, status, lease_expires_at,
                    extract(epoch FROM greatest(lease_expires_at - now(), interval '0'))::float8
             FROM runs WHERE id = $1",
        )
        .await?;
    let Some(row) = client.query_opt(&stmt, &[&run.0]).await? else {
        return Ok(LeaseAttempt::Stale);
    };
    let current: i64 = row.get(0);
    let status: RunStatus = row.get::<_, &str>(1).parse()?;
    let until: Option<DateTime<Utc>> = row.get(2);
    let left: Option<f64> = row.get(3);
    Ok(match until {
        Some(until) if current == seq && status == RunStatus::Running => LeaseAttempt::Held {
            until,
            left: std::time::Duration::from_secs_f64(left.unwrap_or(0.0).max(0.0)),
        },
        _ => LeaseAttempt::Stale,
    })
}

/// What the acquire statement's row says: the lease, the journal, the
/// conversation before the run and its call rows.
fn context_of(run: RunId, ttl_ms: u64, row: &tokio_postgres::Row) -> Result<RunContext> {
    let thread_id = ThreadId(row.get(0));
    let lease = Lease {
        run_id: run,
        thread_id,
        token: row.get(1),
        ttl_ms,
        run_name: row.get(2),
        depth: row.get(3),
        root_run_id: RunId(row.get(11)),
        slot_owner: row.get(14),
    };
    let journal: Vec<(i32, String, serde_json::Value, i16)> = serde_json::from_value(row.get(7))?;
    let journal = stored_journal::unpack(
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
    let calls: Vec<CallColumns> = serde_json::from_value(row.get(9))?;
    Ok(RunContext {
        lease,
        parent_tool_call_id: row.get(6),
        parent_run_id: row.get::<_, Option<Uuid>>(4).map(RunId),
        attempts: row.get(5),
        takeovers: row.get(10),
        deferrals: row.get(15),
        agent_version: row.get(12),
        steered: row.get(13),
        journal,
        history,
        calls: calls
            .into_iter()
            .map(CallColumns::decode)
            .collect::<Result<_>>()?,
    })
}
