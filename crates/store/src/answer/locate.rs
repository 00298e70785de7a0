//! Finding the request an answer is addressed to, under its run's lock.

use agentenkit_core::approvals::Vote;
use agentenkit_core::call::{CallState, Waiting};
use agentenkit_core::{
    KeyScope, KeyScopes, Owner, RunId, ThreadId, ToolCallId, ToolCallStatus, ToolKind, TraceContext,
};
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::AnswerTarget;
use crate::pipeline::{Answer, Expect, Op, OpenTx};
use crate::{Error, Result};

/// The open-or-not row a reply is addressed to.
#[derive(Debug, Clone)]
pub(crate) struct ReplyTarget {
    pub run_id: RunId,
    pub thread_id: ThreadId,
    pub status: ToolCallStatus,
    pub kind: ToolKind,
    pub tool_name: String,
    pub current: bool,
    /// The thread has started another turn since this call's.
    pub moved_on: bool,
    pub arguments: Value,
    /// Seconds since the row was written (the call was proposed and, for
    /// a request, parked in the same commit).
    pub waited_secs: f64,
    /// The approvals given so far, for a call that needs several.
    pub approvals: Vec<Vote>,
    /// The run's agent and the version of it the run is pinned to.
    pub run_name: String,
    pub agent_version: Option<String>,
    /// Why the call waits, and until when (when it waits).
    pub reason: Option<String>,
    pub expires_at: Option<DateTime<Utc>>,
    /// The trace the run was started under, when it was traced.
    pub trace: Option<TraceContext>,
}

impl ReplyTarget {
    /// The call's state, as a waiting call: what an answer or a vote is
    /// applied to once [`agentenkit_core::reply::refusal`] found it open.
    pub fn waiting(&self) -> CallState {
        CallState::Waiting(Waiting {
            kind: self.kind,
            reason: self.reason.clone().unwrap_or_default(),
            expires_at: self.expires_at,
            votes: self.approvals.clone(),
        })
    }
}

/// Opens the answer's transaction in one round trip: the run's row lock
/// (which serializes replies to its requests, expiries, and the worker's
/// fence), then, read after it, the addressed row. `None` when either is
/// missing; with the time the lock was taken, which the reply records.
pub(super) async fn lock_and_locate(
    tx: &OpenTx,
    run: RunId,
    call: &ToolCallId,
    owner: &Owner,
) -> Result<Option<(DateTime<Utc>, ReplyTarget)>> {
    let mut answers = tx
        .begin_with(vec![
            Op::new(
                "SELECT now() FROM runs WHERE id = $1 FOR NO KEY UPDATE",
                vec![Box::new(run.0)],
            )
            .expect(Expect::Rows),
            Op::new(
                LOCATE_IN_RUN,
                vec![
                    Box::new(run.0),
                    Box::new(call.as_str().to_owned()),
                    Box::new(owner.as_str().to_owned()),
                ],
            )
            .expect(Expect::Rows),
        ])
        .await?
        .into_iter()
        .map(Answer::rows);
    let (locked, located) = (answers.next(), answers.next());
    match (
        locked.as_ref().and_then(|rows| rows.first()),
        located.as_ref().and_then(|rows| rows.first()),
    ) {
        (Some(now), Some(row)) => Ok(Some((now.get(0), reply_target(row)?))),
        _ => Ok(None),
    }
}

/// The addressed row among the owner's calls, preferring the one in the
/// thread's current run tree. Two statements rather than one with
/// `run_id = $1 OR thread_id = $1`: a generic plan of the OR scans every call
/// with this id (bench finding).
const LOCATE_IN_RUN: &str = concat!(
    locate_select!(),
    " WHERE tc.run_id = $1 AND tc.id = $2 AND t.owner = $3 AND tc.status <> 'proposed'
      ORDER BY current DESC, (tc.status = 'pending_approval') DESC, tc.created_at DESC LIMIT 1"
);
const LOCATE_IN_THREAD: &str = concat!(
    locate_select!(),
    " WHERE tc.thread_id = $1 AND tc.id = $2 AND t.owner = $3 AND tc.status <> 'proposed'
      ORDER BY current DESC, (tc.status = 'pending_approval') DESC, tc.created_at DESC LIMIT 16"
);

/// The columns [`reply_target`] reads, of a call with its run and thread.
macro_rules! locate_select {
    () => {
        "SELECT tc.run_id, tc.thread_id, tc.status, tc.kind, tc.name, tc.arguments_whole,
                (r.root_run_id = t.current_run_id AND r.status IN ('queued', 'running', 'waiting')) AS current,
                extract(epoch FROM clock_timestamp() - tc.created_at)::float8 AS waited,
                tc.approvals, r.name, r.agent_version, tc.reason, tc.expires_at,
                r.traceparent, r.tracestate,
                r.root_run_id IS DISTINCT FROM t.current_run_id AS moved_on
         FROM tool_calls_whole tc
         JOIN runs r ON r.id = tc.run_id
         JOIN threads t ON t.id = tc.thread_id"
    };
}
use locate_select;

/// Finds the addressed row (see [`LOCATE_IN_RUN`]). By thread, a call id
/// that names more than one open request of the current run tree (two
/// sub-agents' scripts may both say `c1`) is ambiguous: which one the
/// caller meant is not for the store to guess.
pub(super) async fn locate<C: deadpool_postgres::GenericClient>(
    client: &C,
    owner: &Owner,
    target: AnswerTarget,
    call: &ToolCallId,
    scopes: Option<KeyScopes>,
) -> Result<ReplyTarget> {
    let (sql, id) = match target {
        AnswerTarget::Run(run) => (LOCATE_IN_RUN, run.0),
        AnswerTarget::Thread(thread) => (LOCATE_IN_THREAD, thread.0),
    };
    let stmt = client.prepare_cached(sql).await?;
    let rows = client
        .query(&stmt, &[&id, &call.as_str(), &owner.as_str()])
        .await?
        .iter()
        .map(reply_target)
        .collect::<Result<Vec<_>>>()?;
    // A key hears only of the requests it may answer: which other ones
    // share the id is not its business.
    let mut rows = rows;
    if let (Some(scopes), Some(first)) = (scopes, rows.first()) {
        let may_answer =
            |row: &ReplyTarget| KeyScope::to_answer(row.kind).is_none_or(|s| scopes.allow(s));
        let missing = KeyScope::to_answer(first.kind);
        rows.retain(may_answer);
        if rows.is_empty() {
            return Err(match missing {
                Some(missing) => Error::Forbidden { missing },
                None => Error::NotFound {
                    what: "tool call",
                    id: call.to_string(),
                },
            });
        }
    }
    let open: Vec<RunId> = rows
        .iter()
        .filter(|r| r.current && r.status == ToolCallStatus::PendingApproval)
        .map(|r| r.run_id)
        .collect();
    if open.len() > 1 {
        return Err(Error::AmbiguousToolCall {
            tool_call_id: call.to_string(),
            run_ids: open,
        });
    }
    rows.into_iter().next().ok_or_else(|| Error::NotFound {
        what: "tool call",
        id: call.to_string(),
    })
}

fn reply_target(row: &tokio_postgres::Row) -> Result<ReplyTarget> {
    Ok(ReplyTarget {
        run_id: RunId(row.get(0)),
        thread_id: ThreadId(row.get(1)),
        status: row.get::<_, &str>(2).parse()?,
        kind: row.get::<_, &str>(3).parse()?,
        tool_name: row.get(4),
        arguments: row.get(5),
        current: row.get(6),
        waited_secs: row.get(7),
        approvals: row
            .get::<_, Option<Value>>(8)
            .map(serde_json::from_value)
            .transpose()?
            .unwrap_or_default(),
        run_name: row.get(9),
        agent_version: row.get(10),
        reason: row.get(11),
        expires_at: row.get(12),
        trace: crate::start::trace_in(row, 13),
        moved_on: row.get(15),
    })
}

/// Which tool, of which version of which agent, a request an answer is
/// addressed to belongs to: what edited arguments are checked by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressedTool {
    pub tool_name: String,
    pub agent: String,
    pub agent_version: Option<String>,
}

impl crate::Store {
    /// The tool of the request `call` an answer by `owner` to `target`
    /// addresses, read without the run's lock: edited arguments are
    /// checked before the lock is taken, so a large or bad edit never
    /// holds the run (the answer's own transaction checks the rest). The
    /// errors are the answer's: not found, forbidden, ambiguous.
    pub async fn addressed_tool(
        &self,
        owner: &Owner,
        target: AnswerTarget,
        call: &ToolCallId,
        scopes: Option<KeyScopes>,
    ) -> Result<AddressedTool> {
        let client = self.client().await?;
        let row = locate(&client, owner, target, call, scopes).await?;
        Ok(AddressedTool {
            tool_name: row.tool_name,
            agent: row.run_name,
            agent_version: row.agent_version,
        })
    }
}
