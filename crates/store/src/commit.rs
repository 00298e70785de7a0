//! The one write path of a worker: a list of changes applied in one
//! transaction, fenced by the worker's lease.

use agentenkit_core::conversation::Message;
use agentenkit_core::{
    EventType, QueueMessage, RunId, RunStatus, ThreadId, ToolCallId, ToolCallStatus, ToolKind,
};
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::call_insert::{insert_tool_call, NewCall};
use crate::event_insert::{event_item, event_op, item_op};
use crate::format::event::RowFields;
use crate::journal_insert::StoredJournal;
use crate::outbox::{self, OutboxRow};
use crate::pipeline::{self, Answer, Expect, Op, Param};
use crate::runs::Lease;
use crate::start::{start, NewRun};
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
        // A new journal entry is progress: the attempts of the step that
        // made it start over.
        let progress = changes.iter().any(|c| matches!(c, Change::Journal { .. }));
        // The fence first, then every change that is a plain statement; the
        // few that read before they write after them. A change that ends the
        // segment (the run waits or finishes) is the fence itself: one
        // update of the run row, not two.
        let end = changes
            .iter()
            .find(|c| matches!(c, Change::WaitRun | Change::FinishRun { .. }));
        let mut ops = vec![fence(lease, progress, end)];
        let mut messages: Vec<Option<(QueueMessage, u64)>> = vec![None];
        // Events go last, after every row lock (see INSERT_EVENT_SQL).
        let mut events = Vec::new();
        let mut journal = StoredJournal::of(changes)?;
        let parked_at_once = crate::parked_at_once::ParkedAtOnce::find(changes);
        let message_with_event = crate::message_with_event::MessageWithEvent::find(changes)?;
        for change in changes {
            if end.is_some_and(|end| std::ptr::eq(end, change))
                || parked_at_once.folds(change)
                || message_with_event.folds(change)
            {
                continue;
            }
            if let Some(op) =
                parked_at_once.insert_op(lease.run_id, lease.thread_id, change, &journal)
            {
                ops.push(op);
                messages.push(None);
                continue;
            }
            if let Some(item) = message_with_event.event_item(lease.run_id, change, &journal) {
                events.push(item_op(lease.thread_id, Some(lease.run_id), item));
                continue;
            }
            if let Change::Event { event_type, data } = change {
                let item = event_item(
                    Some(lease.run_id),
                    *event_type,
                    data.clone(),
                    &crate::event_rows::known_rows(lease, changes, data),
                );
                events.push(item_op(lease.thread_id, Some(lease.run_id), item));
                continue;
            }
            if let Change::StartChild {
                call_id,
                child_run_id,
                name,
                task,
            } = change
            {
                let started = start(&NewRun {
                    id: *child_run_id,
                    thread: lease.thread_id,
                    root: lease.root_run_id,
                    parent: Some((lease.run_id, call_id)),
                    name,
                    depth: lease.depth + 1,
                    task,
                })?;
                messages.extend(started.rows.iter().map(|_| None));
                ops.extend(started.rows);
                let (op, segment) = started.outbox;
                ops.push(op);
                messages.push(Some((segment, 0)));
                events.push(started.event);
                continue;
            }
            for (op, message) in plan(lease.run_id, lease.thread_id, change, &mut journal)? {
                ops.push(op);
                messages.push(message);
            }
        }
        // BEGIN, the statements and COMMIT in one round trip (the fence and
        // row checks abort it in the database).
        ops.extend(events);
        let answers = pipeline::transact(self.client().await?, ops).await?;
        let mut outbox = Vec::new();
        for (answer, message) in answers.into_iter().zip(messages) {
            match (answer, message) {
                (Answer::Ids(ids), Some((message, delay_ms))) => {
                    outbox.extend(ids.into_iter().map(|id| OutboxRow {
                        id,
                        message: message.clone(),
                        delay_ms,
                    }))
                }
                // A parent resumed by its child's end.
                (Answer::Rows(rows), _) => outbox.extend(crate::resume::outbox_rows(&rows)?),
                _ => {}
            }
        }
        Ok(outbox)
    }
}

impl Store {
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
        pipeline::transact(self.client().await?, ops).await?;
        Ok(())
    }
}

/// Extends the lease if it is still this worker's, or ends it with the
/// segment (`end`: the run waits, or finishes); the row lock taken here
/// also orders concurrent writers of the same run.
fn fence(lease: &Lease, progress: bool, end: Option<&Change>) -> Op {
    let mut params: Vec<Param> = vec![
        Box::new(lease.run_id.0),
        Box::new(lease.token),
        Box::new(progress),
    ];
    let sql = match end {
        Some(Change::WaitRun) => {
            "UPDATE runs SET status = 'waiting', updated_at = now(), lease_owner = NULL,
                    lease_expires_at = NULL, attempts = CASE WHEN $3 THEN 0 ELSE attempts END,
                    takeovers = CASE WHEN $3 THEN 0 ELSE takeovers END
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
                    updated_at = now(), lease_owner = NULL, lease_expires_at = NULL,
                    attempts = CASE WHEN $3 THEN 0 ELSE attempts END,
                    takeovers = CASE WHEN $3 THEN 0 ELSE takeovers END
             WHERE id = $1 AND lease_token = $2 AND lease_expires_at > now() AND status = 'running'
               AND status = ANY($7)"
        }
        _ => {
            params.push(Box::new(lease.ttl_ms as f64));
            "UPDATE runs SET lease_expires_at = now() + $4 * interval '1 millisecond', updated_at = now(),
                    attempts = CASE WHEN $3 THEN 0 ELSE attempts END,
                    takeovers = CASE WHEN $3 THEN 0 ELSE takeovers END
             WHERE id = $1 AND lease_token = $2 AND lease_expires_at > now() AND status = 'running'"
        }
    };
    Op::new(sql, params).expect(Expect::One(Error::LeaseLost {
        run_id: lease.run_id.to_string(),
    }))
}

/// A statement of a commit, and the message it puts in the outbox.
type Planned = (Op, Option<(QueueMessage, u64)>);

/// The statement(s) of a change.
fn plan(
    run: RunId,
    thread: ThreadId,
    change: &Change,
    journal: &mut StoredJournal,
) -> Result<Vec<Planned>> {
    let op = match change {
        Change::Journal { position, name, .. } => journal.insert_op(run, *position, name)?,
        Change::Message(message) => {
            let (body, body_position) = journal.message_body(serde_json::to_value(message)?);
            Op::new(
                "INSERT INTO messages (thread_id, run_id, body, body_position) VALUES ($1, $2, $3, $4)",
                vec![
                    Box::new(thread.0),
                    Box::new(run.0),
                    Box::new(body),
                    Box::new(body_position),
                ],
            )
        }
        Change::Event { event_type, data } => event_op(
            thread,
            Some(run),
            *event_type,
            data.clone(),
            &RowFields::default(),
        ),
        Change::ProposeToolCall {
            id,
            name,
            arguments,
            kind,
        } => insert_tool_call(
            run,
            thread,
            NewCall {
                id,
                name,
                kind: *kind,
                stored: journal.call_arguments(id.as_str(), arguments),
                parked: None,
            },
        ),
        Change::SettleToolCall { id, status, result } => {
            let sources: Vec<&'static str> = ToolCallStatus::ALL
                .iter()
                .filter(|from| from.can_become(*status))
                .map(|from| from.as_str())
                .collect();
            Op::new(
                "UPDATE tool_calls SET status = $3, result = $4
                 WHERE run_id = $1 AND id = $2 AND status = ANY($5)",
                vec![
                    Box::new(run.0),
                    Box::new(id.as_str().to_owned()),
                    Box::new(status.as_str()),
                    Box::new(result.clone()),
                    Box::new(sources),
                ],
            )
            .expect(Expect::One(Error::Corrupt(format!(
                "tool call {id} of run {run} cannot become {status}"
            ))))
        }
        Change::Outbox { message, delay_ms } => {
            let op = outbox::insert_op(message, *delay_ms);
            return Ok(vec![(op, Some((message.clone(), *delay_ms)))]);
        }
        Change::ParkToolCall {
            id,
            kind,
            reason,
            arguments,
            expires_at,
        } => Op::new(
            "UPDATE tool_calls SET status = 'pending_approval', reason = $3, expires_at = $4,
                    kind = $5, tool_type = $6, arguments = COALESCE($7, arguments)
             WHERE run_id = $1 AND id = $2 AND status = 'proposed'",
            vec![
                Box::new(run.0),
                Box::new(id.as_str().to_owned()),
                Box::new(reason.clone()),
                Box::new(*expires_at),
                Box::new(kind.as_str()),
                Box::new(kind.tool_type()),
                Box::new(arguments.clone()),
            ],
        )
        .expect(Expect::One(Error::Corrupt(format!(
            "tool call {id} of run {run} is not proposed and cannot park"
        )))),
        Change::RecordParkRequest { id, request } => Op::new(
            "UPDATE tool_calls SET park_request = $3
             WHERE run_id = $1 AND id = $2 AND status = 'proposed'",
            vec![
                Box::new(run.0),
                Box::new(id.as_str().to_owned()),
                Box::new(request.clone()),
            ],
        ),
        Change::RecordToolResult { id, result } => Op::new(
            "UPDATE tool_calls SET result = $3 WHERE run_id = $1 AND id = $2",
            vec![
                Box::new(run.0),
                Box::new(id.as_str().to_owned()),
                Box::new(result.clone()),
            ],
        ),
        // The end of a segment is the fence of its commit; a second one in
        // the same commit finds the run no longer running.
        Change::WaitRun => Op::new(
            "UPDATE runs SET status = 'waiting', updated_at = now(),
                    lease_owner = NULL, lease_expires_at = NULL
             WHERE id = $1 AND status = 'running'",
            vec![Box::new(run.0)],
        )
        .expect(Expect::One(Error::Corrupt(format!(
            "run {run} cannot wait"
        )))),
        Change::FinishRun { status, .. } => Op::new(
            "UPDATE runs SET status = status WHERE id = $1 AND status = 'running'",
            vec![Box::new(run.0)],
        )
        .expect(Expect::One(Error::Corrupt(format!(
            "run {run} cannot become {status}"
        )))),
        Change::RecordFailure { error } => Op::new(
            "UPDATE runs SET attempts = attempts + 1, error = $2 WHERE id = $1",
            vec![Box::new(run.0), Box::new(error.clone())],
        ),
        Change::FinishDelegation {
            parent_run_id,
            call_id,
            status,
            result,
        } => return Ok(finish_delegation(*parent_run_id, call_id, *status, result)),
        Change::StartChild { .. } => {
            return Err(Error::Corrupt(
                "a child run is started by its commit, not planned".into(),
            ))
        }
    };
    Ok(vec![(op, None)])
}

/// This (child) run ended: its parent's delegation row settles, and the
/// parent resumes if nothing else of it is open.
fn finish_delegation(
    parent: RunId,
    call_id: &ToolCallId,
    status: ToolCallStatus,
    result: &Value,
) -> Vec<Planned> {
    vec![
        // Lock the parent like an answer does, so that two children
        // finishing at once see each other and exactly one resumes it. NO
        // KEY UPDATE, not UPDATE: each sibling already holds a KEY SHARE
        // lock on the parent (the foreign-key check of its own row), and
        // FOR UPDATE would wait on every sibling's, which wait on ours.
        (
            Op::new(
                "SELECT 1 FROM runs WHERE id = $1 FOR NO KEY UPDATE",
                vec![Box::new(parent.0)],
            ),
            None,
        ),
        (
            Op::new(
                "UPDATE tool_calls SET status = $3, result = $4
                 WHERE run_id = $1 AND id = $2 AND status = 'proposed'",
                vec![
                    Box::new(parent.0),
                    Box::new(call_id.as_str().to_owned()),
                    Box::new(status.as_str()),
                    Box::new(result.clone()),
                ],
            ),
            None,
        ),
        (crate::resume::resume_op(parent), None),
    ]
}
