//! Checks on work a call waits for (a tool's `await_work`: an MCP server's
//! task), made from whichever worker the delayed `Poll` message reaches,
//! while the run holds nothing. A check asks the call's tool
//! (`Tool::poll`): not yet, and the next check is due later (longer each
//! time, never sooner than the tool asked); ready, and the call's row is
//! replied to as `respond` would, by the one answer path, which resumes
//! the run. A call whose run was stopped while it waited has its work
//! given up (`Tool::abandon`); so has the work of questions that watch it
//! (`AskRequest::watch`), which are checked only for that.

use agentenkit_core::reply::Verdict;
use agentenkit_core::QueueMessage;
use agentenkit_store::{PolledCall, WaitingCall};

use super::{Disposition, Worker};
use crate::metrics;
use crate::tool::{Polled, Tool, MIN_CHECK_INTERVAL_MS};

/// The longest wait between two checks, unless the tool asks for longer.
const MAX_CHECK_INTERVAL_MS: u64 = 60_000;

/// The wait before check `attempt` (1, 2, …) of work whose tool asked for
/// no check sooner than `after_ms`: half as long again each time, up to a
/// minute, and never under `after_ms` (nor the shortest interval).
pub(crate) fn check_delay_ms(after_ms: u64, attempt: u32) -> u64 {
    let after_ms = after_ms.max(MIN_CHECK_INTERVAL_MS);
    let grown = (after_ms as f64) * 1.5f64.powi(attempt.min(64) as i32);
    (grown.min(MAX_CHECK_INTERVAL_MS as f64) as u64)
        .max(after_ms)
        .min(crate::tool::MAX_TTL_MS)
}

impl Worker {
    /// A `Poll` message: checks on the call's work, then writes the next
    /// check, wakes the run, or gives the work up.
    pub(super) async fn poll(&self, message: QueueMessage) -> Disposition {
        let store = self.inner.store();
        let (call, stopped) = match store.polled_call(&message).await {
            Ok(PolledCall::Waiting(call)) => (call, false),
            Ok(PolledCall::Cancelled(call)) => (call, true),
            Ok(PolledCall::Done) => {
                ::metrics::counter!(metrics::TOOL_POLLS, "outcome" => "dropped").increment(1);
                return self.ended(&message).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "a check on a call's work failed; handed back");
                return Disposition::Requeue;
            }
        };
        let tool = self.polled_tool(&call).await;
        if stopped {
            match &tool {
                Some(tool) => tool.abandon(&call.payload).await,
                None => {
                    tracing::warn!("the run was stopped; its work cannot be given up from here")
                }
            }
            ::metrics::counter!(metrics::TOOL_POLLS, "outcome" => "abandoned").increment(1);
            tracing::info!("the run was stopped while its call waited: its work is given up");
            return self.ended(&message).await;
        }
        // Questions a person answers are only watched; a tool this
        // process cannot find is for the run to report: it is woken, and
        // its step says what is missing.
        let polled = match &tool {
            _ if call.watched => Polled::Pending {
                after_ms: crate::tool::WATCH_FIRST_CHECK_MS,
            },
            Some(tool) => tool.poll(&call.payload).await,
            None => Polled::Ready,
        };
        match polled {
            Polled::Pending { after_ms } => self.check_again(&message, after_ms).await,
            Polled::Ready => self.wake(&message, &call, tool.as_deref()).await,
        }
    }

    /// The next check of the chain, due later, in place of `message`.
    async fn check_again(&self, message: &QueueMessage, after_ms: u64) -> Disposition {
        let QueueMessage::Poll {
            run_id,
            ref tool_call_id,
            attempt,
        } = *message
        else {
            return Disposition::Ack;
        };
        let next = QueueMessage::Poll {
            run_id,
            tool_call_id: tool_call_id.clone(),
            attempt: attempt + 1,
        };
        let delay_ms = check_delay_ms(after_ms, attempt + 1);
        match self
            .inner
            .store()
            .poll_again(message, &next, delay_ms)
            .await
        {
            Ok(written) => {
                let outcome = if written { "pending" } else { "dropped" };
                ::metrics::counter!(metrics::TOOL_POLLS, "outcome" => outcome).increment(1);
                Disposition::Ack
            }
            Err(e) => {
                tracing::warn!(error = %e, "the next check could not be written; handed back");
                Disposition::Requeue
            }
        }
    }

    /// The work is ready: the call's row is replied to as `respond` would,
    /// by the one answer path, and the chain ends. A stop that committed
    /// since the call was read gives the work up after all.
    async fn wake(
        &self,
        message: &QueueMessage,
        call: &WaitingCall,
        tool: Option<&dyn Tool>,
    ) -> Disposition {
        let QueueMessage::Poll {
            run_id,
            ref tool_call_id,
            ..
        } = *message
        else {
            return Disposition::Ack;
        };
        let wake = Verdict::Approve {
            payload: None,
            arguments: None,
            message: None,
        };
        let replies = self.inner.deployment.replies();
        match replies
            .settle(&call.owner, run_id, tool_call_id.as_str(), wake)
            .await
        {
            Ok(answered) => {
                ::metrics::counter!(metrics::TOOL_POLLS, "outcome" => "ready").increment(1);
                if let Some(refused) = answered.error {
                    tracing::info!(%refused, "the work is ready; the wait had ended");
                    if let (Ok(PolledCall::Cancelled(call)), Some(tool)) =
                        (self.inner.store().polled_call(message).await, tool)
                    {
                        tool.abandon(&call.payload).await;
                    }
                }
                self.ended(message).await
            }
            Err(e) => {
                tracing::warn!(error = %e, "the work is ready but the wake-up failed; handed back");
                Disposition::Requeue
            }
        }
    }

    /// The tool of `call`, by the version of its agent its run is pinned
    /// to; `None` when this process cannot build that version or it has
    /// no such tool.
    async fn polled_tool(&self, call: &WaitingCall) -> Option<std::sync::Arc<dyn Tool>> {
        let registry = self
            .inner
            .pinned()
            .for_run(
                self.inner.store(),
                &call.agent,
                call.agent_version.as_deref(),
            )
            .await;
        match registry {
            Ok(registry) => registry.tool(&call.tool_name).map(|t| t.tool.clone()),
            Err(e) => {
                tracing::warn!(error = %e, "the call's version cannot be built here");
                None
            }
        }
    }

    /// The end of a chain of checks: its last message's outbox row goes.
    async fn ended(&self, message: &QueueMessage) -> Disposition {
        match self.inner.store().poll_ended(message).await {
            Ok(()) => Disposition::Ack,
            Err(e) => {
                tracing::warn!(error = %e, "a check's outbox row could not be removed; handed back");
                Disposition::Requeue
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_delay_ms;

    #[test]
    fn checks_come_later_each_time_never_sooner_than_asked() {
        assert_eq!(check_delay_ms(200, 1), 300);
        assert_eq!(check_delay_ms(200, 2), 450);
        let ladder: Vec<u64> = (1..40).map(|n| check_delay_ms(200, n)).collect();
        assert!(ladder.windows(2).all(|w| w[0] <= w[1]), "{ladder:?}");
        assert_eq!(*ladder.last().unwrap(), 60_000);
        // A server that asks for longer than the cap is obeyed.
        assert_eq!(check_delay_ms(90_000, 5), 90_000);
        // A tool that asks for no wait at all gets the shortest one.
        assert_eq!(check_delay_ms(0, 1), 150);
        assert_eq!(check_delay_ms(1_000, u32::MAX), 60_000);
    }
}
