//! The rules an answer to an open request is decided by, on what the store
//! read under the run's lock: who may answer what, whether the request is
//! still open, whether the reply fits its wait, the hash and the edits, and
//! how many people must approve. Pure: the store locks and reads, the
//! caller brings the policy of the run's agent version (its approval rule,
//! what edits it allows), and this decides; the store then writes the
//! ruling, or rolls back.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::approvals::{cast, ApprovalRule, Approver, Cast, Vote};
use crate::canonical::arguments_hash;
use crate::questions::Issue;
use crate::reply::{reduce, refusal, ReplyError, SettledReply, Verdict};
use crate::{KeyScope, KeyScopes, ToolCallStatus, ToolKind};

/// The addressed call, as read under its run's lock.
#[derive(Debug, Clone, Copy)]
pub struct Addressed<'a> {
    pub kind: ToolKind,
    pub status: ToolCallStatus,
    /// In the thread's current run tree (a request of an earlier turn is
    /// no longer current).
    pub current: bool,
    /// The thread has started another turn since this call's.
    pub moved_on: bool,
    pub tool_name: &'a str,
    /// The request's arguments (a question set for `ask`).
    pub arguments: &'a Value,
    /// The approvals given so far.
    pub votes: &'a [Vote],
    /// The run's agent, and the version of it the run is pinned to.
    pub agent: &'a str,
    pub agent_version: Option<&'a str>,
    /// When the lock was taken: when the answer is recorded as given.
    pub answered_at: DateTime<Utc>,
}

/// Who answers, and what they were shown.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub owner: &'a str,
    /// The scopes of the caller's key; `None` allows every answer.
    pub scopes: Option<KeyScopes>,
    pub approver: &'a Approver,
    /// The `argumentsHash` the person was shown.
    pub shown_hash: Option<&'a str>,
}

/// What the run's agent version says of this call.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Whether the caller checks by the run's own version of its agent;
    /// when not, the answer is refused for it to check by that version.
    pub other_version: bool,
    /// Who must approve a call of this tool (one person by default).
    pub rule: ApprovalRule,
    /// The issues of the edited arguments against the tool's input schema,
    /// when the verdict edits them; `None` when they cannot be checked (no
    /// tool schemas at hand): edits are then refused.
    pub edit_issues: Option<Vec<Issue>>,
}

/// What an answer comes to.
#[derive(Debug, Clone, PartialEq)]
pub enum Ruling {
    /// Not delivered: the request is no longer open, or this person
    /// approved it already. Nothing is written.
    Refused(&'static str),
    /// One more approval of a call that needs several: the votes so far,
    /// and how many of how many.
    Vote {
        votes: Vec<Vote>,
        given: u32,
        required: u32,
    },
    /// The call settles with this reply.
    Settle(Box<SettledReply>),
}

/// Why an answer is refused as an error (the API's 403, 404, 409, 422).
#[derive(Debug, Clone, PartialEq)]
pub enum AnswerError {
    /// The key may not answer this kind of request.
    Forbidden {
        missing: KeyScope,
    },
    /// The run is pinned to another version of its agent: check by it.
    PinnedToOtherVersion {
        agent: String,
        version: String,
    },
    /// The reply is not of the wait's shape.
    Mismatch {
        kind: ToolKind,
    },
    InvalidAnswers(Vec<Issue>),
    /// Edits of a call whose arguments nobody may change.
    CannotEdit {
        kind: String,
    },
    ArgumentsHashMismatch {
        expected: String,
        actual: String,
    },
    InvalidArguments(Vec<Issue>),
    /// Only these groups' members may approve or deny.
    NotAnApprover {
        groups: Vec<String>,
    },
}

/// The ruling on `verdict` from `caller` for the call `addressed`, by
/// `policy`.
pub fn rule(
    addressed: &Addressed<'_>,
    verdict: &Verdict,
    caller: &Caller<'_>,
    policy: &Policy,
) -> Result<Ruling, AnswerError> {
    // A key that may not answer this kind of request learns nothing of
    // it, not even whether it is still open.
    if let Some(missing) = caller
        .scopes
        .zip(KeyScope::to_answer(addressed.kind))
        .and_then(|(scopes, needed)| (!scopes.allow(needed)).then_some(needed))
    {
        return Err(AnswerError::Forbidden { missing });
    }
    // A request no longer open refuses every reply, whatever its shape.
    if let Some(reason) = refusal(addressed.status, addressed.current, addressed.moved_on) {
        return Ok(Ruling::Refused(reason));
    }
    if let (true, Some(version)) = (policy.other_version, addressed.agent_version) {
        return Err(AnswerError::PinnedToOtherVersion {
            agent: addressed.agent.to_owned(),
            version: version.to_owned(),
        });
    }
    let mut reply = checked(addressed, verdict, caller, policy)?;
    reply.answered_by = Some(caller.owner.to_owned());
    reply.key_id = caller.approver.key_id.clone();
    reply.answered_at = Some(addressed.answered_at);
    let rule = match addressed.kind {
        ToolKind::Approval => &policy.rule,
        _ => &ApprovalRule {
            required: 1,
            from: Vec::new(),
        },
    };
    if rule.is_single() {
        return Ok(Ruling::Settle(Box::new(reply)));
    }
    let in_groups = caller.approver.groups.iter().any(|g| rule.from.contains(g));
    // Only an approver may deny a call several people approve: one deny
    // settles it.
    if !reply.approved {
        if !rule.from.is_empty() && !in_groups {
            return Err(AnswerError::NotAnApprover {
                groups: rule.from.clone(),
            });
        }
        return Ok(Ruling::Settle(Box::new(reply)));
    }
    vote(addressed, caller, rule, reply)
}

/// The reply `verdict` makes for the wait, with the hash of the arguments
/// it decided on, once the hash and any edits check out.
fn checked(
    addressed: &Addressed<'_>,
    verdict: &Verdict,
    caller: &Caller<'_>,
    policy: &Policy,
) -> Result<SettledReply, AnswerError> {
    let mut reply = reduce(addressed.kind, verdict, addressed.arguments).map_err(|e| match e {
        ReplyError::Mismatch => AnswerError::Mismatch {
            kind: addressed.kind,
        },
        ReplyError::InvalidAnswers(issues) => AnswerError::InvalidAnswers(issues),
        ReplyError::CannotEdit => AnswerError::CannotEdit {
            kind: addressed.kind.to_string(),
        },
    })?;
    let hash = arguments_hash(addressed.arguments);
    if let Some(expected) = caller.shown_hash.filter(|shown| *shown != hash) {
        return Err(AnswerError::ArgumentsHashMismatch {
            expected: expected.to_owned(),
            actual: hash,
        });
    }
    if reply.arguments.is_some() {
        let issues = policy.edit_issues.clone().unwrap_or_else(|| {
            vec![Issue {
                path: String::new(),
                message: "edited arguments cannot be checked here (no tool schemas)".into(),
            }]
        });
        if !issues.is_empty() {
            return Err(AnswerError::InvalidArguments(issues));
        }
    }
    reply.arguments_hash = Some(hash);
    Ok(reply)
}

/// One more approval of a call several people approve.
fn vote(
    addressed: &Addressed<'_>,
    caller: &Caller<'_>,
    rule: &ApprovalRule,
    mut reply: SettledReply,
) -> Result<Ruling, AnswerError> {
    let principal = caller.approver.principal(caller.owner);
    let counted = cast(rule, addressed.votes, &principal, &caller.approver.groups);
    // What the tool gets is what was proposed: no approver edits it, nor
    // hands it a payload, alone.
    if counted != Cast::NotAnApprover && (reply.arguments.is_some() || reply.payload.is_some()) {
        return Err(AnswerError::CannotEdit {
            kind: "multi-party approval".into(),
        });
    }
    let mut votes = addressed.votes.to_vec();
    if !votes.iter().any(|v| v.principal == principal) {
        votes.push(Vote {
            principal,
            key_id: caller.approver.key_id.clone(),
            answered_by: caller.owner.to_owned(),
            answered_at: addressed.answered_at,
            message: reply.message.clone(),
        });
    }
    match counted {
        Cast::NotAnApprover => Err(AnswerError::NotAnApprover {
            groups: rule.from.clone(),
        }),
        Cast::AlreadyGiven => Ok(Ruling::Refused("You have already approved this request")),
        Cast::Counted { given, required } => Ok(Ruling::Vote {
            votes,
            given,
            required,
        }),
        Cast::Complete => {
            reply.approvals = Some(serde_json::to_value(&votes).unwrap_or_default());
            Ok(Ruling::Settle(Box::new(reply)))
        }
    }
}

#[cfg(test)]
mod tests;
