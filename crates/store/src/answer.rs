//! Answers to open requests, and stopping a thread's run tree.
//!
//! An answer is one transaction: the run row is locked (so answers to
//! sibling requests settle one after another and exactly one of them sees
//! the last request close), the row is settled by one conditional update
//! (first answer wins), `INPUT_RESOLVED` is written, and when no request of
//! the run is left open the resume segment goes into the outbox.

use agentenkit_core::reply::{reduce, refusal, ReplyError, SettledReply, Verdict};
use agentenkit_core::{EventType, Owner, RunId, ThreadId, ToolCallId, ToolCallStatus, ToolKind};
use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::commit::{insert_event, resume_if_settled};
use crate::outbox::OutboxRow;
use crate::{Error, Result, Store};

/// How a reply names the request it answers.
#[derive(Debug, Clone, Copy)]
pub enum AnswerTarget {
    /// `approve`/`reject`/`answer`/`skip`: by run and call id.
    Run(RunId),
    /// `respond`: by thread and call id (the open one of the current run
    /// tree when call ids repeat across turns).
    Thread(ThreadId),
}

/// What became of a reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    pub delivered: bool,
    pub error: Option<String>,
    /// The resume segment, when this reply closed the run's last request.
    pub outbox: Vec<OutboxRow>,
}

impl Answered {
    fn refused(reason: &str) -> Self {
        Answered {
            delivered: false,
            error: Some(reason.to_owned()),
            outbox: vec![],
        }
    }
}

/// The open-or-not row a reply is addressed to.
#[derive(Debug, Clone)]
pub(crate) struct ReplyTarget {
    pub run_id: RunId,
    pub thread_id: ThreadId,
    pub status: ToolCallStatus,
    pub kind: ToolKind,
    pub tool_name: String,
    pub current: bool,
    pub arguments: Value,
}

impl Store {
    /// Settles an open request with `verdict` on behalf of `owner`.
    /// `NotFound` when the owner has no such call, or it has not parked yet
    /// (an answer can never arrive for a call the history does not have).
    pub async fn answer(
        &self,
        owner: &Owner,
        target: AnswerTarget,
        call: &ToolCallId,
        verdict: &Verdict,
    ) -> Result<Answered> {
        crate::error::retry_conflicts(|| self.answer_once(owner, target, call, verdict)).await
    }

    async fn answer_once(
        &self,
        owner: &Owner,
        target: AnswerTarget,
        call: &ToolCallId,
        verdict: &Verdict,
    ) -> Result<Answered> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let row = locate(&tx, owner, target, call).await?;
        // Serialize replies to the requests of one run.
        let stmt = tx
            .prepare_cached("SELECT status FROM runs WHERE id = $1 FOR NO KEY UPDATE")
            .await?;
        tx.query_one(&stmt, &[&row.run_id.0]).await?;
        let row = locate(&tx, owner, AnswerTarget::Run(row.run_id), call).await?;
        // The kind of wait decides what a reply means; a reply of the
        // wrong shape, or answers that do not fit, record nothing.
        let mut reply = reduce(row.kind, verdict, &row.arguments).map_err(|e| match e {
            ReplyError::Mismatch => Error::ReplyMismatch {
                kind: row.kind.to_string(),
            },
            ReplyError::InvalidAnswers(issues) => Error::InvalidAnswers(issues),
        })?;
        if let Some(reason) = refusal(row.status, row.current) {
            return Ok(Answered::refused(reason));
        }
        // Questions keep their resolved answers in `payload`; a rejection
        // keeps the denial the model will see in `result`.
        let (payload, result) = match (&reply.answers, reply.denial()) {
            (Some(answers), _) => (Some(serde_json::to_value(answers)?), reply.answers_result()),
            (None, denial) => (reply.payload.clone(), denial),
        };
        let stmt = tx
            .prepare_cached(
                "UPDATE tool_calls SET status = $3, payload = $4, result = $5,
                        answered_by = $6, answered_at = now(), defaulted = $7
                 WHERE run_id = $1 AND id = $2 AND status = 'pending_approval'
                 RETURNING answered_at",
            )
            .await?;
        let Some(updated) = tx
            .query_opt(
                &stmt,
                &[
                    &row.run_id.0,
                    &call.as_str(),
                    &reply.status.as_str(),
                    &payload,
                    &result,
                    &owner.as_str(),
                    &reply.defaulted,
                ],
            )
            .await?
        else {
            return Ok(Answered::refused("This request was already answered"));
        };
        reply.answered_by = Some(owner.to_string());
        reply.answered_at = Some(updated.get::<_, DateTime<Utc>>(0));
        // The request's expiry has nothing left to do: its row goes (the
        // message itself, if already in the broker, is dropped on arrival).
        crate::outbox::consumed(
            &tx,
            &agentenkit_core::QueueMessage::Expiry {
                run_id: row.run_id,
                tool_call_id: call.clone(),
            },
        )
        .await?;
        let outbox = settle(&tx, &row, call, &reply).await?;
        tx.commit().await?;
        Ok(Answered {
            delivered: true,
            error: None,
            outbox,
        })
    }

    /// A proposed call's recorded park request (see `RecordParkRequest`).
    /// Returned with the call's status, in one query: what a function call
    /// needs to know before it runs.
    pub async fn park_request(
        &self,
        run: RunId,
        call: &ToolCallId,
    ) -> Result<(ToolCallStatus, Option<Value>)> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT status, park_request FROM tool_calls WHERE run_id = $1 AND id = $2",
            )
            .await?;
        let row = client
            .query_opt(&stmt, &[&run.0, &call.as_str()])
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "tool call",
                id: call.to_string(),
            })?;
        Ok((row.get::<_, &str>(0).parse()?, row.get(1)))
    }

    /// The settled reply of a call, or its status while it is not settled.
    pub async fn tool_call_reply(
        &self,
        run: RunId,
        call: &ToolCallId,
    ) -> Result<std::result::Result<SettledReply, ToolCallStatus>> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT status, payload, result, answered_by, answered_at, kind, defaulted
                 FROM tool_calls WHERE run_id = $1 AND id = $2",
            )
            .await?;
        let row = client
            .query_opt(&stmt, &[&run.0, &call.as_str()])
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "tool call",
                id: call.to_string(),
            })?;
        settled_reply(
            row.get::<_, &str>(0).parse()?,
            row.get::<_, &str>(5).parse()?,
            row.get(1),
            row.get::<_, Option<Value>>(2).as_ref(),
            row.get(6),
            row.get(3),
            row.get(4),
        )
    }

    /// Stops the thread's current run tree: every active run of it is
    /// cancelled, its open requests with it, in one transaction. A worker
    /// still advancing the run loses its lease and commits nothing more.
    /// Returns the runs stopped (none when the thread was idle).
    pub async fn stop_thread(&self, thread: ThreadId, owner: &Owner) -> Result<Vec<RunId>> {
        crate::error::retry_conflicts(|| self.stop_thread_once(thread, owner)).await
    }

    async fn stop_thread_once(&self, thread: ThreadId, owner: &Owner) -> Result<Vec<RunId>> {
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
            return Ok(vec![]);
        };
        let stmt = tx
            .prepare_cached(
                "UPDATE runs SET status = 'cancelled', finished_at = now(), updated_at = now(),
                        lease_owner = NULL, lease_expires_at = NULL, error = 'stopped'
                 WHERE root_run_id = $1 AND status IN ('queued', 'running', 'waiting')
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
        let stmt = tx
            .prepare_cached(
                "UPDATE tool_calls SET status = 'cancelled'
                 WHERE run_id = ANY($1) AND status IN ('proposed', 'pending_approval')",
            )
            .await?;
        tx.execute(&stmt, &[&stopped]).await?;
        for run in &stopped {
            insert_event(
                &tx,
                thread,
                Some(RunId(*run)),
                EventType::RunCancelled,
                &json!({ "runId": run, "reason": "stopped" }),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(stopped.into_iter().map(RunId).collect())
    }
}

/// Finds the addressed row among the owner's calls, preferring the one in
/// the thread's current run tree.
async fn locate(
    tx: &Transaction<'_>,
    owner: &Owner,
    target: AnswerTarget,
    call: &ToolCallId,
) -> Result<ReplyTarget> {
    // Two statements rather than one with `run_id = $3 OR thread_id = $4`:
    // a generic plan of the OR scans every call with this id (bench finding).
    const SELECT: &str = "SELECT tc.run_id, tc.thread_id, tc.status, tc.kind, tc.name, tc.arguments,
               (r.root_run_id = t.current_run_id AND r.status IN ('queued', 'running', 'waiting')) AS current
        FROM tool_calls tc
        JOIN runs r ON r.id = tc.run_id
        JOIN threads t ON t.id = tc.thread_id";
    const ORDER: &str =
        "ORDER BY current DESC, (tc.status = 'pending_approval') DESC, tc.created_at DESC LIMIT 1";
    let row = match target {
        AnswerTarget::Run(run) => {
            let stmt = tx
                .prepare_cached(&format!(
                    "{SELECT} WHERE tc.run_id = $1 AND tc.id = $2 AND t.owner = $3 AND tc.status <> 'proposed' {ORDER}"
                ))
                .await?;
            tx.query_opt(&stmt, &[&run.0, &call.as_str(), &owner.as_str()])
                .await?
        }
        AnswerTarget::Thread(thread) => {
            let stmt = tx
                .prepare_cached(&format!(
                    "{SELECT} WHERE tc.thread_id = $1 AND tc.id = $2 AND t.owner = $3 AND tc.status <> 'proposed' {ORDER}"
                ))
                .await?;
            tx.query_opt(&stmt, &[&thread.0, &call.as_str(), &owner.as_str()])
                .await?
        }
    }
    .ok_or_else(|| Error::NotFound {
        what: "tool call",
        id: call.to_string(),
    })?;
    Ok(ReplyTarget {
        run_id: RunId(row.get(0)),
        thread_id: ThreadId(row.get(1)),
        status: row.get::<_, &str>(2).parse()?,
        kind: row.get::<_, &str>(3).parse()?,
        tool_name: row.get(4),
        arguments: row.get(5),
        current: row.get(6),
    })
}

/// After a row settled: `INPUT_RESOLVED`, and the resume segment when it was
/// the run's last open request. Shared by answers and expiry.
pub(crate) async fn settle(
    tx: &Transaction<'_>,
    row: &ReplyTarget,
    call: &ToolCallId,
    reply: &SettledReply,
) -> Result<Vec<OutboxRow>> {
    let mut data = serde_json::to_value(reply)?;
    if let Value::Object(map) = &mut data {
        map.insert("runId".into(), json!(row.run_id));
        map.insert("toolCallId".into(), json!(call));
        map.insert("toolName".into(), json!(row.tool_name));
    }
    insert_event(
        tx,
        row.thread_id,
        Some(row.run_id),
        EventType::InputResolved,
        &data,
    )
    .await?;
    resume_if_settled(tx, row.run_id).await
}

/// A settled row's reply, or its status while it is not settled.
pub(crate) fn settled_reply(
    status: ToolCallStatus,
    kind: ToolKind,
    payload: Option<Value>,
    result: Option<&Value>,
    defaulted: Option<Vec<String>>,
    answered_by: Option<String>,
    answered_at: Option<DateTime<Utc>>,
) -> Result<std::result::Result<SettledReply, ToolCallStatus>> {
    if matches!(
        status,
        ToolCallStatus::Proposed | ToolCallStatus::PendingApproval
    ) {
        return Ok(Err(status));
    }
    // Questions keep their resolved answers in `payload`.
    let (payload, answers) = if kind == ToolKind::Ask {
        (None, payload.map(serde_json::from_value).transpose()?)
    } else {
        (payload, None)
    };
    Ok(Ok(SettledReply {
        status,
        approved: status == ToolCallStatus::Executed,
        payload,
        answers,
        defaulted,
        reason: result
            .and_then(|r| r.get("reason"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        answered_by,
        answered_at,
    }))
}
