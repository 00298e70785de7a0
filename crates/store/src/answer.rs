//! Answers to open requests.
//!
//! An answer is one transaction: the run row is locked (so answers to
//! sibling requests settle one after another and exactly one of them sees
//! the last request close), the row is settled by one conditional update
//! (first answer wins), `INPUT_RESOLVED` is written, and when no request of
//! the run is left open the resume segment goes into the outbox.

use agentenkit_core::answer_rules::{Addressed, AnswerError, Ruling};
use agentenkit_core::approvals::Vote;
use agentenkit_core::reply::SettledReply;
use agentenkit_core::{
    CallEvent, EventType, KeyScopes, Owner, QueueMessage, RunId, ThreadId, ToolCallId,
};
use serde_json::{json, Value};

use crate::event_insert::{event_ops, returned_outbox};
use crate::format::event::RowFields;
use crate::outbox::OutboxRow;
use crate::pipeline::{Op, OpenTx};
use crate::{Error, Result, Store};

mod locate;
pub use locate::AddressedTool;
pub(crate) use locate::ReplyTarget;
use locate::{locate, lock_and_locate};

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
    /// How long the request waited for this reply, when delivered.
    pub waited: Option<std::time::Duration>,
    /// The resume segment, when this reply closed the run's last request.
    pub outbox: Vec<OutboxRow>,
    /// For a call that needs several approvals, when this one was counted
    /// and more are needed: `(given, required)`.
    pub approvals: Option<(u32, u32)>,
}

impl Answered {
    fn refused(reason: &str) -> Self {
        Answered {
            delivered: false,
            error: Some(reason.to_owned()),
            waited: None,
            outbox: vec![],
            approvals: None,
        }
    }
}

/// An open transaction holding the run's lock, with the call an answer
/// addresses as read under it ([`LockedCall::addressed`]). The caller
/// decides the answer by the rules of `agentenkit_core::answer_rules` on
/// what it read, then [`LockedCall::write`]s the ruling; dropped, it rolls
/// back.
pub struct LockedCall<'s> {
    store: &'s Store,
    tx: OpenTx,
    call: ToolCallId,
    owner: Owner,
    row: ReplyTarget,
    answered_at: chrono::DateTime<chrono::Utc>,
}

impl LockedCall<'_> {
    /// The call as read under the lock.
    pub fn addressed(&self) -> Addressed<'_> {
        Addressed {
            kind: self.row.kind,
            status: self.row.status,
            current: self.row.current,
            moved_on: self.row.moved_on,
            tool_name: &self.row.tool_name,
            arguments: &self.row.arguments,
            votes: &self.row.approvals,
            agent: &self.row.run_name,
            agent_version: self.row.agent_version.as_deref(),
            answered_at: self.answered_at,
        }
    }

    /// The trace the call's run was started under, when it was traced.
    pub fn trace(&self) -> Option<&agentenkit_core::TraceContext> {
        self.row.trace.as_ref()
    }

    /// Writes `ruling` and commits (a refusal writes nothing), recording a
    /// batch item's result with it; then publishes what the commit put in
    /// the outbox (the resume segment, when the answer closed the run's
    /// last request).
    pub async fn write(
        self,
        ruling: Result<Ruling, AnswerError>,
        record: Option<crate::idempotency::RecordedItem<'_>>,
    ) -> Result<Answered> {
        let ruling = match ruling {
            Ok(ruling) => ruling,
            Err(refused) => {
                self.tx.rollback().await?;
                return Err(refused.into());
            }
        };
        let notify = self.store.notify_rule();
        let (ops, approvals, waited) = match &ruling {
            Ruling::Refused(reason) => {
                self.tx.rollback().await?;
                return Ok(Answered::refused(reason));
            }
            Ruling::Vote {
                votes,
                given,
                required,
            } => {
                let mut ops = vote_ops(&self.row, &self.call, votes, (*given, *required), notify)?;
                // A batch retried answers this item as it was answered.
                let counted = json!({
                    "delivered": true,
                    "approvals": { "given": given, "required": required },
                });
                ops.extend(record.map(|item| item.op_with(&self.owner, counted)));
                (ops, Some((*given, *required)), None)
            }
            Ruling::Settle(reply) => {
                let mut ops = settle_ops(&self.row, &self.call, reply, notify)?;
                ops.extend(record.map(|item| item.op(&self.owner)));
                let waited = std::time::Duration::from_secs_f64(self.row.waited_secs.max(0.0));
                (ops, None, Some(waited))
            }
        };
        let outbox = returned_outbox(self.tx.commit_with(ops).await?)?;
        self.store.publish(&outbox).await;
        Ok(Answered {
            delivered: true,
            error: None,
            waited,
            outbox,
            approvals,
        })
    }
}

impl From<AnswerError> for Error {
    fn from(refused: AnswerError) -> Self {
        match refused {
            AnswerError::Forbidden { missing } => Error::Forbidden { missing },
            AnswerError::PinnedToOtherVersion { agent, version } => {
                Error::PinnedToOtherVersion { agent, version }
            }
            AnswerError::Mismatch { kind } => Error::ReplyMismatch {
                kind: kind.to_string(),
            },
            AnswerError::InvalidAnswers(issues) => Error::InvalidAnswers(issues),
            AnswerError::CannotEdit { kind } => Error::CannotEdit { kind },
            AnswerError::ArgumentsHashMismatch { expected, actual } => {
                Error::ArgumentsHashMismatch { expected, actual }
            }
            AnswerError::InvalidArguments(issues) => Error::InvalidArguments(issues),
            AnswerError::NotAnApprover { groups } => Error::NotAnApprover { groups },
        }
    }
}

impl Store {
    /// Opens the answer's transaction: the run's row lock (which
    /// serializes replies to its requests, expiries, and the worker's
    /// fence), and the addressed call read after it. `NotFound` when the
    /// owner has no such call, or it has not parked yet. A caller that
    /// may meet a conflict runs this and what follows in
    /// [`retry_conflicts`].
    pub async fn lock_answer(
        &self,
        owner: &Owner,
        target: AnswerTarget,
        call: &ToolCallId,
        scopes: Option<KeyScopes>,
    ) -> Result<LockedCall<'_>> {
        let run = self.run_to_lock(owner, target, call, scopes).await?;
        let tx = OpenTx::new(self.client().await?);
        let Some((answered_at, row)) = lock_and_locate(&tx, run, call, owner).await? else {
            tx.rollback().await?;
            return Err(Error::NotFound {
                what: "tool call",
                id: call.to_string(),
            });
        };
        Ok(LockedCall {
            store: self,
            tx,
            call: call.clone(),
            owner: owner.clone(),
            row,
            answered_at,
        })
    }

    /// The run whose row an answer locks: a thread's call is found first,
    /// outside the transaction, and read again in its run once it is locked.
    async fn run_to_lock(
        &self,
        owner: &Owner,
        target: AnswerTarget,
        call: &ToolCallId,
        scopes: Option<KeyScopes>,
    ) -> Result<RunId> {
        Ok(match target {
            AnswerTarget::Run(run) => run,
            AnswerTarget::Thread(_) => {
                let client = self.client().await?;
                locate(&client, owner, target, call, scopes).await?.run_id
            }
        })
    }
}

/// The statement that writes `event` on the waiting call `row`, once the
/// call's state takes it: waiting, as read under the lock nobody else
/// writes it without.
fn changed(row: &ReplyTarget, call: &ToolCallId, event: CallEvent) -> Result<Op> {
    row.waiting().apply(event.clone())?;
    crate::calls::write_one(row.run_id, call, &event)
}

/// The statements that count one more approval of `row`, which needs
/// more: the votes so far, and `APPROVAL_RECORDED` saying how many.
fn vote_ops(
    row: &ReplyTarget,
    call: &ToolCallId,
    votes: &[Vote],
    (given, required): (u32, u32),
    notified: crate::event_insert::NotifyRule<'_>,
) -> Result<Vec<Op>> {
    let last = votes.last();
    let vote = CallEvent::Vote {
        votes: votes.to_vec(),
    };
    let mut ops = vec![changed(row, call, vote)?];
    ops.extend(event_ops(
        row.thread_id,
        Some(row.run_id),
        EventType::ApprovalRecorded,
        json!({
            "runId": row.run_id,
            "toolCallId": call,
            "toolName": row.tool_name,
            "given": given,
            "required": required,
            "answeredBy": last.map(|v| &v.answered_by),
            "principal": last.map(|v| &v.principal),
        }),
        &RowFields::default(),
        notified,
    ));
    Ok(ops)
}

/// The statements that record `reply` to the open request `row`: the row
/// settles, its expiry's outbox row goes, then what every settled request
/// ends with ([`resolved_ops`]).
fn settle_ops(
    row: &ReplyTarget,
    call: &ToolCallId,
    reply: &SettledReply,
    notified: crate::event_insert::NotifyRule<'_>,
) -> Result<Vec<Op>> {
    let run = row.run_id;
    let answer = CallEvent::Answer {
        reply: Box::new(reply.clone()),
    };
    let mut ops = vec![
        changed(row, call, answer)?,
        // The request's expiry has nothing left to do: its row goes (the
        // message itself, if already in the broker, is dropped on arrival).
        crate::outbox::consumed_op(&QueueMessage::Expiry {
            run_id: run,
            tool_call_id: call.clone(),
        }),
    ];
    let settled = Settled {
        thread: row.thread_id,
        run,
        call,
        tool_name: &row.tool_name,
    };
    ops.extend(resolved_ops(settled, reply, notified)?);
    Ok(ops)
}

/// A request that just settled: which call, of which run and thread.
#[derive(Clone, Copy)]
pub(crate) struct Settled<'a> {
    pub thread: ThreadId,
    pub run: RunId,
    pub call: &'a ToolCallId,
    pub tool_name: &'a str,
}

/// What every settled request (answered or expired) ends its transaction
/// with: the run resumes if that was all it waited on, and
/// `INPUT_RESOLVED`, carrying the reply and the call it settled, last
/// (after every row lock, see `INSERT_EVENT_SQL`).
pub(crate) fn resolved_ops(
    settled: Settled<'_>,
    reply: &SettledReply,
    notified: crate::event_insert::NotifyRule<'_>,
) -> Result<Vec<Op>> {
    let mut data = serde_json::to_value(reply)?;
    if let Value::Object(map) = &mut data {
        map.insert("runId".into(), json!(settled.run));
        map.insert("toolCallId".into(), json!(settled.call));
        map.insert("toolName".into(), json!(settled.tool_name));
    }
    let mut ops = vec![crate::wait::resume_op(settled.run)];
    ops.extend(event_ops(
        settled.thread,
        Some(settled.run),
        EventType::InputResolved,
        data,
        &RowFields::default(),
        notified,
    ));
    Ok(ops)
}
