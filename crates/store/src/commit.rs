//! The one write path of a worker: a list of changes applied in one
//! transaction, fenced by the worker's lease.

use agentenkit_core::conversation::{Message, Usage};
use agentenkit_core::{
    EventType, QueueMessage, RunId, RunStatus, ThreadId, ToolCallId, ToolCallStatus, ToolKind,
};
use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use serde_json::Value;

use crate::outbox::{self, OutboxRow};
use crate::runs::Lease;
use crate::{Error, Result, Store};

/// One row-level change made by a worker on the run it holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A new journal entry (the checkpoint just ran).
    Journal {
        position: u32,
        name: String,
        value: Value,
    },
    /// A message appended to the thread's conversation.
    Message(Message),
    /// An event on the thread's stream.
    Event { event_type: EventType, data: Value },
    /// Token usage of one model call.
    Usage { model_call: u32, usage: Usage },
    /// A tool call as the model proposed it, with its resolved kind.
    ProposeToolCall {
        id: ToolCallId,
        name: String,
        arguments: Value,
        kind: ToolKind,
    },
    /// A proposed tool call ran (or failed).
    SettleToolCall {
        id: ToolCallId,
        status: ToolCallStatus,
        result: Value,
    },
    /// A message to publish once this commit is durable.
    Outbox {
        message: QueueMessage,
        delay_ms: u64,
    },
    /// A self-parking tool asked to wait: kept on the row at once, so a
    /// retried step knows without calling the tool again.
    RecordParkRequest { id: ToolCallId, request: Value },
    /// A proposed call parks: it becomes an open request. A self-parking
    /// tool's call becomes kind `park` with its payload as `arguments`.
    ParkToolCall {
        id: ToolCallId,
        kind: ToolKind,
        reason: String,
        arguments: Option<Value>,
        expires_at: Option<DateTime<Utc>>,
    },
    /// A delegation starts its child run: queued, with the task as its user
    /// message, `RUN_STARTED`, and its first segment in the outbox.
    StartChild {
        call_id: ToolCallId,
        child_run_id: RunId,
        name: String,
        task: String,
    },
    /// This (child) run ended: settle the parent's delegation row and
    /// resume the parent if nothing else of it is open.
    FinishDelegation {
        parent_run_id: RunId,
        call_id: ToolCallId,
        status: ToolCallStatus,
        result: Value,
    },
    /// The result a settled (answered) call finally had, without changing
    /// its status.
    RecordToolResult { id: ToolCallId, result: Value },
    /// The run waits for its open requests; the lease is released.
    WaitRun,
    /// The run ends; the lease is released.
    FinishRun {
        status: RunStatus,
        output: Option<String>,
        error: Option<String>,
    },
    /// One attempt of the segment failed; counted so that a crash loop also
    /// ends.
    RecordFailure { error: String },
}

impl Store {
    /// Applies `changes` in one transaction if `lease` still holds the run,
    /// extending the lease. Returns the outbox rows written, for the caller
    /// to publish. `Error::LeaseLost` when the lease ran out or was taken.
    pub async fn commit(&self, lease: &Lease, changes: &[Change]) -> Result<Vec<OutboxRow>> {
        crate::error::retry_conflicts(|| self.commit_once(lease, changes)).await
    }

    async fn commit_once(&self, lease: &Lease, changes: &[Change]) -> Result<Vec<OutboxRow>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        // A new journal entry is progress: the attempts of the step that
        // made it start over.
        let progress = changes.iter().any(|c| matches!(c, Change::Journal { .. }));
        fence(&tx, lease, progress).await?;
        let mut outbox = Vec::new();
        for change in changes {
            if let Some(row) = apply(&tx, lease.run_id, lease.thread_id, change).await? {
                outbox.push(row);
            }
        }
        tx.commit().await?;
        Ok(outbox)
    }
}

/// Extends the lease if it is still this worker's; the row lock taken here
/// also orders concurrent writers of the same run.
async fn fence(tx: &Transaction<'_>, lease: &Lease, progress: bool) -> Result<()> {
    let stmt = tx
        .prepare_cached(
            "UPDATE runs SET lease_expires_at = now() + $3 * interval '1 millisecond', updated_at = now(),
                    attempts = CASE WHEN $4 THEN 0 ELSE attempts END
             WHERE id = $1 AND lease_token = $2 AND lease_expires_at > now() AND status = 'running'",
        )
        .await?;
    let n = tx
        .execute(
            &stmt,
            &[
                &lease.run_id.0,
                &lease.token,
                &(lease.ttl_ms as f64),
                &progress,
            ],
        )
        .await?;
    if n == 1 {
        Ok(())
    } else {
        Err(Error::LeaseLost {
            run_id: lease.run_id.to_string(),
        })
    }
}

/// Resumes a waiting run whose requests and children are all settled: the
/// run is queued with a new segment seq, whose segment goes to the outbox.
/// Callers hold the run's row lock.
pub(crate) async fn resume_if_settled(tx: &Transaction<'_>, run: RunId) -> Result<Vec<OutboxRow>> {
    let stmt = tx
        .prepare_cached(
            "SELECT (SELECT count(*) FROM tool_calls WHERE run_id = $1 AND status = 'pending_approval')
                  + (SELECT count(*) FROM runs WHERE parent_run_id = $1
                                              AND status IN ('queued', 'running', 'waiting'))",
        )
        .await?;
    let open: i64 = tx.query_one(&stmt, &[&run.0]).await?.get(0);
    if open > 0 {
        return Ok(vec![]);
    }
    let stmt = tx
        .prepare_cached(
            "UPDATE runs SET status = 'queued', segment_seq = segment_seq + 1, updated_at = now()
             WHERE id = $1 AND status = 'waiting'
             RETURNING segment_seq",
        )
        .await?;
    let Some(resumed) = tx.query_opt(&stmt, &[&run.0]).await? else {
        return Ok(vec![]);
    };
    let segment = QueueMessage::Segment {
        run_id: run,
        seq: resumed.get(0),
    };
    Ok(vec![outbox::insert(tx, &segment, 0).await?])
}

pub(crate) async fn insert_event(
    tx: &Transaction<'_>,
    thread: ThreadId,
    run: Option<RunId>,
    event_type: EventType,
    data: &Value,
) -> Result<i64> {
    let stmt = tx
        .prepare_cached(
            "INSERT INTO events (thread_id, run_id, type, data) VALUES ($1, $2, $3, $4) RETURNING id",
        )
        .await?;
    let row = tx
        .query_one(
            &stmt,
            &[&thread.0, &run.map(|r| r.0), &event_type.as_str(), data],
        )
        .await?;
    Ok(row.get(0))
}

pub(crate) async fn insert_message(
    tx: &Transaction<'_>,
    thread: ThreadId,
    run: RunId,
    message: &Message,
) -> Result<()> {
    let stmt = tx
        .prepare_cached("INSERT INTO messages (thread_id, run_id, body) VALUES ($1, $2, $3)")
        .await?;
    let body = serde_json::to_value(message)?;
    tx.execute(&stmt, &[&thread.0, &run.0, &body]).await?;
    Ok(())
}

async fn apply(
    tx: &Transaction<'_>,
    run: RunId,
    thread: ThreadId,
    change: &Change,
) -> Result<Option<OutboxRow>> {
    match change {
        Change::Journal {
            position,
            name,
            value,
        } => {
            let stmt = tx
                .prepare_cached(
                    "INSERT INTO journal (run_id, position, name, value) VALUES ($1, $2, $3, $4)",
                )
                .await?;
            tx.execute(&stmt, &[&run.0, &(*position as i32), name, value])
                .await?;
        }
        Change::Message(message) => insert_message(tx, thread, run, message).await?,
        Change::Event { event_type, data } => {
            insert_event(tx, thread, Some(run), *event_type, data).await?;
        }
        Change::Usage { model_call, usage } => {
            let stmt = tx
                .prepare_cached(
                    "INSERT INTO usage (run_id, model_call, input_tokens, output_tokens) VALUES ($1, $2, $3, $4)",
                )
                .await?;
            tx.execute(
                &stmt,
                &[
                    &run.0,
                    &(*model_call as i32),
                    &(usage.input_tokens as i64),
                    &(usage.output_tokens as i64),
                ],
            )
            .await?;
        }
        Change::ProposeToolCall {
            id,
            name,
            arguments,
            kind,
        } => {
            let stmt = tx
                .prepare_cached(
                    "INSERT INTO tool_calls (run_id, id, thread_id, name, arguments, kind, tool_type, status)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, 'proposed')",
                )
                .await?;
            tx.execute(
                &stmt,
                &[
                    &run.0,
                    &id.as_str(),
                    &thread.0,
                    name,
                    arguments,
                    &kind.as_str(),
                    &kind.tool_type(),
                ],
            )
            .await?;
        }
        Change::SettleToolCall { id, status, result } => {
            let sources: Vec<&str> = ToolCallStatus::ALL
                .iter()
                .filter(|from| from.can_become(*status))
                .map(|from| from.as_str())
                .collect();
            let stmt = tx
                .prepare_cached(
                    "UPDATE tool_calls SET status = $3, result = $4
                     WHERE run_id = $1 AND id = $2 AND status = ANY($5)",
                )
                .await?;
            let n = tx
                .execute(
                    &stmt,
                    &[&run.0, &id.as_str(), &status.as_str(), result, &sources],
                )
                .await?;
            if n != 1 {
                return Err(Error::Corrupt(format!(
                    "tool call {id} of run {run} cannot become {status}"
                )));
            }
        }
        Change::Outbox { message, delay_ms } => {
            return Ok(Some(outbox::insert(tx, message, *delay_ms).await?));
        }
        Change::ParkToolCall {
            id,
            kind,
            reason,
            arguments,
            expires_at,
        } => {
            let stmt = tx
                .prepare_cached(
                    "UPDATE tool_calls SET status = 'pending_approval', reason = $3, expires_at = $4,
                            kind = $5, tool_type = $6, arguments = COALESCE($7, arguments)
                     WHERE run_id = $1 AND id = $2 AND status = 'proposed'",
                )
                .await?;
            let n = tx
                .execute(
                    &stmt,
                    &[
                        &run.0,
                        &id.as_str(),
                        reason,
                        expires_at,
                        &kind.as_str(),
                        &kind.tool_type(),
                        arguments,
                    ],
                )
                .await?;
            if n != 1 {
                return Err(Error::Corrupt(format!(
                    "tool call {id} of run {run} is not proposed and cannot park"
                )));
            }
        }
        Change::StartChild {
            call_id,
            child_run_id,
            name,
            task,
        } => {
            let stmt = tx
                .prepare_cached(
                    "INSERT INTO runs (id, thread_id, root_run_id, parent_run_id, parent_tool_call_id,
                                       name, depth, status, segment_seq)
                     SELECT $1, thread_id, root_run_id, id, $3, $4, depth + 1, 'queued', 1
                     FROM runs WHERE id = $2
                     RETURNING depth",
                )
                .await?;
            let depth: i32 = tx
                .query_one(&stmt, &[&child_run_id.0, &run.0, &call_id.as_str(), name])
                .await?
                .get(0);
            insert_message(
                tx,
                thread,
                *child_run_id,
                &Message::User {
                    content: task.clone(),
                },
            )
            .await?;
            insert_event(
                tx,
                thread,
                Some(*child_run_id),
                EventType::RunStarted,
                &serde_json::json!({
                    "runId": child_run_id,
                    "runName": name,
                    "depth": depth,
                    "parentRunId": run,
                    "parentToolCallId": call_id,
                }),
            )
            .await?;
            let segment = QueueMessage::Segment {
                run_id: *child_run_id,
                seq: 1,
            };
            return Ok(Some(outbox::insert(tx, &segment, 0).await?));
        }
        Change::FinishDelegation {
            parent_run_id,
            call_id,
            status,
            result,
        } => {
            // Lock the parent like an answer does, so that two children
            // finishing at once see each other and exactly one resumes it.
            // NO KEY UPDATE, not UPDATE: each sibling already holds a KEY
            // SHARE lock on the parent (the foreign-key check of its second
            // update of its own row in this transaction), and FOR UPDATE
            // would wait on every sibling's, which wait on ours: a deadlock.
            let stmt = tx
                .prepare_cached("SELECT 1 FROM runs WHERE id = $1 FOR NO KEY UPDATE")
                .await?;
            tx.query_one(&stmt, &[&parent_run_id.0]).await?;
            let stmt = tx
                .prepare_cached(
                    "UPDATE tool_calls SET status = $3, result = $4
                     WHERE run_id = $1 AND id = $2 AND status = 'proposed'",
                )
                .await?;
            tx.execute(
                &stmt,
                &[
                    &parent_run_id.0,
                    &call_id.as_str(),
                    &status.as_str(),
                    result,
                ],
            )
            .await?;
            return Ok(resume_if_settled(tx, *parent_run_id)
                .await?
                .into_iter()
                .next());
        }
        Change::RecordParkRequest { id, request } => {
            let stmt = tx
                .prepare_cached(
                    "UPDATE tool_calls SET park_request = $3
                     WHERE run_id = $1 AND id = $2 AND status = 'proposed'",
                )
                .await?;
            tx.execute(&stmt, &[&run.0, &id.as_str(), request]).await?;
        }
        Change::RecordToolResult { id, result } => {
            let stmt = tx
                .prepare_cached("UPDATE tool_calls SET result = $3 WHERE run_id = $1 AND id = $2")
                .await?;
            tx.execute(&stmt, &[&run.0, &id.as_str(), result]).await?;
        }
        Change::WaitRun => {
            let stmt = tx
                .prepare_cached(
                    "UPDATE runs SET status = 'waiting', updated_at = now(),
                            lease_owner = NULL, lease_expires_at = NULL
                     WHERE id = $1 AND status = 'running'",
                )
                .await?;
            if tx.execute(&stmt, &[&run.0]).await? != 1 {
                return Err(Error::Corrupt(format!("run {run} cannot wait")));
            }
        }
        Change::FinishRun {
            status,
            output,
            error,
        } => {
            let sources = RunStatus::sources_of(*status);
            let stmt = tx
                .prepare_cached(
                    "UPDATE runs SET status = $2, output = $3, error = $4, finished_at = now(),
                            updated_at = now(), lease_owner = NULL, lease_expires_at = NULL
                     WHERE id = $1 AND status = ANY($5)",
                )
                .await?;
            let n = tx
                .execute(&stmt, &[&run.0, &status.as_str(), output, error, &sources])
                .await?;
            if n != 1 {
                return Err(Error::Corrupt(format!("run {run} cannot become {status}")));
            }
        }
        Change::RecordFailure { error } => {
            let stmt = tx
                .prepare_cached("UPDATE runs SET attempts = attempts + 1, error = $2 WHERE id = $1")
                .await?;
            tx.execute(&stmt, &[&run.0, error]).await?;
        }
    }
    Ok(None)
}
