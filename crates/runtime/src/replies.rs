//! Replies to open requests as library calls: what the HTTP handlers do,
//! for a Rust webhook handler of the deployment (`Deployment::replies`).
//!
//! Each call commits the reply in one transaction and publishes what the
//! commit put in the outbox (the resume segment, when the reply closed the
//! run's last open request); a publish that fails stays in the outbox for
//! the reaper. A reply to a request that is no longer open comes back with
//! `delivered: false` and the reason, not as an error.
//!
//! ```no_run
//! # async fn webhook(replies: &agentenkit_runtime::replies::Replies, thread: agentenkit_core::ThreadId) -> agentenkit_runtime::Result<()> {
//! use agentenkit_core::Owner;
//! // The job system finished: resume the call that parked for it.
//! let answered = replies
//!     .respond(&Owner("alice".into()), thread, "c1", true, Some(serde_json::json!({ "jobId": 7 })))
//!     .await?;
//! assert!(answered.delivered || answered.error.is_some());
//! # Ok(()) }
//! ```

use std::sync::Arc;

use agentenkit_core::answer_rules::{rule, Addressed, Caller, Policy};
use agentenkit_core::approvals::Approver;
use agentenkit_core::questions::Issue;
use agentenkit_core::reply::Verdict;
use agentenkit_core::{KeyScopes, Owner, RunId, ThreadId, ToolCallId};
use agentenkit_store::{retry_conflicts, AnswerTarget, Answered, RecordedItem, Scope, Store};
use serde_json::Value;
use tracing::Instrument;

use crate::reaper::{reclaim_requests, ReapReport, ReaperConfig};
use crate::{metrics, trace, Error, Registry, Result};

/// Replies on behalf of an owner. Cheap to clone.
#[derive(Clone)]
pub struct Replies {
    /// A deployment's store: what it writes to the outbox is published
    /// through the deployment's relay.
    store: Store,
    /// What the caller's key allows (every answer when `None`).
    scopes: Option<KeyScopes>,
    /// Who the caller's key speaks for (the owner when `None`).
    approver: Option<Approver>,
    /// The registries of the agent versions runs are pinned to, by which
    /// their answers are checked.
    pinned: Arc<crate::versions::PinnedRegistries>,
}

/// An approval, with what it may carry besides yes.
#[derive(Debug, Clone, Default)]
pub struct Approve {
    /// For a job's wait: what the job produced.
    pub payload: Option<Value>,
    /// Edited arguments the call runs with instead of the proposed ones
    /// (approvals only; they must fit the tool's input schema).
    pub arguments: Option<Value>,
    /// A note the model reads with the result.
    pub message: Option<String>,
    /// The `argumentsHash` the person was shown: the approval is refused
    /// when the call's arguments hash otherwise.
    pub arguments_hash: Option<String>,
}

/// A rejection: its reason reaches the model.
#[derive(Debug, Clone, Default)]
pub struct Reject {
    pub reason: Option<String>,
    /// As [`Approve::arguments_hash`].
    pub arguments_hash: Option<String>,
}

/// One decision about an open request: what `approve`, `reject`, `answer`
/// and `skip` each send, and what a batch of decisions holds.
#[derive(Debug, Clone)]
pub enum Decision {
    Approve(Approve),
    Reject(Reject),
    /// Answers to a question set: `{ "<questionId>": [values] }`.
    Answer(Value),
    /// A question set left unanswered.
    Skip,
}

impl Decision {
    fn verdict(self) -> (Verdict, Option<String>) {
        match self {
            Decision::Approve(approve) => (
                Verdict::Approve {
                    payload: approve.payload,
                    arguments: approve.arguments,
                    message: approve.message,
                },
                approve.arguments_hash,
            ),
            Decision::Reject(reject) => (
                Verdict::Reject {
                    reason: reject.reason,
                },
                reject.arguments_hash,
            ),
            Decision::Answer(answers) => (Verdict::Answer { answers }, None),
            Decision::Skip => (Verdict::Skip, None),
        }
    }
}

impl Replies {
    /// Replies written through a deployment's `store` (what they write
    /// to the outbox published through its relay), each checked by the
    /// version of its agent the run is pinned to, from the registries the
    /// deployment shares (`pinned`). A process has them from its
    /// deployment: `Deployment::replies`.
    pub fn new(store: Store, pinned: Arc<crate::versions::PinnedRegistries>) -> Self {
        Self {
            store,
            pinned,
            scopes: None,
            approver: None,
        }
    }

    /// These replies as a key with `scopes`, speaking for `approver` (its
    /// id, holder and approver groups), gives them: an answer to a request
    /// whose kind needs another scope is refused (`Forbidden`), and the
    /// key's id is recorded with each decision.
    pub fn as_key(mut self, scopes: KeyScopes, approver: Approver) -> Self {
        self.scopes = Some(scopes);
        self.approver = Some(approver);
        self
    }

    /// `respond` (SPEC §5): approve (`approved`) with an optional payload,
    /// or reject, the open request `call` of `thread`'s current run tree.
    pub async fn respond(
        &self,
        owner: &Owner,
        thread: ThreadId,
        call: &str,
        approved: bool,
        payload: Option<Value>,
    ) -> Result<Answered> {
        let verdict = Verdict::from_respond(approved, payload);
        self.deliver(
            owner,
            AnswerTarget::Thread(thread),
            call,
            verdict,
            None,
            None,
        )
        .await
    }

    /// [`Replies::respond`], refused unless the call's arguments hash to
    /// `arguments_hash` (what the person was shown).
    pub async fn respond_to_hash(
        &self,
        owner: &Owner,
        thread: ThreadId,
        call: &str,
        approved: bool,
        payload: Option<Value>,
        arguments_hash: &str,
    ) -> Result<Answered> {
        let verdict = Verdict::from_respond(approved, payload);
        let target = AnswerTarget::Thread(thread);
        self.deliver(owner, target, call, verdict, Some(arguments_hash), None)
            .await
    }

    pub async fn approve(
        &self,
        owner: &Owner,
        run: RunId,
        call: &str,
        approve: Approve,
    ) -> Result<Answered> {
        self.decide(owner, run, call, Decision::Approve(approve), None)
            .await
    }

    pub async fn reject(
        &self,
        owner: &Owner,
        run: RunId,
        call: &str,
        reject: Reject,
    ) -> Result<Answered> {
        self.decide(owner, run, call, Decision::Reject(reject), None)
            .await
    }

    /// Answers to a question set, resolved against the stored set
    /// (omitted questions take their defaults).
    pub async fn answer(
        &self,
        owner: &Owner,
        run: RunId,
        call: &str,
        answers: Value,
    ) -> Result<Answered> {
        self.decide(owner, run, call, Decision::Answer(answers), None)
            .await
    }

    /// A question set left unanswered: its defaults, recorded as rejected.
    pub async fn skip(&self, owner: &Owner, run: RunId, call: &str) -> Result<Answered> {
        self.decide(owner, run, call, Decision::Skip, None).await
    }

    /// Settles `run`'s open request `call` with `decision`. A batch item
    /// passes `record`: when the decision is delivered, its result is
    /// recorded under the batch's idempotency key in the same transaction.
    pub async fn decide(
        &self,
        owner: &Owner,
        run: RunId,
        call: &str,
        decision: Decision,
        record: Option<RecordedItem<'_>>,
    ) -> Result<Answered> {
        let (verdict, hash) = decision.verdict();
        let target = AnswerTarget::Run(run);
        self.deliver(owner, target, call, verdict, hash.as_deref(), record)
            .await
    }

    /// Settles `run`'s open request `call` with a verdict the caller made
    /// itself (a terminal's hooks), by the same path as every answer.
    pub async fn settle(
        &self,
        owner: &Owner,
        run: RunId,
        call: &str,
        verdict: Verdict,
    ) -> Result<Answered> {
        self.deliver(owner, AnswerTarget::Run(run), call, verdict, None, None)
            .await
    }

    /// `reclaimIfOrphaned`: expires `thread`'s overdue requests now rather
    /// than at the reaper's next pass (what a client connecting triggers).
    pub async fn reclaim_if_orphaned(&self, thread: ThreadId) -> Result<ReapReport> {
        self.reclaim(Scope::Thread(thread)).await
    }

    /// `reclaim_if_orphaned` for every thread of `owner` (the inbox).
    pub async fn reclaim_owner(&self, owner: &Owner) -> Result<ReapReport> {
        self.reclaim(Scope::Owner(owner.clone())).await
    }

    async fn reclaim(&self, scope: Scope) -> Result<ReapReport> {
        // One indexed query when there is nothing to do, the usual case.
        if !self.store.has_reclaimable_requests(&scope).await? {
            return Ok(ReapReport::default());
        }
        reclaim_requests(&self.store, &ReaperConfig::default(), &scope).await
    }

    async fn deliver(
        &self,
        owner: &Owner,
        target: AnswerTarget,
        call: &str,
        verdict: Verdict,
        arguments_hash: Option<&str>,
        record: Option<RecordedItem<'_>>,
    ) -> Result<Answered> {
        if call.contains('\0') || verdict_has_nul(&verdict) {
            return Err(Error::InvalidInput(
                "text contains a NUL character (\\u0000), which cannot be stored".into(),
            ));
        }
        if let Err(invalid) = ToolCallId::check(call) {
            return Err(Error::InvalidInput(format!("toolCallId: {invalid}")));
        }
        if let Some(oversized) = verdict.oversized() {
            return Err(Error::InvalidInput(oversized));
        }
        let call = ToolCallId(call.to_owned());
        // Edited arguments are checked before the run's lock is taken: a
        // large or bad edit never holds the run.
        let edit_checked = match &verdict {
            Verdict::Approve {
                arguments: Some(edited),
                ..
            } => Some(self.check_edit(owner, target, &call, edited).await?),
            _ => None,
        };
        let edit_checked = edit_checked
            .as_ref()
            .map(|(tool, by)| (tool.as_str(), &**by));
        // Checked by the version of its agent the run is pinned to (this
        // deployment's, or the stored one), picked under the run's lock.
        let nobody = Approver::default();
        let caller = Caller {
            owner: owner.as_str(),
            scopes: self.scopes,
            approver: self.approver.as_ref().unwrap_or(&nobody),
            shown_hash: arguments_hash,
        };
        let asked = Asked {
            target,
            call: &call,
            verdict: &verdict,
        };
        let answered = answer_checked(
            &self.store,
            &self.pinned,
            asked,
            &caller,
            record,
            edit_checked,
        )
        .await?;
        let outcome = if answered.delivered {
            "delivered"
        } else {
            "refused"
        };
        ::metrics::counter!(metrics::ANSWERS, "outcome" => outcome).increment(1);
        if let Some(waited) = answered.waited {
            ::metrics::histogram!(metrics::ANSWER_WAIT_SECONDS).record(waited.as_secs_f64());
        }
        Ok(answered)
    }

    /// Checks `edited` against the input schema of the tool of the request
    /// addressed, by the version of its agent the run is pinned to, read
    /// without the run's lock; returns the tool and the registry that
    /// checked it. A misfit is refused here (`InvalidArguments`), as are a
    /// request not found, not the key's to answer, or ambiguous.
    async fn check_edit(
        &self,
        owner: &Owner,
        target: AnswerTarget,
        call: &ToolCallId,
        edited: &Value,
    ) -> Result<(String, Arc<Registry>)> {
        let addressed = self
            .store
            .addressed_tool(owner, target, call, self.scopes)
            .await?;
        let registry = self
            .pinned
            .for_run(
                &self.store,
                &addressed.agent,
                addressed.agent_version.as_deref(),
            )
            .await
            .map_err(|e| Error::VersionUnavailable(e.to_string()))?;
        let issues = schema_issues(&registry, &addressed.tool_name, edited);
        if !issues.is_empty() {
            return Err(agentenkit_store::Error::InvalidArguments(issues).into());
        }
        Ok((addressed.tool_name, registry))
    }
}

/// What an answer addresses and says.
#[derive(Clone, Copy)]
struct Asked<'a> {
    pub target: AnswerTarget,
    pub call: &'a ToolCallId,
    pub verdict: &'a Verdict,
}

/// The one way an answer is decided: the run's lock taken and the call
/// read under it; the registry of the version of its agent the run is
/// pinned to picked (`pinned`: this deployment's, or built once from the
/// stored version); the rules of `agentenkit_core::answer_rules` applied
/// with that version as the policy; the ruling written (or rolled back).
/// Edits that `edit_checked` says fit (that tool, by that registry) are
/// not checked again.
async fn answer_checked(
    store: &Store,
    pinned: &crate::versions::PinnedRegistries,
    asked: Asked<'_>,
    caller: &Caller<'_>,
    record: Option<RecordedItem<'_>>,
    edit_checked: Option<(&str, &Registry)>,
) -> Result<Answered> {
    let owner = Owner(caller.owner.to_owned());
    // One span for the answer, however often a conflict retries it: made
    // on the first attempt, once the run's trace is read under its lock.
    let span = std::sync::OnceLock::new();
    retry_conflicts(|| async {
        let locked = store
            .lock_answer(&owner, asked.target, asked.call, caller.scopes)
            .await?;
        let addressed = locked.addressed();
        // Built at most once per version and process: the first answer to
        // a run of another version reads it while holding the run's lock.
        let registry = match pinned
            .for_run(store, addressed.agent, addressed.agent_version)
            .await
        {
            Ok(registry) => registry,
            Err(e) => return Ok(Err(Error::VersionUnavailable(e.to_string()))),
        };
        let policy = policy_of(&registry, &addressed, asked.verdict, edit_checked);
        let ruling = rule(&addressed, asked.verdict, caller, &policy);
        let run_trace = locked.trace().cloned();
        let outcome = trace::outcome_of(asked.verdict);
        let span = span
            .get_or_init(|| trace::answer_span(run_trace.as_ref(), asked.call.as_str(), outcome))
            .clone();
        let answered = locked.write(ruling, record).instrument(span).await?;
        trace::answer_ended_wait(
            run_trace.as_ref(),
            asked.call.as_str(),
            &answered,
            outcome,
            || caller.approver.principal(caller.owner),
        );
        Ok(Ok(answered))
    })
    .await?
}

/// What `registry`'s version of the run's agent says of the addressed
/// call: whether it is the run's version (`answer_checked` picks it so;
/// the rules refuse to judge by another, should a caller not), the tool's
/// approval rule, and the issues of edited arguments against the tool's
/// input schema.
fn policy_of(
    registry: &Registry,
    addressed: &Addressed<'_>,
    verdict: &Verdict,
    edit_checked: Option<(&str, &Registry)>,
) -> Policy {
    let ours = registry
        .agent_version(addressed.agent)
        .map(|v| v.hash.as_str());
    Policy {
        other_version: addressed
            .agent_version
            .is_some_and(|pinned| ours != Some(pinned)),
        rule: registry.approval_rule(addressed.tool_name),
        edit_issues: Some(edit_issues(registry, addressed, verdict, edit_checked)),
    }
}

/// The issues of the arguments `verdict` edits (none when it edits none)
/// against the input schema of the addressed call's tool in `registry`.
fn edit_issues(
    registry: &Registry,
    addressed: &Addressed<'_>,
    verdict: &Verdict,
    edit_checked: Option<(&str, &Registry)>,
) -> Vec<Issue> {
    let tool = addressed.tool_name;
    match verdict {
        Verdict::Approve {
            arguments: Some(edited),
            ..
        } => match edit_checked {
            // The registry is the one of the run's version, picked under
            // its lock, and a call's tool never changes.
            Some((checked, by)) if checked == tool && std::ptr::eq(by, registry) => Vec::new(),
            _ => schema_issues(registry, tool, edited),
        },
        _ => Vec::new(),
    }
}

/// The issues of `arguments` against the input schema of `registry`'s
/// tool `tool`: what edited arguments are checked with.
pub(crate) fn schema_issues(registry: &Registry, tool: &str, arguments: &Value) -> Vec<Issue> {
    let Some(tool) = registry.tool(tool) else {
        return vec![Issue {
            path: String::new(),
            message: format!("tool {tool:?} is not in this deployment"),
        }];
    };
    // A tool runs only with an object of arguments, whatever its schema.
    if !arguments.is_object() {
        return vec![Issue {
            path: String::new(),
            message: "arguments must be a JSON object".into(),
        }];
    }
    tool.validate(arguments)
}

fn verdict_has_nul(verdict: &Verdict) -> bool {
    match verdict {
        Verdict::Approve {
            payload,
            arguments,
            message,
        } => {
            payload.as_ref().is_some_and(value_has_nul)
                || arguments.as_ref().is_some_and(value_has_nul)
                || message.as_ref().is_some_and(|m| m.contains('\0'))
        }
        Verdict::Reject { reason } => reason.as_ref().is_some_and(|r| r.contains('\0')),
        Verdict::Answer { answers } => value_has_nul(answers),
        Verdict::Skip => false,
    }
}

/// Whether any string or key of `value` holds a NUL.
pub fn value_has_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(value_has_nul),
        Value::Object(map) => map
            .iter()
            .any(|(key, item)| key.contains('\0') || value_has_nul(item)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_nul_anywhere_in_a_verdict_is_found() {
        assert!(verdict_has_nul(&Verdict::Reject {
            reason: Some("a\0".into())
        }));
        assert!(verdict_has_nul(&Verdict::Approve {
            payload: Some(json!({ "k": ["x", "\u{0}"] })),
            arguments: None,
            message: None,
        }));
        assert!(verdict_has_nul(&Verdict::Approve {
            payload: None,
            arguments: Some(json!({ "to": "\u{0}" })),
            message: None,
        }));
        assert!(verdict_has_nul(&Verdict::Approve {
            payload: None,
            arguments: None,
            message: Some("\0".into()),
        }));
        assert!(verdict_has_nul(&Verdict::Answer {
            answers: json!({ "\u{0}": 1 })
        }));
        assert!(!verdict_has_nul(&Verdict::Approve {
            payload: Some(json!({ "k": ["x", 1, null, true] })),
            arguments: Some(json!({ "to": "a" })),
            message: Some("ok".into()),
        }));
        assert!(!verdict_has_nul(&Verdict::Skip));
    }
}
