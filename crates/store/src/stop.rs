//! Stopping a thread: its current run tree is cancelled, every open
//! request of it with it, in one transaction.

use agentenkit_core::{EventType, Owner, RunId, ThreadId};
use deadpool_postgres::Transaction;
use serde_json::json;
use uuid::Uuid;

use crate::event_insert::insert_event;
use crate::outbox::OutboxRow;
use crate::{Error, Result, Store};

impl Store {
    /// Stops the thread's current run tree: every active run of it is
    /// cancelled, its open requests with it, in one transaction. A worker
    /// still advancing the run loses its lease and commits nothing more.
    /// Returns the runs stopped (none when the thread was idle).
    pub async fn stop_thread(&self, thread: ThreadId, owner: &Owner) -> Result<Vec<RunId>> {
        let (stopped, outbox) =
            crate::error::retry_conflicts(|| self.stop_thread_once(thread, owner)).await?;
        self.publish(&outbox).await;
        Ok(stopped)
    }

    /// The runs stopped, and the notifications of their `RUN_CANCELLED`.
    async fn stop_thread_once(
        &self,
        thread: ThreadId,
        owner: &Owner,
    ) -> Result<(Vec<RunId>, Vec<OutboxRow>)> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let stmt = tx
            .prepare_cached(
                "SELECT current_run_id FROM threads WHERE id = $1 AND owner = $2 FOR NO KEY UPDATE",
            )
            .await?;
        let current: Option<Uuid> = tx
            .query_opt(&stmt, &[&thread.0, &owner.as_str()])
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "thread",
                id: thread.to_string(),
            })?
            .get(0);
        let Some(current) = current else {
            return Ok((vec![], vec![]));
        };
        let stmt = tx
            .prepare_cached(
                "UPDATE runs SET status = 'cancelled', finished_at = now(), updated_at = now(),
                        lease_owner = NULL, lease_expires_at = NULL, error = 'stopped'
                 WHERE (id = $1 OR (root_run_id = $1 AND parent_run_id IS NOT NULL))
                   AND status IN ('queued', 'running', 'waiting')
                 RETURNING id",
            )
            .await?;
        // Each statement sees what committed before it: repeat until a
        // pass finds nothing, so a child started by a park that committed
        // while this waited is stopped too.
        let mut stopped: Vec<Uuid> = Vec::new();
        for _ in 0..16 {
            let more: Vec<Uuid> = tx
                .query(&stmt, &[&current])
                .await?
                .iter()
                .map(|r| r.get(0))
                .collect();
            if more.is_empty() {
                break;
            }
            stopped.extend(more);
        }
        cancel_open_calls(&tx, &stopped).await?;
        let mut outbox = Vec::new();
        for run in &stopped {
            outbox.extend(
                insert_event(
                    &tx,
                    thread,
                    Some(RunId(*run)),
                    EventType::RunCancelled,
                    &json!({ "runId": run, "reason": "stopped" }),
                    self.notify_rule(),
                )
                .await?,
            );
        }
        tx.commit().await?;
        Ok((stopped.into_iter().map(RunId).collect(), outbox))
    }
}

/// Cancels every call of `runs` not yet settled (their runs ended).
pub(crate) async fn cancel_open_calls(tx: &Transaction<'_>, runs: &[Uuid]) -> Result<()> {
    crate::pipeline::execute(tx, crate::calls::cancel_open(runs)).await?;
    Ok(())
}
