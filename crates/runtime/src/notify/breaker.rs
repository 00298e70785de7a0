//! A circuit breaker per notification target: after so many failed
//! attempts in a row a target is not tried for a while, so one that times
//! out on every request cannot hold the worker's notification slots, and
//! its deliveries wait without spending their attempts.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// When a target's breaker opens, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerRule {
    /// Failed attempts in a row that open it.
    pub failures: u32,
    /// How long it stays open; then one attempt is let through (a failure
    /// opens it again, a success closes it).
    pub open_for: Duration,
}

/// Failures in a row that open a target's breaker unless it says.
pub const DEFAULT_BREAKER_FAILURES: u32 = 5;
/// How long a breaker stays open unless its target says.
pub const DEFAULT_BREAKER_OPEN: Duration = Duration::from_secs(30);

impl Default for BreakerRule {
    fn default() -> Self {
        Self {
            failures: DEFAULT_BREAKER_FAILURES,
            open_for: DEFAULT_BREAKER_OPEN,
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct State {
    failures: u32,
    open_until: Option<Instant>,
}

/// This process's breakers, by target name.
#[derive(Debug, Default)]
pub struct Breakers {
    by_target: Mutex<HashMap<String, State>>,
}

impl Breakers {
    /// How long `target` stays untried from `now`, while its breaker is
    /// open; `None` when it may be tried.
    pub fn open_for(&self, target: &str, now: Instant) -> Option<Duration> {
        let states = self.by_target.lock().expect("breakers");
        states
            .get(target)
            .and_then(|state| state.open_until)
            .and_then(|until| until.checked_duration_since(now))
            .filter(|left| !left.is_zero())
    }

    /// Counts an attempt at `target`: a success closes its breaker, the
    /// failure that makes `rule.failures` in a row (or any failure of the
    /// attempt let through an opened breaker) opens it until
    /// `now + rule.open_for`.
    pub fn record(&self, target: &str, delivered: bool, rule: BreakerRule, now: Instant) {
        let mut states = self.by_target.lock().expect("breakers");
        let state = states.entry(target.to_owned()).or_default();
        if delivered {
            *state = State::default();
            return;
        }
        state.failures = state.failures.saturating_add(1);
        if state.failures >= rule.failures.max(1) {
            state.open_until = Some(now + rule.open_for);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const RULE: BreakerRule = BreakerRule {
        failures: 3,
        open_for: Duration::from_secs(10),
    };

    #[test]
    fn it_opens_after_failures_in_a_row_and_lets_one_through_after() {
        let breakers = Breakers::default();
        let t0 = Instant::now();
        for _ in 0..2 {
            breakers.record("hook", false, RULE, t0);
        }
        assert_eq!(breakers.open_for("hook", t0), None, "two failures: closed");
        breakers.record("hook", false, RULE, t0);
        assert_eq!(breakers.open_for("hook", t0), Some(Duration::from_secs(10)));
        let later = t0 + Duration::from_secs(4);
        assert_eq!(
            breakers.open_for("hook", later),
            Some(Duration::from_secs(6))
        );
        assert_eq!(breakers.open_for("other", t0), None, "per target");
        // Half open: the attempt let through fails, it opens again.
        let after = t0 + Duration::from_secs(11);
        assert_eq!(breakers.open_for("hook", after), None);
        breakers.record("hook", false, RULE, after);
        assert_eq!(
            breakers.open_for("hook", after),
            Some(Duration::from_secs(10))
        );
        // A success closes it and forgets the failures.
        let much_later = after + Duration::from_secs(20);
        breakers.record("hook", true, RULE, much_later);
        breakers.record("hook", false, RULE, much_later);
        assert_eq!(breakers.open_for("hook", much_later), None);
    }

    proptest! {
        /// Open exactly when the last `failures` attempts all failed.
        #[test]
        fn open_means_the_last_attempts_failed(outcomes in prop::collection::vec(any::<bool>(), 0..40)) {
            let breakers = Breakers::default();
            let now = Instant::now();
            for delivered in &outcomes {
                breakers.record("t", *delivered, RULE, now);
            }
            let trailing_failures = outcomes.iter().rev().take_while(|d| !**d).count();
            let open = breakers.open_for("t", now).is_some();
            prop_assert_eq!(open, trailing_failures >= RULE.failures as usize);
        }
    }
}
