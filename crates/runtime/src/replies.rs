//! Replies to open requests as library calls: what the HTTP handlers do,
//! for a Rust webhook handler that has the store and the relay at hand.
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

use agentenkit_core::reply::Verdict;
use agentenkit_core::{Owner, RunId, ThreadId, ToolCallId};
use agentenkit_store::{AnswerTarget, Answered, Scope, Store};
use serde_json::Value;

use crate::reaper::{reclaim_requests, ReapReport, ReaperConfig};
use crate::{metrics, Error, Relay, Result};

/// Replies on behalf of an owner. Cheap to clone.
#[derive(Clone)]
pub struct Replies {
    store: Store,
    relay: Relay,
}

impl Replies {
    /// Replies written through `store`; what they write to the outbox is
    /// published through `relay`.
    pub fn new(store: Store, relay: Relay) -> Self {
        Self {
            store: relay.attach(store),
            relay,
        }
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
        self.deliver(owner, AnswerTarget::Thread(thread), call, verdict)
            .await
    }

    pub async fn approve(
        &self,
        owner: &Owner,
        run: RunId,
        call: &str,
        payload: Option<Value>,
    ) -> Result<Answered> {
        self.deliver(
            owner,
            AnswerTarget::Run(run),
            call,
            Verdict::Approve { payload },
        )
        .await
    }

    pub async fn reject(
        &self,
        owner: &Owner,
        run: RunId,
        call: &str,
        reason: Option<String>,
    ) -> Result<Answered> {
        self.deliver(
            owner,
            AnswerTarget::Run(run),
            call,
            Verdict::Reject { reason },
        )
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
        self.deliver(
            owner,
            AnswerTarget::Run(run),
            call,
            Verdict::Answer { answers },
        )
        .await
    }

    /// A question set left unanswered: its defaults, recorded as rejected.
    pub async fn skip(&self, owner: &Owner, run: RunId, call: &str) -> Result<Answered> {
        self.deliver(owner, AnswerTarget::Run(run), call, Verdict::Skip)
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
        reclaim_requests(&self.store, &self.relay, &ReaperConfig::default(), &scope).await
    }

    async fn deliver(
        &self,
        owner: &Owner,
        target: AnswerTarget,
        call: &str,
        verdict: Verdict,
    ) -> Result<Answered> {
        if call.contains('\0') || verdict_has_nul(&verdict) {
            return Err(Error::InvalidInput(
                "text contains a NUL character (\\u0000), which cannot be stored".into(),
            ));
        }
        if let Err(invalid) = ToolCallId::check(call) {
            return Err(Error::InvalidInput(format!("toolCallId: {invalid}")));
        }
        let call = ToolCallId(call.to_owned());
        let answered = self.store.answer(owner, target, &call, &verdict).await?;
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
}

fn verdict_has_nul(verdict: &Verdict) -> bool {
    match verdict {
        Verdict::Approve { payload } => payload.as_ref().is_some_and(value_has_nul),
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
            payload: Some(json!({ "k": ["x", "\u{0}"] }))
        }));
        assert!(verdict_has_nul(&Verdict::Answer {
            answers: json!({ "\u{0}": 1 })
        }));
        assert!(!verdict_has_nul(&Verdict::Approve {
            payload: Some(json!({ "k": ["x", 1, null, true] }))
        }));
        assert!(!verdict_has_nul(&Verdict::Skip));
    }
}
