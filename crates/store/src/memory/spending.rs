//! The in-memory engine's spending: what a thread's runs spent (as
//! `THREAD_SPENT_SQL` counts it), and its provider calls, the window of
//! `reserve_provider_call` (migration 0018) on this process's clock.

use std::time::{Duration, Instant};

use agentenkit_core::budget::{Grant, Scope, ThreadSpending};
use agentenkit_core::{RunId, ThreadId};

use super::Memory;
use crate::engine::{ProviderLimit, Reservation};

/// How long a call counts toward its model's limits (the provider's minute
/// and a second for the time between a reservation and its request).
const WINDOW: Duration = Duration::from_secs(61);

/// A reserved call.
#[derive(Debug, Clone)]
pub struct MemoryProviderCall {
    pub id: i64,
    pub key: String,
    pub at: Instant,
    pub tokens: u64,
}

impl Memory {
    /// What the runs of `thread` but `run` spent and were granted.
    pub(super) fn thread_spending(&self, thread: ThreadId, run: RunId) -> ThreadSpending {
        let mut spending = ThreadSpending::default();
        let runs = self
            .runs
            .iter()
            .filter(|(id, r)| **id != run && r.thread == thread);
        for entry in runs.flat_map(|(id, _)| self.journal.get(id).into_iter().flatten()) {
            if entry.name.starts_with("persist:toolcall:") {
                spending.spent.tool_calls += 1;
            } else if entry.name.starts_with("model:") {
                let usage = entry.value.get("usage").cloned().unwrap_or_default();
                let usage = serde_json::from_value(usage).unwrap_or_default();
                spending.spent.add_model_call(usage, 0, None);
            } else if entry.name.starts_with("budget:") && entry.name.ends_with(":granted") {
                match serde_json::from_value::<Grant>(entry.value.clone()) {
                    Ok(grant) if grant.scope == Scope::Thread => {
                        spending.granted = spending.granted.summed(&grant.add);
                    }
                    _ => {}
                }
            }
        }
        spending
    }

    pub(super) fn reserve_provider_call(
        &mut self,
        key: &str,
        limit: ProviderLimit,
        tokens: u64,
        now: Instant,
    ) -> Reservation {
        self.provider_calls
            .retain(|c| c.key != key || now.duration_since(c.at) < WINDOW);
        let window: Vec<&MemoryProviderCall> = self
            .provider_calls
            .iter()
            .filter(|c| c.key == key)
            .collect();
        let spent: u64 = window.iter().map(|c| c.tokens).sum();
        let frees_at = match limit {
            ProviderLimit {
                requests_per_minute: Some(calls),
                ..
            } if window.len() >= calls as usize => Some(window[window.len() - calls as usize].at),
            ProviderLimit {
                tokens_per_minute: Some(most),
                ..
            } if spent > 0 && spent + tokens > most => {
                let mut freed = 0;
                window.iter().find_map(|c| {
                    freed += c.tokens;
                    (spent - freed + tokens <= most || freed == spent).then_some(c.at)
                })
            }
            _ => None,
        };
        if let Some(at) = frees_at {
            let wait = (at + WINDOW).saturating_duration_since(now);
            return Reservation::Wait(wait.max(Duration::from_millis(1)));
        }
        let id = self.provider_calls.last().map_or(1, |c| c.id + 1);
        self.provider_calls.push(MemoryProviderCall {
            id,
            key: key.to_owned(),
            at: now,
            tokens,
        });
        Reservation::Granted(id)
    }

    pub(super) fn record_provider_usage(&mut self, reservation: i64, tokens: u64) {
        if let Some(call) = self.provider_calls.iter_mut().find(|c| c.id == reservation) {
            call.tokens = tokens;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_past_the_limit_wait_for_the_oldest_to_leave_the_window() {
        let mut memory = Memory::default();
        let start = Instant::now();
        let limit = ProviderLimit {
            requests_per_minute: Some(2),
            tokens_per_minute: None,
        };
        assert!(matches!(
            memory.reserve_provider_call("m", limit, 1, start),
            Reservation::Granted(_)
        ));
        let later = start + Duration::from_secs(10);
        assert!(matches!(
            memory.reserve_provider_call("m", limit, 1, later),
            Reservation::Granted(_)
        ));
        let third = later + Duration::from_secs(1);
        assert_eq!(
            memory.reserve_provider_call("m", limit, 1, third),
            Reservation::Wait(Duration::from_secs(50))
        );
        // Another model's key has its own window.
        assert!(matches!(
            memory.reserve_provider_call("other", limit, 1, third),
            Reservation::Granted(_)
        ));
        let after = start + WINDOW;
        assert!(matches!(
            memory.reserve_provider_call("m", limit, 1, after),
            Reservation::Granted(_)
        ));
    }

    #[test]
    fn tokens_count_what_was_reported_and_a_huge_call_goes_alone() {
        let mut memory = Memory::default();
        let start = Instant::now();
        let limit = ProviderLimit {
            requests_per_minute: None,
            tokens_per_minute: Some(100),
        };
        let Reservation::Granted(first) = memory.reserve_provider_call("m", limit, 10, start)
        else {
            panic!("the first call goes");
        };
        memory.record_provider_usage(first, 90);
        let soon = start + Duration::from_secs(1);
        assert_eq!(
            memory.reserve_provider_call("m", limit, 20, soon),
            Reservation::Wait(Duration::from_secs(60))
        );
        assert!(matches!(
            memory.reserve_provider_call("m", limit, 10, soon),
            Reservation::Granted(_)
        ));
        // Larger than the whole limit: it waits for an empty window, then goes.
        let empty = start + WINDOW + Duration::from_secs(2);
        assert!(matches!(
            memory.reserve_provider_call("m", limit, 500, empty),
            Reservation::Granted(_)
        ));
    }
}
