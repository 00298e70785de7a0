//! One tool call's state, with the data that state has, and the pure
//! transitions between states.
//!
//! A call is proposed by the model; it runs (or fails, or is refused
//! because a person denied the same call before), or it waits for a person,
//! a job or answers. A wait collects votes when several people must approve,
//! and ends decided (approved or rejected), expired or cancelled. Every
//! change of a call is one [`CallEvent`] applied by [`CallState::apply`]:
//! the store writes a call only as one of these events
//! (`crates/store/src/calls.rs`), and keeps the state as its indexed
//! `status` beside the columns of the state's data, tied by a CHECK
//! (`migrations/0011_call_states.sql`), so a row cannot hold a combination
//! no state has.
//!
//! | state \ event | park | vote / schedule | answer | expire | finish | refuse | record result | cancel |
//! |---------------|------|-----------------|--------|--------|--------|--------|---------------|--------|
//! | proposed      | waiting |              |        |        | ran / failed | refused |          | cancelled |
//! | waiting       |      | waiting         | decided | expired |       |        |               | cancelled |
//! | decided (approved) |  |                 |        |        |        |        | decided       |        |
//!
//! `proposed` also takes `record park request` (a self-parking tool's
//! request, kept before its park commits). Anything else is refused with
//! [`Error::InvalidTransition`].

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::approvals::Vote;
use crate::reply::{SettledReply, TIMEOUT_DENIAL};
use crate::{Error, RunId, ToolCallId, ToolCallStatus, ToolKind};

/// A call waiting for a person, a job or answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    /// What it waits for: a person's approval (`approval`), a job
    /// (`park`) or answers (`ask`).
    pub kind: ToolKind,
    /// Why it waits (what the person is asked, the job's name).
    pub reason: String,
    /// When it expires unanswered; none for question sets.
    pub expires_at: Option<DateTime<Utc>>,
    /// The approvals given so far, for a call several people approve.
    pub votes: Vec<Vote>,
}

/// A call a person (or a webhook) answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    /// Why it waited.
    pub reason: String,
    /// The reply, as journaled and carried by `INPUT_RESOLVED`:
    /// `executed` (approved, answered) or `rejected` (denied, skipped).
    pub reply: SettledReply,
    /// What the model reads: the denial or the resolved answers at once;
    /// for an approved call, the tool's result once it ran.
    pub result: Option<Value>,
}

/// The state of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub enum CallState {
    /// As the model proposed it, not yet run or parked; a self-parking
    /// tool's request, once it gave one.
    Proposed {
        park_request: Option<Value>,
    },
    Waiting(Waiting),
    Decided(Box<Decided>),
    /// Nobody answered in time: the model reads [`TIMEOUT_DENIAL`].
    Expired {
        reason: String,
        at: DateTime<Utc>,
        result: Value,
    },
    /// Ran without a wait.
    Ran {
        result: Value,
    },
    /// Failed without a wait (a tool error, a failed sub-agent).
    Failed {
        result: Value,
    },
    /// Rejected without asking: a person denied the same call before.
    Refused {
        result: Value,
    },
    /// Its run ended first; the reason of the wait it was in, if any.
    Cancelled {
        reason: Option<String>,
    },
}

/// One change of a call.
#[derive(Debug, Clone, PartialEq)]
pub enum CallEvent {
    /// A self-parking tool asked to wait; kept at once, so a retried step
    /// knows without calling the tool again.
    RecordParkRequest { request: Value },
    /// The call waits as `kind` (an approval, a job or questions). A
    /// self-parking tool's call parks as `park` with its request's payload
    /// as the call's `arguments`.
    Park {
        kind: ToolKind,
        arguments: Option<Value>,
        reason: String,
        expires_at: Option<DateTime<Utc>>,
    },
    /// One more approval of a call that needs several: the votes so far.
    Vote { votes: Vec<Vote> },
    /// A wait without an expiry (parked before the timer existed) gets one.
    ScheduleExpiry { expires_at: DateTime<Utc> },
    /// A person's reply settles the wait.
    Answer { reply: Box<SettledReply> },
    /// The wait ran out.
    Expire { at: DateTime<Utc> },
    /// The call ran (`executed`) or failed (`failed`) without a wait.
    Finish {
        status: ToolCallStatus,
        result: Value,
    },
    /// Rejected without asking.
    Refuse { result: Value },
    /// The tool of an approved call ran: what the model reads.
    RecordResult { result: Value },
    /// The call's run ended.
    Cancel,
}

impl CallEvent {
    /// The statuses this event applies to: the guard of the statement that
    /// writes it, so the database refuses what [`CallState::apply`] would.
    pub fn sources(&self) -> &'static [ToolCallStatus] {
        use ToolCallStatus::*;
        match self {
            CallEvent::RecordParkRequest { .. }
            | CallEvent::Park { .. }
            | CallEvent::Finish { .. }
            | CallEvent::Refuse { .. } => &[Proposed],
            CallEvent::Vote { .. }
            | CallEvent::ScheduleExpiry { .. }
            | CallEvent::Answer { .. }
            | CallEvent::Expire { .. } => &[PendingApproval],
            CallEvent::RecordResult { .. } => &[Executed],
            CallEvent::Cancel => &[Proposed, PendingApproval],
        }
    }

    /// Whether the event's own data is one a call can take: a finish is a
    /// run (`executed`) or a failure, a park waits for someone. With
    /// [`CallEvent::sources`], what a writer checks without the call's
    /// state at hand.
    pub fn is_well_formed(&self) -> bool {
        match self {
            CallEvent::Finish { status, .. } => {
                matches!(status, ToolCallStatus::Executed | ToolCallStatus::Failed)
            }
            CallEvent::Park { kind, .. } => kind.tool_type() == "action",
            _ => true,
        }
    }

    /// The event's name, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            CallEvent::RecordParkRequest { .. } => "record park request",
            CallEvent::Park { .. } => "park",
            CallEvent::Vote { .. } => "vote",
            CallEvent::ScheduleExpiry { .. } => "schedule expiry",
            CallEvent::Answer { .. } => "answer",
            CallEvent::Expire { .. } => "expire",
            CallEvent::Finish { .. } => "finish",
            CallEvent::Refuse { .. } => "refuse",
            CallEvent::RecordResult { .. } => "record result",
            CallEvent::Cancel => "cancel",
        }
    }
}

impl CallState {
    /// A call as the model proposed it.
    pub fn proposed() -> CallState {
        CallState::Proposed { park_request: None }
    }

    /// The status the store indexes this state by.
    pub fn status(&self) -> ToolCallStatus {
        match self {
            CallState::Proposed { .. } => ToolCallStatus::Proposed,
            CallState::Waiting(_) => ToolCallStatus::PendingApproval,
            CallState::Decided(decided) => decided.reply.status,
            CallState::Expired { .. } => ToolCallStatus::Expired,
            CallState::Ran { .. } => ToolCallStatus::Executed,
            CallState::Failed { .. } => ToolCallStatus::Failed,
            CallState::Refused { .. } => ToolCallStatus::Rejected,
            CallState::Cancelled { .. } => ToolCallStatus::Cancelled,
        }
    }

    /// What the model reads of the call, once there is something to read.
    pub fn result(&self) -> Option<&Value> {
        match self {
            CallState::Decided(decided) => decided.result.as_ref(),
            CallState::Expired { result, .. }
            | CallState::Ran { result }
            | CallState::Failed { result }
            | CallState::Refused { result } => Some(result),
            CallState::Proposed { .. } | CallState::Waiting(_) | CallState::Cancelled { .. } => {
                None
            }
        }
    }

    /// The state `event` leaves this call in, or why it cannot happen:
    /// the transition of the event's name below.
    pub fn apply(self, event: CallEvent) -> Result<CallState, Error> {
        match event {
            CallEvent::RecordParkRequest { request } => self.record_park_request(request),
            CallEvent::Park {
                kind,
                reason,
                expires_at,
                ..
            } => self.park(kind, reason, expires_at),
            CallEvent::Vote { votes } => self.vote(votes),
            CallEvent::ScheduleExpiry { expires_at } => self.schedule_expiry(expires_at),
            CallEvent::Answer { reply } => self.answer(*reply),
            CallEvent::Expire { at } => self.expire(at),
            CallEvent::Finish { status, result } => self.finish(status, result),
            CallEvent::Refuse { result } => self.refuse(result),
            CallEvent::RecordResult { result } => self.record_result(result),
            CallEvent::Cancel => self.cancel(),
        }
    }

    /// Proposed: a self-parking tool's request is kept.
    pub fn record_park_request(self, request: Value) -> Result<CallState, Error> {
        match self {
            CallState::Proposed { .. } => Ok(CallState::Proposed {
                park_request: Some(request),
            }),
            other => Err(other.cannot("record park request")),
        }
    }

    /// Proposed → waiting as `kind`, which must be a kind someone answers.
    pub fn park(
        self,
        kind: ToolKind,
        reason: String,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<CallState, Error> {
        match self {
            CallState::Proposed { .. } if kind.tool_type() == "action" => {
                Ok(CallState::Waiting(Waiting {
                    kind,
                    reason,
                    expires_at,
                    votes: Vec::new(),
                }))
            }
            other => Err(other.cannot("park")),
        }
    }

    /// Waiting → waiting with `votes`, the approvals given so far.
    pub fn vote(self, votes: Vec<Vote>) -> Result<CallState, Error> {
        match self {
            CallState::Waiting(waiting) => Ok(CallState::Waiting(Waiting { votes, ..waiting })),
            other => Err(other.cannot("vote")),
        }
    }

    /// Waiting → waiting until `expires_at`.
    pub fn schedule_expiry(self, expires_at: DateTime<Utc>) -> Result<CallState, Error> {
        match self {
            CallState::Waiting(waiting) => Ok(CallState::Waiting(Waiting {
                expires_at: Some(expires_at),
                ..waiting
            })),
            other => Err(other.cannot("schedule expiry")),
        }
    }

    /// Waiting → decided by `reply`, which must settle the call (executed
    /// or rejected) and say when. What the model reads at once: the
    /// resolved answers of a question set, or the denial.
    pub fn answer(self, reply: SettledReply) -> Result<CallState, Error> {
        let settles = matches!(
            reply.status,
            ToolCallStatus::Executed | ToolCallStatus::Rejected
        ) && reply.answered_at.is_some();
        match self {
            CallState::Waiting(waiting) if settles => {
                let result = reply.answers_result().or_else(|| reply.denial());
                Ok(CallState::Decided(Box::new(Decided {
                    reason: waiting.reason,
                    reply,
                    result,
                })))
            }
            other => Err(other.cannot("answer")),
        }
    }

    /// Waiting → expired at `at`: the model reads [`TIMEOUT_DENIAL`].
    pub fn expire(self, at: DateTime<Utc>) -> Result<CallState, Error> {
        match self {
            CallState::Waiting(waiting) => Ok(CallState::Expired {
                reason: waiting.reason,
                at,
                result: expired_result(),
            }),
            other => Err(other.cannot("expire")),
        }
    }

    /// Proposed → ran (`executed`) or failed, with what the model reads.
    pub fn finish(self, status: ToolCallStatus, result: Value) -> Result<CallState, Error> {
        match (self, status) {
            (CallState::Proposed { .. }, ToolCallStatus::Executed) => Ok(CallState::Ran { result }),
            (CallState::Proposed { .. }, ToolCallStatus::Failed) => {
                Ok(CallState::Failed { result })
            }
            (other, _) => Err(other.cannot("finish")),
        }
    }

    /// Proposed → refused: rejected without asking.
    pub fn refuse(self, result: Value) -> Result<CallState, Error> {
        match self {
            CallState::Proposed { .. } => Ok(CallState::Refused { result }),
            other => Err(other.cannot("refuse")),
        }
    }

    /// Decided and approved: the tool's result, once it ran.
    pub fn record_result(self, result: Value) -> Result<CallState, Error> {
        match self {
            CallState::Decided(decided) if decided.reply.status == ToolCallStatus::Executed => {
                Ok(CallState::Decided(Box::new(Decided {
                    result: Some(result),
                    ..*decided
                })))
            }
            other => Err(other.cannot("record result")),
        }
    }

    /// Proposed or waiting → cancelled: its run ended first.
    pub fn cancel(self) -> Result<CallState, Error> {
        match self {
            CallState::Proposed { .. } => Ok(CallState::Cancelled { reason: None }),
            CallState::Waiting(waiting) => Ok(CallState::Cancelled {
                reason: Some(waiting.reason),
            }),
            other => Err(other.cannot("cancel")),
        }
    }

    fn cannot(&self, event: &str) -> Error {
        Error::InvalidTransition {
            entity: "tool call",
            from: self.status().to_string(),
            to: event.to_owned(),
        }
    }
}

/// One call of a run as the run's worker knows it: what its segment reads
/// to decide whether to run, park or resume the call.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCall {
    pub id: ToolCallId,
    /// The kind the call was proposed (or parked) as.
    pub kind: ToolKind,
    pub state: CallState,
    /// The child run a delegation started.
    pub child: Option<RunId>,
}

/// A delegation whose child run exists.
#[derive(Debug, Clone, PartialEq)]
pub enum Delegation {
    Running {
        child: RunId,
    },
    /// The child ended: `executed` with its output, or `failed`.
    Settled {
        status: ToolCallStatus,
        result: Value,
    },
}

impl RunCall {
    /// A call the model just proposed.
    pub fn proposed(id: ToolCallId, kind: ToolKind) -> Self {
        Self {
            id,
            kind,
            state: CallState::proposed(),
            child: None,
        }
    }

    /// A self-parking tool's request, kept before its park committed.
    pub fn park_request(&self) -> Option<&Value> {
        match &self.state {
            CallState::Proposed { park_request } => park_request.as_ref(),
            _ => None,
        }
    }

    /// The reply the call settled with, or its status while it is not
    /// settled (proposed, or waiting).
    pub fn reply(&self) -> Result<SettledReply, ToolCallStatus> {
        let status = self.state.status();
        let unanswered = |result: Option<&Value>, answered_at| SettledReply {
            reason: result
                .and_then(|r| r.get("reason"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            answered_at,
            ..SettledReply::bare(status)
        };
        match &self.state {
            CallState::Proposed { .. } | CallState::Waiting(_) => Err(status),
            CallState::Decided(decided) => Ok(decided.reply.clone()),
            CallState::Expired { at, result, .. } => Ok(unanswered(Some(result), Some(*at))),
            CallState::Ran { result }
            | CallState::Failed { result }
            | CallState::Refused { result } => Ok(unanswered(Some(result), None)),
            CallState::Cancelled { .. } => Ok(unanswered(None, None)),
        }
    }

    /// Where the delegation of this call stands: `None` before its child
    /// run exists.
    pub fn delegation(&self) -> Option<Delegation> {
        match (&self.state, self.child) {
            (CallState::Proposed { .. }, None) => None,
            (CallState::Proposed { .. }, Some(child)) => Some(Delegation::Running { child }),
            (state, _) => Some(Delegation::Settled {
                status: state.status(),
                result: state.result().cloned().unwrap_or_default(),
            }),
        }
    }

    /// This call once `event` applied: what a later step of the same
    /// segment sees of a change written in a commit not yet read back. A
    /// park sets the kind too, as its statement does (a self-parking
    /// tool's call waits as `park`).
    pub fn apply(&mut self, event: CallEvent) -> Result<(), Error> {
        let kind = match &event {
            CallEvent::Park { kind, .. } => *kind,
            _ => self.kind,
        };
        self.state = self.state.clone().apply(event)?;
        self.kind = kind;
        Ok(())
    }
}

/// What the model reads of an expired call.
pub fn expired_result() -> Value {
    serde_json::json!({ "denied": true, "reason": TIMEOUT_DENIAL })
}

#[cfg(test)]
mod tests;
