//! What has been sent to the notification targets: one row per delivery
//! (an event, or a reminder) and target in `notification_deliveries`.
//!
//! A `Notify` or `Remind` message is handled in three steps: claim the
//! targets still owed the delivery (each claim lasts the attempt's timeout,
//! so a duplicate message does not send alongside), send outside any
//! transaction, then record what each target answered in one transaction
//! with the message's outbox row: consumed when nothing is owed any more,
//! else replaced by one due at the earliest retry. A worker that dies after
//! sending and before recording leaves the claim to run out and the outbox
//! row for the reaper: the target is sent the same delivery again, with
//! the same id, which it uses to drop the copy.
//!
//! An event's first attempt is usually claimed by the transaction that
//! writes it, and sent by the process that committed it (`sent_here`):
//! then only the record is left, the same as here.

use std::time::Duration;

use agentenkit_core::notify::retry_delay;
use agentenkit_core::{QueueMessage, RunId, ToolCallId};

use crate::outbox::{self, OutboxRow};
use crate::pipeline::{Answer, Expect, Op};
use crate::views::PendingInput;
use crate::{Result, Store};

/// How a claim meets a delivery's row made before: it claims it (its next
/// attempt counted) only when the delivery is owed and neither claimed nor
/// waiting for a retry. Every claim of a delivery ends so.
macro_rules! claim_on_conflict {
    () => {
        "ON CONFLICT (delivery_id, target) DO UPDATE
         SET next_at = excluded.next_at,
             attempts = notification_deliveries.attempts + 1
         WHERE notification_deliveries.delivered_at IS NULL
           AND notification_deliveries.dead_at IS NULL
           AND notification_deliveries.next_at <= now()
         RETURNING target, attempts"
    };
}
pub(crate) use claim_on_conflict;

/// One target to send a delivery to now, and which attempt this is
/// (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryAttempt {
    pub target: String,
    pub attempt: u32,
}

/// What a target answered to one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryResult {
    /// A 2xx.
    Delivered { status: u16 },
    /// Anything else: another status, a timeout, no connection.
    Failed { status: Option<u16>, error: String },
    /// Not tried (the target's circuit is open): the attempt is given
    /// back and the target is owed it again after `after`.
    Deferred { after: Duration, reason: String },
}

/// How the retries of a delivery go.
#[derive(Debug, Clone, Copy)]
pub struct RetryRule {
    /// Attempts per target before the delivery to it is dead.
    pub max_attempts: u32,
    /// The wait after the first failure, doubled after each next one.
    pub first_retry: Duration,
}

/// One attempt made, what it got, and the retry rule of its target.
#[derive(Debug, Clone)]
pub struct Attempted {
    pub attempt: DeliveryAttempt,
    pub result: DeliveryResult,
    pub rule: RetryRule,
}

/// What recording a delivery's attempts left.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recorded {
    /// The message again, due at the earliest retry, when a target is
    /// still owed the delivery (published once committed).
    pub retry: Option<OutboxRow>,
}

/// What one delivery's attempts got, to record with its message.
#[derive(Debug, Clone)]
pub struct RecordItem {
    pub message: QueueMessage,
    pub delivery_id: String,
    /// The targets the message handles (those it claimed, or tried to).
    pub targets: Vec<String>,
    pub results: Vec<Attempted>,
}

/// The update of one attempt's row: delivered, failed (dead after its
/// target's last attempt, else due again after its backoff), or given
/// back uncounted (the circuit was open). Only the claim that counted
/// `attempt` may record it.
fn attempt_op(delivery_id: &str, attempted: &Attempted) -> Op {
    let Attempted {
        attempt,
        result,
        rule,
    } = attempted;
    let (delivered, status, error) = match result {
        DeliveryResult::Delivered { status } => (true, Some(*status), None),
        DeliveryResult::Failed { status, error } => (false, *status, Some(error.clone())),
        DeliveryResult::Deferred { after, reason } => {
            return Op::new(
                "UPDATE notification_deliveries
                 SET attempts = attempts - 1, last_error = $4,
                     next_at = now() + $5 * interval '1 millisecond'
                 WHERE delivery_id = $1 AND target = $2
                   AND delivered_at IS NULL AND dead_at IS NULL AND attempts = $3",
                vec![
                    Box::new(delivery_id.to_owned()),
                    Box::new(attempt.target.clone()),
                    Box::new(attempt.attempt as i32),
                    Box::new(reason.clone()),
                    Box::new(after.as_millis() as f64),
                ],
            )
        }
    };
    let wait = retry_delay(rule.first_retry, attempt.attempt);
    Op::new(
        "UPDATE notification_deliveries
         SET last_status = $4, last_error = $5,
             delivered_at = CASE WHEN $6 THEN now() END,
             dead_at = CASE WHEN NOT $6 AND $3 >= $7 THEN now() END,
             next_at = now() + $8 * interval '1 millisecond'
         WHERE delivery_id = $1 AND target = $2
           AND delivered_at IS NULL AND dead_at IS NULL AND attempts = $3",
        vec![
            Box::new(delivery_id.to_owned()),
            Box::new(attempt.target.clone()),
            Box::new(attempt.attempt as i32),
            Box::new(status.map(i32::from)),
            Box::new(error),
            Box::new(delivered),
            Box::new(rule.max_attempts as i32),
            Box::new(wait.as_millis() as f64),
        ],
    )
}

/// The statements recording `items`: each attempt's row, then each
/// message consumed and, for whatever is still owed, written again due at
/// the earliest retry (NULL min: nothing owed).
fn record_ops(items: &[RecordItem]) -> Vec<Op> {
    let mut ops: Vec<Op> = items
        .iter()
        .flat_map(|item| {
            item.results
                .iter()
                .map(|attempted| attempt_op(&item.delivery_id, attempted))
        })
        .collect();
    let mut ids = Vec::new();
    let mut targets = Vec::new();
    let mut keys = Vec::new();
    for item in items {
        for target in &item.targets {
            ids.push(item.delivery_id.clone());
            targets.push(target.clone());
            keys.push(item.message.outbox_key());
        }
    }
    let consumed: Vec<String> = items.iter().map(|i| i.message.outbox_key()).collect();
    ops.push(Op::new(
        "DELETE FROM outbox WHERE key = ANY($1)",
        vec![Box::new(consumed)],
    ));
    ops.push(
        Op::new(
            "INSERT INTO outbox (delay_ms, key, due_at)
             SELECT owed.delay_ms, owed.key, now() + owed.delay_ms * interval '1 millisecond'
             FROM (SELECT m.key,
                          greatest(0, ceil(extract(epoch FROM min(d.next_at) - now()) * 1000))::bigint
                            AS delay_ms
                   FROM unnest($1::text[], $2::text[], $3::text[]) AS m(delivery_id, target, key)
                   JOIN notification_deliveries d
                     ON d.delivery_id = m.delivery_id AND d.target = m.target
                    AND d.delivered_at IS NULL AND d.dead_at IS NULL
                   GROUP BY m.key) owed
             RETURNING id, key, delay_ms",
            vec![Box::new(ids), Box::new(targets), Box::new(keys)],
        )
        .expect(Expect::Rows),
    );
    ops
}

/// A delivery's row as an operator reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRow {
    pub target: String,
    pub attempts: u32,
    pub delivered: bool,
    pub dead: bool,
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
}

impl Store {
    /// Claims, for `claim` (the attempt's timeout and some), the targets
    /// among `targets` still owed `delivery_id`: not delivered, not dead,
    /// and not claimed nor waiting for a retry. Rows are made on first use.
    pub async fn claim_deliveries(
        &self,
        delivery_id: &str,
        targets: &[String],
        claim: Duration,
    ) -> Result<Vec<DeliveryAttempt>> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                // A row is made claimed, its first attempt counted; one
                // made before is claimed (its next attempt counted) only
                // when it is owed and neither claimed nor waiting. An
                // attempt is counted when it is claimed, so one whose
                // worker died after sending still counts.
                concat!(
                    "INSERT INTO notification_deliveries (delivery_id, target, next_at, attempts)
                     SELECT $1, unnest($2::text[]), now() + $3 * interval '1 millisecond', 1 ",
                    claim_on_conflict!()
                ),
            )
            .await?;
        Ok(client
            .query(
                &stmt,
                &[&delivery_id, &targets, &(claim.as_millis() as f64)],
            )
            .await?
            .iter()
            .map(|r| DeliveryAttempt {
                target: r.get(0),
                attempt: r.get::<_, i32>(1).max(1) as u32,
            })
            .collect())
    }

    /// Records what each attempt of `message`'s delivery got, in one
    /// transaction with the message's outbox row (see the module's doc),
    /// and publishes the retry, if any, once committed.
    pub async fn record_deliveries(
        &self,
        message: &QueueMessage,
        delivery_id: &str,
        targets: &[String],
        results: &[Attempted],
    ) -> Result<Recorded> {
        let item = RecordItem {
            message: message.clone(),
            delivery_id: delivery_id.to_owned(),
            targets: targets.to_vec(),
            results: results.to_vec(),
        };
        let retries = self.record_many(std::slice::from_ref(&item)).await?;
        Ok(Recorded {
            retry: retries.into_iter().next(),
        })
    }

    /// [`Store::record_deliveries`] for several deliveries at once: one
    /// transaction, one round trip. Returns the retries it wrote (each
    /// published once committed).
    ///
    /// Two records of the same deliveries (a message handled twice, a
    /// batch of sends beside a worker's record) can deadlock; the one
    /// Postgres aborts runs again, rather than leaving what its targets
    /// answered unrecorded until the reaper publishes the message again.
    pub async fn record_many(&self, items: &[RecordItem]) -> Result<Vec<OutboxRow>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let answers = crate::pipeline::retry_conflicts(|| async {
            crate::pipeline::transact(&self.client().await?, record_ops(items)).await
        })
        .await?;
        let written = answers.into_iter().last().map(Answer::rows);
        let retries = outbox::returned_rows(&written.unwrap_or_default())?;
        self.publish(&retries).await;
        Ok(retries)
    }

    /// Drops a notification message that has nothing to send (its event
    /// or request is gone, or no longer open).
    pub async fn drop_notification(&self, message: &QueueMessage) -> Result<()> {
        self.consume_message(message).await
    }

    /// Puts a message that came early back on its way, due in `delay`.
    pub async fn reschedule_notification(
        &self,
        message: &QueueMessage,
        delay: Duration,
    ) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        outbox::consumed(&tx, message).await?;
        let row = outbox::insert(&tx, message, delay.as_millis() as u64).await?;
        tx.commit().await?;
        self.publish(std::slice::from_ref(&row)).await;
        Ok(())
    }

    /// The deliveries of `delivery_id`, by target (operators, tests).
    pub async fn deliveries(&self, delivery_id: &str) -> Result<Vec<DeliveryRow>> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT target, attempts, delivered_at IS NOT NULL, dead_at IS NOT NULL,
                        last_status, last_error
                 FROM notification_deliveries WHERE delivery_id = $1 ORDER BY target",
            )
            .await?;
        Ok(client
            .query(&stmt, &[&delivery_id])
            .await?
            .iter()
            .map(|r| DeliveryRow {
                target: r.get(0),
                attempts: r.get::<_, i32>(1).max(0) as u32,
                delivered: r.get(2),
                dead: r.get(3),
                last_status: r.get::<_, Option<i32>>(4).map(|s| s.clamp(0, 999) as u16),
                last_error: r.get(5),
            })
            .collect())
    }

    /// The request `call` of `run` while it is still open in its thread's
    /// current turn (`None` once answered, expired, stopped or gone), and
    /// how long it has waited.
    pub async fn open_request(
        &self,
        run: RunId,
        call: &ToolCallId,
    ) -> Result<Option<(PendingInput, Duration)>> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT req.*, extract(epoch FROM clock_timestamp() - req.created_at)::float8
                 FROM ({} AND tc.run_id = $1 AND tc.id = $2) req",
                crate::threads::PENDING_INPUTS
            ))
            .await?;
        let Some(row) = client.query_opt(&stmt, &[&run.0, &call.as_str()]).await? else {
            return Ok(None);
        };
        // After the columns of `PENDING_INPUTS`.
        let waited: f64 = row.get(row.len() - 1);
        Ok(Some((
            crate::threads::pending_input(&row)?,
            Duration::from_secs_f64(waited.max(0.0)),
        )))
    }

    /// Deletes up to `limit` settled deliveries (delivered or dead) made
    /// more than `older_than` ago; returns how many. The reaper's
    /// housekeeping.
    pub async fn delete_old_deliveries(&self, older_than: Duration, limit: i64) -> Result<u64> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "DELETE FROM notification_deliveries WHERE ctid = ANY(ARRAY(
                     SELECT ctid FROM notification_deliveries
                     WHERE created_at < now() - $1 * interval '1 millisecond'
                       AND (delivered_at IS NOT NULL OR dead_at IS NOT NULL)
                     LIMIT $2))",
            )
            .await?;
        Ok(client
            .execute(&stmt, &[&(older_than.as_millis() as f64), &limit])
            .await?)
    }
}
