//! The outbox: messages written in the commit they must follow.
//!
//! The committer publishes a row's message right after its commit and leaves
//! the row; the handler that consumes the message deletes the row (by its
//! key) in the transaction it commits anyway. A row still there well after
//! it was due is a message that was never published or was lost: the reaper
//! publishes it again, and the consumer drops the duplicate if it was not.

use agentenkit_core::QueueMessage;
use deadpool_postgres::Transaction;

use crate::pipeline::{Expect, Op};
use crate::{Result, Store};

/// What publishes the messages a transaction wrote to the outbox, right
/// after it committed (the runtime's relay; see [`Store::with_publisher`]).
/// Publishing never fails the write: a message it could not send stays in
/// the outbox, for it to retry and for the reaper.
#[async_trait::async_trait]
pub trait Publisher: Send + Sync {
    async fn publish(&self, rows: &[OutboxRow]);
}

/// One message to publish after its commit.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRow {
    pub id: i64,
    pub message: QueueMessage,
    /// Publish so that it is delivered this many ms from now (0: at once).
    pub delay_ms: u64,
    /// The event of a `Notify` message claimed for this process to send
    /// itself (see `sent_here`); published only when it cannot.
    pub claimed: Option<std::sync::Arc<crate::ClaimedEvent>>,
    /// The trace its message continues, when the row is published outside
    /// it (a reaper's expiry continues the run's trace, not its own pass);
    /// `None`: the span that publishes it.
    pub trace: Option<agentenkit_core::TraceContext>,
}

/// Inserts a row: `(delay_ms, key)`, returning its id. The key names the
/// message whole ([`QueueMessage::from_outbox_key`]).
const INSERT_SQL: &str = "INSERT INTO outbox (delay_ms, key, due_at)
     VALUES ($1, $2, now() + $1::bigint * interval '1 millisecond') RETURNING id";

/// The insert of `message` as a pipelined statement ([`Expect::Ids`]).
pub(crate) fn insert_op(message: &QueueMessage, delay_ms: u64) -> Op {
    Op::new(
        INSERT_SQL,
        vec![Box::new(delay_ms as i64), Box::new(message.outbox_key())],
    )
    .expect(Expect::Ids)
}

pub(crate) async fn insert(
    tx: &Transaction<'_>,
    message: &QueueMessage,
    delay_ms: u64,
) -> Result<OutboxRow> {
    let stmt = tx.prepare_cached(INSERT_SQL).await?;
    let row = tx
        .query_one(&stmt, &[&(delay_ms as i64), &message.outbox_key()])
        .await?;
    Ok(OutboxRow {
        id: row.get(0),
        message: message.clone(),
        delay_ms,
        claimed: None,
        trace: None,
    })
}

/// The outbox rows a statement returned: `(id, key)`, with `delay_ms`
/// when it returns one (a retry). (A claimed notification's rows come
/// with their event: `sent_here::EventDraft::claimed_row`.)
pub(crate) fn returned_rows(rows: &[tokio_postgres::Row]) -> Result<Vec<OutboxRow>> {
    rows.iter()
        .map(|row| {
            let key: &str = row.get("key");
            let message = QueueMessage::from_outbox_key(key).ok_or_else(|| {
                crate::Error::Corrupt(format!("a statement wrote the outbox key {key:?}"))
            })?;
            let delay_ms = match row.columns().iter().any(|c| c.name() == "delay_ms") {
                true => row.get::<_, i64>("delay_ms").max(0) as u64,
                false => 0,
            };
            Ok(OutboxRow {
                id: row.get("id"),
                message,
                delay_ms,
                claimed: None,
                trace: None,
            })
        })
        .collect()
}

/// Deletes the rows of a message that is being handled now.
/// [`consumed`] as a pipelined statement.
pub(crate) fn consumed_op(message: &QueueMessage) -> Op {
    Op::new(
        "DELETE FROM outbox WHERE key = $1",
        vec![Box::new(message.outbox_key())],
    )
}

pub(crate) async fn consumed(tx: &Transaction<'_>, message: &QueueMessage) -> Result<()> {
    let stmt = tx
        .prepare_cached("DELETE FROM outbox WHERE key = $1")
        .await?;
    tx.execute(&stmt, &[&message.outbox_key()]).await?;
    Ok(())
}

impl Store {
    /// Deletes the outbox row of `message`, handled without a transaction
    /// of its own to delete it in (it had nothing to write).
    pub(crate) async fn consume_message(&self, message: &QueueMessage) -> Result<()> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached("DELETE FROM outbox WHERE key = $1")
            .await?;
        client.execute(&stmt, &[&message.outbox_key()]).await?;
        Ok(())
    }

    /// Claims up to `limit` rows whose messages should have been handled
    /// more than `older_than_ms` ago and were not (the committing process
    /// died before it published, the publish failed, or the broker lost the
    /// message), and publishes them again. A claim lasts `claim_ms`, so two
    /// reapers never publish the
    /// same row at once; a reaper that dies mid-publish leaves rows for the
    /// next one. `immediate_only` leaves delayed messages (expiries) out.
    pub async fn claim_stale_outbox(
        &self,
        older_than_ms: u64,
        claim_ms: u64,
        limit: i64,
        immediate_only: bool,
    ) -> Result<Vec<OutboxRow>> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                // The rows locked by the inner SELECT are addressed by ctid:
                // no other transaction can move them before this statement
                // ends, and the outbox has no index on id.
                "UPDATE outbox SET claimed_until = now() + $2 * interval '1 millisecond'
                 WHERE ctid = ANY(ARRAY(
                       SELECT ctid FROM outbox
                       WHERE due_at < now() - $1 * interval '1 millisecond'
                         AND (claimed_until IS NULL OR claimed_until < now())
                         AND (NOT $4 OR delay_ms = 0)
                       ORDER BY due_at LIMIT $3 FOR UPDATE SKIP LOCKED))
                 RETURNING id, key",
            )
            .await?;
        let rows = client
            .query(
                &stmt,
                &[
                    &(older_than_ms as f64),
                    &(claim_ms as f64),
                    &limit,
                    &immediate_only,
                ],
            )
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let id: i64 = row.get(0);
            let key: &str = row.get(1);
            match QueueMessage::from_outbox_key(key) {
                // A stale row goes at once: its delay is long past.
                Some(message) => out.push(OutboxRow {
                    id,
                    message,
                    claimed: None,
                    trace: None,
                    delay_ms: 0,
                }),
                // A row no code version can publish: keep it out of the
                // way of the others, but say so.
                None => tracing::error!(outbox_id = id, key, "unreadable outbox row skipped"),
            }
        }
        with_run_traces(&client, &mut out).await;
        self.publish(&out).await;
        Ok(out)
    }
}

/// Gives each row the trace its run was started under, so that a message
/// the reaper publishes continues its run's trace, not a pass's of the
/// reaper: one query for the rows of a pass that found work (none when it
/// found none). Best effort: the rows are claimed already, and a message
/// without its trace is better than one published late.
pub(crate) async fn with_run_traces<C: deadpool_postgres::GenericClient>(
    client: &C,
    rows: &mut [OutboxRow],
) {
    if rows.is_empty() {
        return;
    }
    if let Err(e) = read_run_traces(client, rows).await {
        tracing::warn!(error = %e, "could not read the runs' traces; publishing without them");
    }
}

async fn read_run_traces<C: deadpool_postgres::GenericClient>(
    client: &C,
    rows: &mut [OutboxRow],
) -> Result<()> {
    let runs: Vec<uuid::Uuid> = rows.iter().map(|row| row.message.run_id().0).collect();
    let stmt = client
        .prepare_cached(
            "SELECT id, traceparent, tracestate FROM runs
             WHERE id = ANY($1) AND traceparent IS NOT NULL",
        )
        .await?;
    let traced = client.query(&stmt, &[&runs]).await?;
    for run in &traced {
        let id: uuid::Uuid = run.get(0);
        let Some(trace) = crate::start::trace_in(run, 1) else {
            continue;
        };
        for row in rows.iter_mut().filter(|row| row.message.run_id().0 == id) {
            row.trace = Some(trace.clone());
        }
    }
    Ok(())
}
