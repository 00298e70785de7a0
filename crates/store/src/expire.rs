//! Expiry: an open request nobody answered resolves as a timeout denial, and
//! the run goes on. Applied by the worker when the delayed expiry message
//! arrives, and by the reaper for what the queue lost.

use agentenkit_core::reply::SettledReply;
use agentenkit_core::{CallEvent, QueueMessage, RunId, ThreadId, ToolCallId, ToolCallStatus};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::answer::{resolved_ops, Settled};
use crate::event_insert::returned_outbox;
use crate::outbox::{self, OutboxRow};
use crate::pipeline::{Answer, Expect, Op, OpenTx};
use crate::{Result, Store};

/// An early delivery: the expiry again, for the rest of the wait.
async fn reschedule(
    tx: OpenTx,
    message: QueueMessage,
    remaining_ms: u64,
) -> Result<Vec<OutboxRow>> {
    let answers = tx
        .commit_with(vec![outbox::insert_op(&message, remaining_ms)])
        .await?;
    Ok(match answers.into_iter().next() {
        Some(Answer::Ids(ids)) => ids
            .into_iter()
            .map(|id| OutboxRow {
                id,
                message: message.clone(),
                delay_ms: remaining_ms,
                claimed: None,
                trace: None,
            })
            .collect(),
        _ => Vec::new(),
    })
}
/// The expiry's first round trip: the run's row lock (same lock order as
/// an answer: run, then its rows, then the outbox row both delete, so the
/// two serialize instead of deadlocking), the message's outbox row
/// consumed (whatever this finds, the message has been handled), and the
/// call read after the lock. `None` when the run or the call is gone;
/// else the run's trace and the call's row.
async fn lock_and_read(
    tx: &OpenTx,
    run: RunId,
    call: &ToolCallId,
    message: &QueueMessage,
) -> Result<Option<(Option<agentenkit_core::TraceContext>, tokio_postgres::Row)>> {
    let mut answers = tx
        .begin_with(vec![
            Op::new(
                "SELECT traceparent, tracestate FROM runs WHERE id = $1 FOR NO KEY UPDATE",
                vec![Box::new(run.0)],
            )
            .expect(Expect::Rows),
            outbox::consumed_op(message),
            Op::new(
                "SELECT tc.status, tc.expires_at, now(), tc.thread_id, tc.name, tc.created_at
                 FROM tool_calls tc WHERE tc.run_id = $1 AND tc.id = $2",
                vec![Box::new(run.0), Box::new(call.as_str().to_owned())],
            )
            .expect(Expect::Rows),
        ])
        .await?
        .into_iter()
        .map(Answer::rows);
    let locked = answers.next().unwrap_or_default();
    let found = answers.nth(1).unwrap_or_default();
    Ok(match (locked.first(), found.into_iter().next()) {
        (Some(run), Some(row)) => Some((crate::start::trace_in(run, 0), row)),
        _ => None,
    })
}

/// The reply an expiry settles a request with: nobody's, the timeout
/// denial.
fn expired_reply(at: DateTime<Utc>) -> SettledReply {
    SettledReply {
        answered_at: Some(at),
        ..SettledReply::bare(ToolCallStatus::Expired)
    }
}

/// What an expiry attempt found.
#[derive(Debug, Clone, PartialEq)]
pub enum Expiry {
    /// The request expired now; `outbox` holds the resume segment if it was
    /// the run's last open request.
    Expired {
        outbox: Vec<OutboxRow>,
        /// How long after `expires_at` it expired (the delay path's and the
        /// handler's lateness).
        late_ms: u64,
        /// How long the request waited, from its park to now.
        waited_ms: u64,
        /// The trace the run was started under, when it was traced: the
        /// resume segment in `outbox` continues it.
        trace: Option<agentenkit_core::TraceContext>,
    },
    /// Not due yet (an early delivery): re-scheduled for the remainder.
    NotDue {
        remaining_ms: u64,
        outbox: Vec<OutboxRow>,
    },
    /// Answered, cancelled, or never expiring: nothing to do.
    Gone,
}

/// Which open requests a reclaim pass looks at.
#[derive(Debug, Clone)]
pub enum Scope {
    All,
    Thread(ThreadId),
    Owner(agentenkit_core::Owner),
}

impl Store {
    /// Expires the request if it is still open and due, in one transaction.
    pub async fn expire(&self, run: RunId, call: &ToolCallId) -> Result<Expiry> {
        let expiry = crate::pipeline::retry_conflicts(|| self.expire_once(run, call)).await?;
        if let Expiry::Expired { outbox, .. } | Expiry::NotDue { outbox, .. } = &expiry {
            self.publish(outbox).await;
        }
        Ok(expiry)
    }

    /// One round trip reads under the run's lock, the next writes what
    /// it found: nothing, the expiry again for the remainder, or the
    /// expiry's plan.
    async fn expire_once(&self, run: RunId, call: &ToolCallId) -> Result<Expiry> {
        let message = QueueMessage::Expiry {
            run_id: run,
            tool_call_id: call.clone(),
        };
        let tx = OpenTx::new(self.client().await?);
        let Some((trace, row)) = lock_and_read(&tx, run, call, &message).await? else {
            tx.commit_with(Vec::new()).await?;
            return Ok(Expiry::Gone);
        };
        let status: ToolCallStatus = row.get::<_, &str>(0).parse()?;
        let expires_at: Option<DateTime<Utc>> = row.get(1);
        let now: DateTime<Utc> = row.get(2);
        let (ToolCallStatus::PendingApproval, Some(expires_at)) = (status, expires_at) else {
            tx.commit_with(Vec::new()).await?;
            return Ok(Expiry::Gone);
        };
        if now < expires_at {
            let remaining_ms = (expires_at - now).num_milliseconds().max(1) as u64;
            let outbox = reschedule(tx, message, remaining_ms).await?;
            return Ok(Expiry::NotDue {
                remaining_ms,
                outbox,
            });
        }
        let settled = Settled {
            thread: ThreadId(row.get::<_, Uuid>(3)),
            run,
            call,
            tool_name: row.get(4),
        };
        let mut ops = vec![crate::calls::write_one(
            run,
            call,
            &CallEvent::Expire { at: now },
        )?];
        ops.extend(resolved_ops(
            settled,
            &expired_reply(now),
            self.notify_rule(),
        )?);
        let mut outbox = returned_outbox(tx.commit_with(ops).await?)?;
        for row in &mut outbox {
            row.trace.clone_from(&trace);
        }
        let late_ms = (now - expires_at).num_milliseconds().max(0) as u64;
        let parked_at: DateTime<Utc> = row.get(5);
        let waited_ms = (now - parked_at).num_milliseconds().max(0) as u64;
        Ok(Expiry::Expired {
            outbox,
            late_ms,
            waited_ms,
            trace,
        })
    }

    /// Whether anything in `scope` needs reclaiming: an overdue request, or
    /// an approval or park without an expiry. One indexed query, so a
    /// client connecting costs one query when there is nothing to do.
    pub async fn has_reclaimable_requests(&self, scope: &Scope) -> Result<bool> {
        let client = self.client().await?;
        let (thread, owner) = scope_params(scope);
        let stmt = client
            .prepare_cached(&format!(
                "SELECT EXISTS (
                   SELECT 1 FROM tool_calls tc
                   WHERE tc.status = 'pending_approval'
                     AND (tc.expires_at <= now() OR (tc.expires_at IS NULL AND tc.kind IN ('approval', 'park')))
                     AND {scope})",
                scope = scope_clause(scope),
            ))
            .await?;
        Ok(client.query_one(&stmt, &[&thread, &owner]).await?.get(0))
    }

    /// Open requests in `scope` whose `expires_at` has passed, oldest first.
    pub async fn overdue_requests(
        &self,
        scope: &Scope,
        limit: i64,
    ) -> Result<Vec<(RunId, ToolCallId)>> {
        let client = self.client().await?;
        let (thread, owner) = scope_params(scope);
        let stmt = client
            .prepare_cached(&format!(
                "SELECT tc.run_id, tc.id FROM tool_calls tc
                 WHERE tc.status = 'pending_approval' AND tc.expires_at <= now()
                   AND {scope}
                 ORDER BY tc.expires_at LIMIT $3",
                scope = scope_clause(scope),
            ))
            .await?;
        Ok(client
            .query(&stmt, &[&thread, &owner, &limit])
            .await?
            .into_iter()
            .map(|r| (RunId(r.get(0)), ToolCallId(r.get(1))))
            .collect())
    }

    /// Gives open approvals and parks that have no expiry (parked before the
    /// timer existed) one, `ttl_ms` from now, and schedules it. Questions
    /// never expire and are left alone.
    pub async fn schedule_missing_expiries(
        &self,
        scope: &Scope,
        ttl_ms: u64,
        limit: i64,
    ) -> Result<Vec<OutboxRow>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let (thread, owner) = scope_params(scope);
        let stmt = tx
            .prepare_cached(
                &crate::calls::SCHEDULE_MISSING_EXPIRIES_SQL
                    .replace("{scope}", &scope_clause(scope).replace("tc.", "")),
            )
            .await?;
        let rows = tx
            .query(&stmt, &[&thread, &owner, &(ttl_ms as f64), &limit])
            .await?;
        let mut outbox = Vec::with_capacity(rows.len());
        for row in rows {
            let message = QueueMessage::Expiry {
                run_id: RunId(row.get(0)),
                tool_call_id: ToolCallId(row.get(1)),
            };
            outbox.push(outbox::insert(&tx, &message, ttl_ms).await?);
        }
        tx.commit().await?;
        outbox::with_run_traces(&client, &mut outbox).await;
        self.publish(&outbox).await;
        Ok(outbox)
    }
}

impl Store {
    /// For measurement: how many ms after its `expires_at` each expired
    /// request resolved (its `INPUT_RESOLVED` event's time).
    pub async fn expiry_lateness_ms(&self) -> Result<Vec<f64>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT (extract(epoch FROM e.created_at - tc.expires_at) * 1000)::float8
                 FROM tool_calls tc
                 JOIN events e ON e.thread_id = tc.thread_id AND e.type = 'INPUT_RESOLVED'
                  AND e.data->>'toolCallId' = tc.id AND e.run_id = tc.run_id
                 WHERE tc.status = 'expired'",
                &[],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}

/// The condition that keeps a statement on `tool_calls tc` to `scope`,
/// whose thread is `$1` and owner `$2` (the other null). One statement per
/// scope, each planned with the index its scope uses: the sessions plan
/// generically (`StoreConfig::plan_for_growth`), and a generic plan of
/// `($1 IS NULL OR tc.thread_id = $1)` can use none, so it would read
/// every open request of the database for one thread.
fn scope_clause(scope: &Scope) -> String {
    match scope {
        Scope::All => "$1::uuid IS NULL AND $2::text IS NULL".to_owned(),
        Scope::Thread(_) => "tc.thread_id = $1 AND $2::text IS NULL".to_owned(),
        Scope::Owner(_) => format!("$1::uuid IS NULL AND {}", crate::threads::of_owner("$2")),
    }
}

fn scope_params(scope: &Scope) -> (Option<Uuid>, Option<String>) {
    match scope {
        Scope::All => (None, None),
        Scope::Thread(thread) => (Some(thread.0), None),
        Scope::Owner(owner) => (None, Some(owner.to_string())),
    }
}
