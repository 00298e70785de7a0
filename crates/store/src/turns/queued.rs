//! Queued turns: a message that waits for the thread's active run (or
//! steers it) is written to `queued_turns`; the next one starts once the
//! run has ended, by whoever ended it or by the reaper.

use agentenkit_core::{EventType, RunId, ThreadId, TraceContext};
use serde_json::json;
use uuid::Uuid;

use super::{lock, Sent, FOLLOW_SQL};
use crate::event_insert::event_ops;
use crate::format::event::RowFields;
use crate::outbox::OutboxRow;
use crate::pipeline::{Expect, Op, OpenTx};
use crate::{Error, Result, Store};

impl Store {
    /// Starts the thread's first queued turn, if its current run has ended.
    /// Idempotent: the thread's lock orders concurrent calls, and a turn
    /// leaves the queue in the transaction that starts it. Returns the run
    /// started.
    pub async fn start_queued(&self, thread: ThreadId) -> Result<Option<RunId>> {
        let (started, outbox) =
            crate::pipeline::retry_conflicts(|| self.start_queued_once(thread)).await?;
        self.publish(&outbox).await;
        Ok(started)
    }

    async fn start_queued_once(&self, thread: ThreadId) -> Result<(Option<RunId>, Vec<OutboxRow>)> {
        let tx = OpenTx::new(self.client().await?);
        let locked = match lock(&tx, thread, None).await {
            Ok(locked) => locked,
            // A thread gone (erased) has no turn to start.
            Err(Error::NotFound { .. }) => return Ok((None, Vec::new())),
            Err(e) => return Err(e),
        };
        if !locked.queued {
            tx.commit_with(Vec::new()).await?;
            return Ok((None, Vec::new()));
        }
        if let Some(active) = locked.active {
            // Still going: it starts the queue when it ends (unless it
            // ended since the lock's read: then the queue starts here).
            let follow = Op::new(FOLLOW_SQL, vec![Box::new(active.0)]).expect(Expect::Rows);
            if !tx.exchange_one(follow).await?.is_empty() {
                tx.commit_with(Vec::new()).await?;
                return Ok((None, Vec::new()));
            }
        }
        let head = Op::new(
            "DELETE FROM queued_turns WHERE position = (
                 SELECT position FROM queued_turns WHERE thread_id = $1
                 ORDER BY position LIMIT 1)
             RETURNING run_id, content, traceparent, tracestate",
            vec![Box::new(thread.0)],
        )
        .expect(Expect::Rows);
        let rows = tx.exchange_one(head).await?;
        let Some(row) = rows.first() else {
            tx.commit_with(Vec::new()).await?;
            return Ok((None, Vec::new()));
        };
        let run = RunId(row.get::<_, Uuid>(0));
        let content: String = row.get(1);
        let trace = crate::start::trace_in(row, 2);
        let outbox = self
            .start_in(
                &tx,
                thread,
                &locked,
                run,
                &content,
                trace.as_ref(),
                Vec::new(),
                Vec::new(),
            )
            .await?;
        Ok((Some(run), outbox))
    }

    /// Starts up to `limit` queued turns whose thread's run has ended
    /// without starting them (its process died in between). Returns the
    /// runs started.
    pub async fn start_stranded_turns(&self, limit: i64) -> Result<Vec<RunId>> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT DISTINCT q.thread_id FROM queued_turns q
                 JOIN threads t ON t.id = q.thread_id
                 LEFT JOIN runs r ON r.id = t.current_run_id
                 -- past a moment's grace: whoever ended the run starts it
                 WHERE r.id IS NULL OR (r.status NOT IN ('queued', 'running', 'waiting')
                                        AND r.finished_at < now() - interval '2 seconds')
                 LIMIT $1",
            )
            .await?;
        let threads: Vec<Uuid> = client
            .query(&stmt, &[&limit])
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        drop(client);
        let mut started = Vec::new();
        for thread in threads {
            // One thread's failure leaves the others to start.
            match self.start_queued(ThreadId(thread)).await {
                Ok(run) => started.extend(run),
                Err(e) => tracing::warn!(thread_id = %thread, error = %e,
                    "a queued turn did not start; the next pass tries again"),
            }
        }
        Ok(started)
    }

    /// Queues what was `sent` in `tx` (to start run `run`, or to join run
    /// `steers`) with its `MESSAGE_QUEUED` event (and `keep`, its key's
    /// record), and commits; the outbox rows to publish.
    pub(super) async fn queue_in(
        &self,
        tx: &OpenTx,
        thread: ThreadId,
        (run, steers): (RunId, Option<RunId>),
        sent: Sent<'_>,
        keep: Option<Op>,
    ) -> Result<Vec<OutboxRow>> {
        let content = sent.content;
        let mut ops = vec![enqueue_op(thread, run, steers, content, sent.trace)];
        ops.extend(keep);
        let mut data = json!({ "runId": steers.unwrap_or(run), "content": content });
        if steers.is_some() {
            data["steers"] = json!(true);
        }
        ops.extend(event_ops(
            thread,
            None,
            EventType::MessageQueued,
            data,
            &RowFields::default(),
            self.notify_rule(),
        ));
        crate::event_insert::returned_outbox(tx.commit_with(ops).await?)
    }
}

/// The insert of a queued turn (`run` the run it starts), or of a message
/// that steers run `steers`.
pub(super) fn enqueue_op(
    thread: ThreadId,
    run: RunId,
    steers: Option<RunId>,
    content: &str,
    trace: Option<&TraceContext>,
) -> Op {
    Op::new(
        "INSERT INTO queued_turns (thread_id, run_id, steers, content, traceparent, tracestate)
         VALUES ($1, $2, $3, $4, $5, $6)",
        vec![
            Box::new(thread.0),
            Box::new(run.0),
            Box::new(steers.map(|r| r.0)),
            Box::new(content.to_owned()),
            Box::new(trace.map(|t| t.traceparent.clone())),
            Box::new(trace.and_then(|t| t.tracestate.clone())),
        ],
    )
}
