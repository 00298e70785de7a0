//! Answers to open requests.
//!
//! An answer is one transaction: the run row is locked (so answers to
//! sibling requests settle one after another and exactly one of them sees
//! the last request close), the row is settled by one conditional update
//! (first answer wins), `INPUT_RESOLVED` is written, and when no request of
//! the run is left open the resume segment goes into the outbox.

use agentenkit_core::approvals::{cast, ApprovalRule, Approver, Cast, Vote};
use agentenkit_core::canonical::arguments_hash;
use agentenkit_core::questions::Issue;
use agentenkit_core::reply::{reduce, refusal, ReplyError, SettledReply, Verdict};
use agentenkit_core::{
    CallEvent, EventType, KeyScope, KeyScopes, Owner, QueueMessage, RunId, ThreadId, ToolCallId,
    ToolKind,
};
use deadpool_postgres::Transaction;
use serde_json::{json, Value};

use crate::event_insert::{event_ops, insert_event, returned_outbox};
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

/// The issues of edited arguments against the input schema of the named
/// tool (none when they fit).
pub type EditCheck<'a> = dyn Fn(&str, &Value) -> Vec<Issue> + Send + Sync + 'a;

/// What an answer is checked against, under its run's lock, before it
/// settles anything.
#[derive(Default, Clone, Copy)]
pub struct AnswerChecks<'a> {
    /// The `argumentsHash` the person was shown: when the call's arguments
    /// hash otherwise, the answer is refused ([`Error::ArgumentsHashMismatch`]).
    pub arguments_hash: Option<&'a str>,
    /// The issues of edited arguments against the input schema of the
    /// named tool (none when they fit). Without it, edits are refused.
    pub edits: Option<&'a EditCheck<'a>>,
    /// A batch item's result, recorded under its idempotency key in the
    /// transaction that delivers the answer (nothing is recorded when the
    /// answer is refused).
    pub record: Option<crate::idempotency::RecordedItem<'a>>,
    /// The scopes of the caller's key: an answer to a request whose kind
    /// needs another scope is refused ([`Error::Forbidden`]). `None`
    /// allows every answer (a Rust caller).
    pub scopes: Option<KeyScopes>,
    /// Who the caller's key speaks for: its id (recorded with the
    /// decision), its holder and groups (multi-party approvals). `None`:
    /// the owner, as a key of `AGENTENKIT_API_KEYS`.
    pub approver: Option<&'a Approver>,
    /// Who must approve a call of the named tool (one person when absent).
    pub approval_rule: Option<&'a RuleOf<'a>>,
    /// The version of the named agent whose tools and rules `edits` and
    /// `approval_rule` check by. A request of a run pinned to another
    /// version is refused ([`Error::PinnedToOtherVersion`]) before anything
    /// is checked, for the caller to check by that version. `None`: no
    /// such check (a Rust caller that knows its agents).
    pub version_of: Option<&'a VersionOf<'a>>,
}

/// The version of the named agent a caller's checks implement.
pub type VersionOf<'a> = dyn Fn(&str) -> Option<String> + Send + Sync + 'a;

/// The approval rule of the named tool.
pub type RuleOf<'a> = dyn Fn(&str) -> ApprovalRule + Send + Sync + 'a;

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
        checks: AnswerChecks<'_>,
    ) -> Result<Answered> {
        let answered = crate::error::retry_conflicts(|| {
            self.answer_once(owner, target, call, verdict, checks)
        })
        .await?;
        self.publish(&answered.outbox).await;
        Ok(answered)
    }

    async fn answer_once(
        &self,
        owner: &Owner,
        target: AnswerTarget,
        call: &ToolCallId,
        verdict: &Verdict,
        checks: AnswerChecks<'_>,
    ) -> Result<Answered> {
        let run = self.run_to_lock(owner, target, call, checks.scopes).await?;
        let tx = OpenTx::new(self.client().await?);
        let Some((answered_at, row)) = lock_and_locate(&tx, run, call, owner).await? else {
            tx.rollback().await?;
            return Err(Error::NotFound {
                what: "tool call",
                id: call.to_string(),
            });
        };
        // A key that may not answer this kind of request learns nothing of
        // it, not even whether it is still open.
        if let Some(needed) = checks
            .scopes
            .zip(KeyScope::to_answer(row.kind))
            .and_then(|(scopes, needed)| (!scopes.allow(needed)).then_some(needed))
        {
            tx.rollback().await?;
            return Err(Error::Forbidden { missing: needed });
        }
        // A request no longer open refuses every reply, whatever its shape.
        if let Some(reason) = refusal(row.status, row.current) {
            tx.rollback().await?;
            return Ok(Answered::refused(reason));
        }
        // Checked by the tools and rules of the run's own version.
        if let (Some(version_of), Some(pinned)) = (checks.version_of, &row.agent_version) {
            if version_of(&row.run_name).as_ref() != Some(pinned) {
                tx.rollback().await?;
                return Err(Error::PinnedToOtherVersion {
                    agent: row.run_name.clone(),
                    version: pinned.clone(),
                });
            }
        }
        let mut reply =
            match reduce_reply(&row, verdict).and_then(|reply| checked(&row, reply, checks)) {
                Ok(reply) => reply,
                Err(e) => {
                    tx.rollback().await?;
                    return Err(e);
                }
            };
        let approver = checks.approver.cloned().unwrap_or_default();
        reply.answered_by = Some(owner.to_string());
        reply.key_id = approver.key_id.clone();
        let rule = match (row.kind, checks.approval_rule) {
            (ToolKind::Approval, Some(rule_of)) => rule_of(&row.tool_name),
            _ => ApprovalRule::default(),
        };
        // Only an approver may deny a call several people approve: one
        // deny settles it.
        if !rule.is_single()
            && !reply.approved
            && !rule.from.is_empty()
            && !approver.groups.iter().any(|g| rule.from.contains(g))
        {
            tx.rollback().await?;
            return Err(Error::NotAnApprover { groups: rule.from });
        }
        if !rule.is_single() && reply.approved {
            let vote = Vote {
                principal: approver.principal(owner.as_str()),
                key_id: approver.key_id.clone(),
                answered_by: owner.to_string(),
                answered_at,
                message: reply.message.clone(),
            };
            let mut votes = row.approvals.clone();
            let counted = cast(&rule, &votes, &vote.principal, &approver.groups);
            // What the tool gets is what was proposed: no approver edits
            // it, nor hands it a payload, alone.
            if counted != Cast::NotAnApprover
                && (reply.arguments.is_some() || reply.payload.is_some())
            {
                tx.rollback().await?;
                return Err(Error::CannotEdit {
                    kind: "multi-party approval".into(),
                });
            }
            if !votes.iter().any(|v| v.principal == vote.principal) {
                votes.push(vote);
            }
            match counted {
                Cast::NotAnApprover => {
                    tx.rollback().await?;
                    return Err(Error::NotAnApprover { groups: rule.from });
                }
                Cast::AlreadyGiven => {
                    tx.rollback().await?;
                    return Ok(Answered::refused("You have already approved this request"));
                }
                Cast::Counted { given, required } => {
                    let mut ops =
                        vote_ops(&row, call, &votes, (given, required), self.notify_rule())?;
                    // A batch retried answers this item as it was answered.
                    let counted = json!({
                        "delivered": true,
                        "approvals": { "given": given, "required": required },
                    });
                    ops.extend(checks.record.map(|item| item.op_with(owner, counted)));
                    let answers = tx.commit_with(ops).await?;
                    return Ok(Answered {
                        delivered: true,
                        error: None,
                        waited: None,
                        outbox: returned_outbox(answers)?,
                        approvals: Some((given, required)),
                    });
                }
                Cast::Complete => reply.approvals = Some(serde_json::to_value(&votes)?),
            }
        }
        reply.answered_at = Some(answered_at);
        let mut ops = settle_ops(&row, call, &reply, self.notify_rule())?;
        ops.extend(checks.record.map(|item| item.op(owner)));
        // The resume segment, when this was the run's last open request,
        // and the event's notification.
        let outbox = returned_outbox(tx.commit_with(ops).await?)?;
        Ok(Answered {
            delivered: true,
            error: None,
            waited: Some(std::time::Duration::from_secs_f64(row.waited_secs.max(0.0))),
            outbox,
            approvals: None,
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

/// What `verdict` means for the request `row` is: the kind of wait decides;
/// a reply of the wrong shape, or answers that do not fit, record nothing.
fn reduce_reply(row: &ReplyTarget, verdict: &Verdict) -> Result<SettledReply> {
    reduce(row.kind, verdict, &row.arguments).map_err(|e| match e {
        ReplyError::Mismatch => Error::ReplyMismatch {
            kind: row.kind.to_string(),
        },
        ReplyError::InvalidAnswers(issues) => Error::InvalidAnswers(issues),
        ReplyError::CannotEdit => Error::CannotEdit {
            kind: row.kind.to_string(),
        },
    })
}

/// `reply` once `checks` pass, with the hash of the arguments it decided on.
fn checked(
    row: &ReplyTarget,
    mut reply: SettledReply,
    checks: AnswerChecks<'_>,
) -> Result<SettledReply> {
    let hash = arguments_hash(&row.arguments);
    if let Some(expected) = checks.arguments_hash {
        if expected != hash {
            return Err(Error::ArgumentsHashMismatch {
                expected: expected.to_owned(),
                actual: hash,
            });
        }
    }
    if let Some(edited) = &reply.arguments {
        let issues = match checks.edits {
            Some(check) => check(&row.tool_name, edited),
            None => vec![Issue {
                path: String::new(),
                message: "edited arguments cannot be checked here (no tool schemas)".into(),
            }],
        };
        if !issues.is_empty() {
            return Err(Error::InvalidArguments(issues));
        }
    }
    reply.arguments_hash = Some(hash);
    Ok(reply)
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
    notified: crate::sent_here::NotifyRule<'_>,
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
/// settles, its expiry's outbox row goes, the run resumes if that was all
/// it waited on, and `INPUT_RESOLVED` last (after every row lock).
fn settle_ops(
    row: &ReplyTarget,
    call: &ToolCallId,
    reply: &SettledReply,
    notified: crate::sent_here::NotifyRule<'_>,
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
        crate::resume::resume_op(run),
    ];
    ops.extend(event_ops(
        row.thread_id,
        Some(run),
        EventType::InputResolved,
        resolved_event(row, call, reply)?,
        &RowFields::default(),
        notified,
    ));
    Ok(ops)
}

/// The data of `INPUT_RESOLVED`: the reply, and which call it settled.
fn resolved_event(row: &ReplyTarget, call: &ToolCallId, reply: &SettledReply) -> Result<Value> {
    let mut data = serde_json::to_value(reply)?;
    if let Value::Object(map) = &mut data {
        map.insert("runId".into(), json!(row.run_id));
        map.insert("toolCallId".into(), json!(call));
        map.insert("toolName".into(), json!(row.tool_name));
    }
    Ok(data)
}

/// After a row settled: `INPUT_RESOLVED`, and the resume segment when it was
/// the run's last open request. Shared by answers and expiry.
pub(crate) async fn settle(
    tx: &Transaction<'_>,
    row: &ReplyTarget,
    call: &ToolCallId,
    reply: &SettledReply,
    notified: crate::sent_here::NotifyRule<'_>,
) -> Result<Vec<OutboxRow>> {
    let data = resolved_event(row, call, reply)?;
    let mut outbox = crate::resume::resume_if_settled(tx, row.run_id).await?;
    // The event last, after every row lock (see INSERT_EVENT_SQL); the
    // caller commits right after.
    outbox.extend(
        insert_event(
            tx,
            row.thread_id,
            Some(row.run_id),
            EventType::InputResolved,
            &data,
            notified,
        )
        .await?,
    );
    Ok(outbox)
}
