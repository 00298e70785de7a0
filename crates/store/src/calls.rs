//! Every write of a tool-call row, and nothing else writes one.
//!
//! A row is inserted proposed (or proposed and parked in one commit, see
//! `wait.rs`), storing its arguments where the commit's journal holds them
//! (`format/encode.rs`). After that it changes only by a
//! [`CallEvent`] of `agentenkit_core::call`, written by [`write`]: the
//! statement is guarded by the event's source statuses
//! ([`CallEvent::sources`]), so the database refuses what
//! [`agentenkit_core::CallState::apply`] would, and sets the columns of the
//! state the event leaves. The columns each state may hold are tied to its
//! status by the CHECK of `migrations/0011_call_states.sql`.
//!
//! A worker reads its run's calls back as [`agentenkit_core::RunCall`]s
//! through the one decoder, [`CallColumns::decode`]. It reads the columns of
//! the row's state only: the statements leave columns of an earlier state
//! in place (a park request after the park, votes and the expiry after the
//! wait), and the decoder does not look at them. [`CallColumns::of`] is the
//! columns each state has, as the statements set them: what the in-memory
//! engine hands its worker, and one side of the round-trip property.
//!
//! Three writes change many rows at once and are statements of their own
//! here: the calls of ended runs are cancelled ([`cancel_open`]), waits
//! without an expiry get one ([`SCHEDULE_MISSING_EXPIRIES_SQL`]), and a
//! revoked key's votes leave the calls still waiting ([`DROP_VOTES_OF_KEY_SQL`]).

use agentenkit_core::approvals::Vote;
use agentenkit_core::call::{Decided, Waiting};
use agentenkit_core::reply::{SettledReply, DEFAULT_REJECTION};
use agentenkit_core::{
    CallEvent, CallState, RunCall, RunId, ThreadId, ToolCallId, ToolCallStatus, ToolKind,
};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::pipeline::{Op, Param};
use crate::{Error, Result};

/// A call row to insert: proposed, or (`parked`: reason and expiry)
/// proposed and parked in one commit (see `wait.rs`).
pub(crate) struct NewCall<'a> {
    pub(crate) id: &'a ToolCallId,
    pub(crate) name: &'a str,
    pub(crate) kind: ToolKind,
    /// `(arguments, arguments_position)`: see the view `tool_calls_whole`.
    pub(crate) stored: (Option<Value>, Option<i32>),
    pub(crate) parked: Option<(&'a str, Option<DateTime<Utc>>)>,
}

/// The insert of a call row, proposed (`$9`, `$10` and `$11` null) or
/// already open.
const INSERT_TOOL_CALL_SQL: &str = "
    INSERT INTO tool_calls (run_id, id, thread_id, name, arguments, arguments_position,
                            kind, tool_type, status, reason, expires_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

/// The one insert of a call row, proposed or already open.
pub(crate) fn insert_tool_call(run: RunId, thread: ThreadId, call: NewCall<'_>) -> Op {
    let (arguments, arguments_position) = call.stored;
    let (status, reason, expires_at) = match call.parked {
        Some((reason, expires_at)) => (
            ToolCallStatus::PendingApproval,
            Some(reason.to_owned()),
            expires_at,
        ),
        None => (ToolCallStatus::Proposed, None, None),
    };
    Op::new(
        INSERT_TOOL_CALL_SQL,
        vec![
            Box::new(run.0),
            Box::new(call.id.as_str().to_owned()),
            Box::new(thread.0),
            Box::new(call.name.to_owned()),
            Box::new(arguments),
            Box::new(arguments_position),
            Box::new(call.kind.as_str()),
            Box::new(call.kind.tool_type()),
            Box::new(status.as_str()),
            Box::new(reason),
            Box::new(expires_at),
        ],
    )
}

// Each event's statement: `$1` run, `$2` call id, `$3` the source
// statuses ([`CallEvent::sources`]), then the event's columns.
const RECORD_PARK_REQUEST_SQL: &str = "UPDATE tool_calls SET park_request = $4
     WHERE run_id = $1 AND id = $2 AND status = ANY($3)";
const PARK_SQL: &str = "UPDATE tool_calls SET status = 'pending_approval', reason = $4,
            expires_at = $5, kind = $6, tool_type = $7, arguments = COALESCE($8, arguments)
     WHERE run_id = $1 AND id = $2 AND status = ANY($3)";
const VOTE_SQL: &str = "UPDATE tool_calls SET approvals = $4
     WHERE run_id = $1 AND id = $2 AND status = ANY($3)";
const SCHEDULE_EXPIRY_SQL: &str = "UPDATE tool_calls SET expires_at = $4
     WHERE run_id = $1 AND id = $2 AND status = ANY($3)";
const ANSWER_SQL: &str = "UPDATE tool_calls SET status = $4, payload = $5, result = $6,
            answered_by = $7, answered_at = $8, defaulted = $9, decision = $10
     WHERE run_id = $1 AND id = $2 AND status = ANY($3)";
const EXPIRE_SQL: &str = "UPDATE tool_calls SET status = 'expired', result = $4, answered_at = $5
     WHERE run_id = $1 AND id = $2 AND status = ANY($3)";
/// `finish` and `refuse`: a status and the result the model reads.
const SETTLE_SQL: &str = "UPDATE tool_calls SET status = $4, result = $5
     WHERE run_id = $1 AND id = $2 AND status = ANY($3)";
/// Only an answered call's: a call that ran without a wait has its result.
const RECORD_RESULT_SQL: &str = "UPDATE tool_calls SET result = $4
     WHERE run_id = $1 AND id = $2 AND status = ANY($3) AND answered_at IS NOT NULL";
const CANCEL_SQL: &str = "UPDATE tool_calls SET status = 'cancelled'
     WHERE run_id = $1 AND id = $2 AND status = ANY($3)";

/// The statement that writes `event` on call `id` of `run`: it changes
/// nothing unless the row is in one of the event's source statuses (add
/// [`crate::pipeline::Expect::One`] where that is a bug).
pub(crate) fn write(run: RunId, id: &ToolCallId, event: &CallEvent) -> Result<Op> {
    if !event.is_well_formed() {
        return Err(Error::Corrupt(format!(
            "tool call {id} of run {run}: no call takes {event:?}"
        )));
    }
    let sources: Vec<&'static str> = event.sources().iter().map(|s| s.as_str()).collect();
    let mut params: Vec<Param> = vec![
        Box::new(run.0),
        Box::new(id.as_str().to_owned()),
        Box::new(sources),
    ];
    let sql = match event {
        CallEvent::RecordParkRequest { request } => {
            params.push(Box::new(request.clone()));
            RECORD_PARK_REQUEST_SQL
        }
        CallEvent::Park {
            kind,
            arguments,
            reason,
            expires_at,
        } => {
            params.push(Box::new(reason.clone()));
            params.push(Box::new(*expires_at));
            params.push(Box::new(kind.as_str()));
            params.push(Box::new(kind.tool_type()));
            params.push(Box::new(arguments.clone()));
            PARK_SQL
        }
        CallEvent::Vote { votes } => {
            params.push(Box::new(serde_json::to_value(votes)?));
            VOTE_SQL
        }
        CallEvent::ScheduleExpiry { expires_at } => {
            params.push(Box::new(*expires_at));
            SCHEDULE_EXPIRY_SQL
        }
        CallEvent::Answer { reply } => {
            let answered = answered_columns(reply);
            params.push(Box::new(reply.status.as_str()));
            params.push(Box::new(answered.payload));
            params.push(Box::new(answered.result));
            params.push(Box::new(reply.answered_by.clone()));
            params.push(Box::new(reply.answered_at));
            params.push(Box::new(reply.defaulted.clone()));
            params.push(Box::new(answered.decision));
            ANSWER_SQL
        }
        CallEvent::Expire { at } => {
            params.push(Box::new(agentenkit_core::call::expired_result()));
            params.push(Box::new(*at));
            EXPIRE_SQL
        }
        CallEvent::Finish { status, result } => {
            params.push(Box::new(status.as_str()));
            params.push(Box::new(result.clone()));
            SETTLE_SQL
        }
        CallEvent::Refuse { result } => {
            params.push(Box::new(ToolCallStatus::Rejected.as_str()));
            params.push(Box::new(result.clone()));
            SETTLE_SQL
        }
        CallEvent::RecordResult { result } => {
            params.push(Box::new(result.clone()));
            RECORD_RESULT_SQL
        }
        CallEvent::Cancel => CANCEL_SQL,
    };
    Ok(Op::new(sql, params))
}

/// What an answer stores beside its status.
pub(crate) struct AnsweredColumns {
    /// A question set's resolved answers, or an approval's payload.
    pub(crate) payload: Option<Value>,
    /// What the model reads at once: the answers or the denial (an
    /// approved call's comes when its tool ran).
    pub(crate) result: Option<Value>,
    /// What a person decided beyond yes or no (docs/approvals.md, "Decisions"):
    /// `{arguments?, message?, argumentsHash, keyId?, approvals?}`.
    pub(crate) decision: Option<Value>,
}

/// Questions keep their resolved answers in `payload`; a rejection keeps
/// the denial the model will see in `result`.
pub(crate) fn answered_columns(reply: &SettledReply) -> AnsweredColumns {
    let (payload, result) = match (&reply.answers, reply.denial()) {
        (Some(answers), _) => (Some(json!(answers)), reply.answers_result()),
        (None, denial) => (reply.payload.clone(), denial),
    };
    AnsweredColumns {
        payload,
        result,
        decision: decision_of(reply),
    }
}

/// The `decision` column of an answer; none for a reply nobody gave.
fn decision_of(reply: &SettledReply) -> Option<Value> {
    let hash = reply.arguments_hash.as_ref()?;
    let mut decision = json!({ "argumentsHash": hash });
    if let Some(arguments) = &reply.arguments {
        decision["arguments"] = arguments.clone();
    }
    if let Some(message) = &reply.message {
        decision["message"] = json!(message);
    }
    if let Some(key_id) = &reply.key_id {
        decision["keyId"] = json!(key_id);
    }
    if let Some(approvals) = &reply.approvals {
        decision["approvals"] = approvals.clone();
    }
    Some(decision)
}

/// The columns of a call row a worker reads (`lease::ACQUIRE` renders them
/// as JSON), in their stored form.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct CallColumns {
    id: String,
    kind: String,
    status: String,
    reason: Option<String>,
    expires_at: Option<DateTime<Utc>>,
    /// The votes so far of a waiting call that needs several.
    approvals: Option<Value>,
    park_request: Option<Value>,
    payload: Option<Value>,
    result: Option<Value>,
    defaulted: Option<Vec<String>>,
    answered_by: Option<String>,
    answered_at: Option<DateTime<Utc>>,
    decision: Option<Value>,
    /// The child run a delegation started (from `runs`, not the row).
    child: Option<Uuid>,
}

impl CallColumns {
    /// The columns of `call`'s state as [`insert_tool_call`] and [`write`]
    /// set them (without what an earlier state left: see the module doc).
    pub(crate) fn of(call: &RunCall) -> Self {
        let mut row = CallColumns {
            id: call.id.as_str().to_owned(),
            kind: call.kind.as_str().to_owned(),
            status: call.state.status().as_str().to_owned(),
            reason: None,
            expires_at: None,
            approvals: None,
            park_request: None,
            payload: None,
            result: call.state.result().cloned(),
            defaulted: None,
            answered_by: None,
            answered_at: None,
            decision: None,
            child: call.child.map(|c| c.0),
        };
        match &call.state {
            CallState::Proposed { park_request } => row.park_request = park_request.clone(),
            CallState::Waiting(waiting) => {
                row.reason = Some(waiting.reason.clone());
                row.expires_at = waiting.expires_at;
                row.approvals = (!waiting.votes.is_empty()).then(|| json!(waiting.votes));
            }
            CallState::Decided(decided) => {
                let reply = &decided.reply;
                let answered = answered_columns(reply);
                row.reason = Some(decided.reason.clone());
                row.payload = answered.payload;
                row.decision = answered.decision;
                row.defaulted = reply.defaulted.clone();
                row.answered_by = reply.answered_by.clone();
                row.answered_at = reply.answered_at;
            }
            CallState::Expired { reason, at, .. } => {
                row.reason = Some(reason.clone());
                row.answered_at = Some(*at);
            }
            CallState::Cancelled { reason } => row.reason = reason.clone(),
            CallState::Ran { .. } | CallState::Failed { .. } | CallState::Refused { .. } => {}
        }
        row
    }

    /// The call these columns hold, or `Corrupt` when they fit no state
    /// (the CHECK of `migrations/0011_call_states.sql` keeps such rows out).
    pub(crate) fn decode(self) -> Result<RunCall> {
        let id = ToolCallId(self.id.clone());
        let kind: ToolKind = self.kind.parse()?;
        let status: ToolCallStatus = self.status.parse()?;
        let child = self.child.map(RunId);
        let missing =
            |what: &str| Error::Corrupt(format!("tool call {id}: {status} without {what}"));
        let state = match status {
            ToolCallStatus::Proposed => CallState::Proposed {
                park_request: self.park_request,
            },
            ToolCallStatus::PendingApproval => CallState::Waiting(Waiting {
                kind,
                reason: self.reason.ok_or_else(|| missing("its reason"))?,
                expires_at: self.expires_at,
                votes: match self.approvals {
                    Some(votes) => serde_json::from_value::<Vec<Vote>>(votes)?,
                    None => Vec::new(),
                },
            }),
            ToolCallStatus::Executed | ToolCallStatus::Rejected if self.answered_at.is_some() => {
                let reason = self.reason.clone().ok_or_else(|| missing("its reason"))?;
                let result = self.result.clone();
                let reply = self.decided_reply(kind, status)?;
                CallState::Decided(Box::new(Decided {
                    reason,
                    reply,
                    result,
                }))
            }
            ToolCallStatus::Expired => CallState::Expired {
                reason: self.reason.ok_or_else(|| missing("its reason"))?,
                at: self.answered_at.ok_or_else(|| missing("when it expired"))?,
                result: self.result.ok_or_else(|| missing("its result"))?,
            },
            ToolCallStatus::Cancelled => CallState::Cancelled {
                reason: self.reason,
            },
            settled => {
                let result = self.result.ok_or_else(|| missing("its result"))?;
                match settled {
                    ToolCallStatus::Executed => CallState::Ran { result },
                    ToolCallStatus::Rejected => CallState::Refused { result },
                    _ => CallState::Failed { result },
                }
            }
        };
        Ok(RunCall {
            id,
            kind,
            state,
            child,
        })
    }

    /// The reply of a decided call, from the columns [`answered_columns`]
    /// wrote: a question set's answers are its `payload`; a rejection's
    /// reason is its denial's (none when it is the default one).
    fn decided_reply(&self, kind: ToolKind, status: ToolCallStatus) -> Result<SettledReply> {
        let text = |value: Option<&Value>, key: &str| {
            value
                .and_then(|v| v.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let (payload, answers) = match (kind, &self.payload) {
            (ToolKind::Ask, Some(answers)) => {
                (None, Some(serde_json::from_value(answers.clone())?))
            }
            (ToolKind::Ask, None) => (None, None),
            (_, payload) => (payload.clone(), None),
        };
        let reason = match (kind, status) {
            (ToolKind::Ask, _) | (_, ToolCallStatus::Executed) => None,
            _ => text(self.result.as_ref(), "reason").filter(|r| r != DEFAULT_REJECTION),
        };
        let decision = self.decision.as_ref();
        Ok(SettledReply {
            status,
            approved: status == ToolCallStatus::Executed,
            payload,
            reason,
            answers,
            defaulted: self.defaulted.clone(),
            answered_by: self.answered_by.clone(),
            answered_at: self.answered_at,
            arguments: decision.and_then(|d| d.get("arguments")).cloned(),
            message: text(decision, "message"),
            arguments_hash: text(decision, "argumentsHash"),
            key_id: text(decision, "keyId"),
            approvals: decision.and_then(|d| d.get("approvals")).cloned(),
        })
    }
}

/// [`write`], for a change that must find its row in a source status:
/// otherwise the transaction is aborted with `Corrupt`.
pub(crate) fn write_one(run: RunId, id: &ToolCallId, event: &CallEvent) -> Result<Op> {
    Ok(
        write(run, id, event)?.expect(crate::pipeline::Expect::One(Error::Corrupt(format!(
            "tool call {id} of run {run} cannot take {}",
            event.name()
        )))),
    )
}

/// Every call of `runs` not yet settled is cancelled (their runs ended):
/// [`CallEvent::Cancel`] for each.
pub(crate) fn cancel_open(runs: &[Uuid]) -> Op {
    let sources: Vec<&'static str> = CallEvent::Cancel
        .sources()
        .iter()
        .map(|s| s.as_str())
        .collect();
    Op::new(
        "UPDATE tool_calls SET status = 'cancelled'
         WHERE run_id = ANY($1) AND status = ANY($2)",
        vec![Box::new(runs.to_vec()), Box::new(sources)],
    )
}

/// [`CallEvent::ScheduleExpiry`] for up to `$4` waits without an expiry in
/// a scope (`{scope}`: see `expire::scope_clause`), `$3` ms from now.
/// Questions never expire and are left alone. Returns the calls.
pub(crate) const SCHEDULE_MISSING_EXPIRIES_SQL: &str = "
    UPDATE tool_calls tc SET expires_at = now() + $3 * interval '1 millisecond'
    FROM (SELECT run_id, id FROM tool_calls
          WHERE status = 'pending_approval' AND expires_at IS NULL
            AND kind IN ('approval', 'park')
            AND {scope}
          LIMIT $4 FOR UPDATE SKIP LOCKED) missing
    WHERE tc.run_id = missing.run_id AND tc.id = missing.id
    RETURNING tc.run_id, tc.id";

/// Locks, in id order, the runs whose waiting calls hold a vote of key
/// `$1`: an answer to one of them counts the votes it read under its run's
/// lock, and would write a dropped vote back if the drop did not wait for
/// that lock ([`DROP_VOTES_OF_KEY_SQL`] runs after this, in the same
/// transaction; the lock order is an answer's: run, then its calls).
pub(crate) const LOCK_RUNS_WITH_VOTES_OF_KEY_SQL: &str = "
    SELECT r.id FROM runs r
    WHERE r.id IN (
        SELECT tc.run_id FROM tool_calls tc
        WHERE tc.status = 'pending_approval' AND tc.approvals IS NOT NULL
          AND (tc.approvals @> jsonb_build_array(jsonb_build_object('keyId', $1::text))
            OR tc.approvals @> jsonb_build_array(jsonb_build_object('principal', $1::text))))
    ORDER BY r.id
    FOR NO KEY UPDATE OF r";

/// [`CallEvent::Vote`] for every call still waiting with a vote of key
/// `$1`: the votes without it (a vote names its key in `keyId`; one given
/// before holders existed names it as its `principal`).
pub(crate) const DROP_VOTES_OF_KEY_SQL: &str = "
    UPDATE tool_calls SET approvals = COALESCE(
        (SELECT jsonb_agg(v ORDER BY n)
         FROM jsonb_array_elements(approvals) WITH ORDINALITY AS e(v, n)
         WHERE v->>'keyId' IS DISTINCT FROM $1 AND v->>'principal' IS DISTINCT FROM $1),
        '[]'::jsonb)
    WHERE status = 'pending_approval' AND approvals IS NOT NULL
      AND (approvals @> jsonb_build_array(jsonb_build_object('keyId', $1::text))
        OR approvals @> jsonb_build_array(jsonb_build_object('principal', $1::text)))";

#[cfg(test)]
mod tests;
