//! Stopping a thread: its current run tree is cancelled, every open
//! request of it with it, in one transaction.

use agentenkit_core::{Owner, RunId, ThreadId};
use uuid::Uuid;

use crate::event_insert::returned_outbox;
use crate::outbox::OutboxRow;
use crate::pipeline::{Answer, Expect, Op, OpenTx};
use crate::{Error, Result, Store};

impl Store {
    /// Stops the thread's current run tree: every active run of it is
    /// cancelled, its open requests with it, in one transaction. A worker
    /// still advancing the run loses its lease and commits nothing more.
    /// Returns the runs stopped (none when the thread was idle).
    pub async fn stop_thread(&self, thread: ThreadId, owner: &Owner) -> Result<Vec<RunId>> {
        let (stopped, outbox) =
            crate::pipeline::retry_conflicts(|| self.stop_thread_once(thread, owner)).await?;
        self.publish(&outbox).await;
        // The stopped runs' slots are free: the owner's held runs that fit
        // now are admitted (or, if this fails, by the reaper).
        self.admit_after_stopping(owner.as_str(), thread).await;
        // Messages queued behind the stopped run are the person's own:
        // they start now, as when a run ends any other way (or, if this
        // fails, by the reaper: the stop has committed).
        if let Err(e) = self.start_queued(thread).await {
            tracing::warn!(thread_id = %thread, error = %e,
                "a queued turn did not start after a stop; the reaper will start it");
        }
        Ok(stopped)
    }

    /// The runs stopped, and the notifications of their `RUN_CANCELLED`.
    async fn stop_thread_once(
        &self,
        thread: ThreadId,
        owner: &Owner,
    ) -> Result<(Vec<RunId>, Vec<OutboxRow>)> {
        let tx = OpenTx::new(self.client().await?);
        let locked = tx
            .begin_with(vec![Op::new(
                "SELECT current_run_id FROM threads WHERE id = $1 AND owner = $2
                 FOR NO KEY UPDATE",
                vec![Box::new(thread.0), Box::new(owner.to_string())],
            )
            .expect(Expect::Rows)])
            .await?
            .into_iter()
            .next()
            .map(Answer::rows)
            .unwrap_or_default();
        let Some(row) = locked.first() else {
            tx.rollback().await?;
            return Err(Error::NotFound {
                what: "thread",
                id: thread.to_string(),
            });
        };
        let Some(current) = row.get::<_, Option<Uuid>>(0) else {
            tx.commit_with(Vec::new()).await?;
            return Ok((vec![], vec![]));
        };
        // The tree as an interrupt stops it (its open requests cancelled),
        // with the events last, after every row lock (see
        // `INSERT_EVENT_SQL`).
        let mut ops = Vec::new();
        let stopped = self
            .interrupt(&tx, thread, RunId(current), ("stopped", None), &mut ops)
            .await?;
        let outbox = returned_outbox(tx.commit_with(ops).await?)?;
        Ok((stopped, outbox))
    }
}
