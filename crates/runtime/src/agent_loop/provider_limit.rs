//! A model's limits across the fleet (docs/budgets.md, "Provider limits"):
//! the call a step is about to make is reserved first, and a step past
//! the limit waits in a delayed message (`SegmentError::RateLimited`, then
//! `Change::Defer`), holding no worker.

use std::time::Duration;

use agentenkit_store::{Reservation, RunEngine};

use super::error::SegmentError;
use crate::agent::Agent;
use crate::model::ModelRequest;

/// The reservation of the call `request` is about to make, `None` when
/// the agent's model has no limit (nothing is asked of the store then).
pub(super) async fn reserve(
    engine: &dyn RunEngine,
    agent: &Agent,
    request: &ModelRequest<'_>,
) -> Result<Option<i64>, SegmentError> {
    let Some(limit) = agent.provider_limit else {
        return Ok(None);
    };
    let id = agent.model.id();
    let key = limit_key(id.provider, id.model);
    match engine
        .reserve_provider_call(&key, limit, estimated_tokens(request))
        .await?
    {
        Reservation::Granted(reservation) => Ok(Some(reservation)),
        Reservation::Wait(wait) => Err(SegmentError::RateLimited {
            provider: id.provider.to_owned(),
            cause: "fleet_limit",
            wait,
            message: format!("{key} is at its limit across the fleet; waiting {wait:?}"),
        }),
    }
}

/// The shortest a deferred step waits: a provider answering `Retry-After:
/// 0` (or a date past) is not asked again in a loop.
const MIN_DEFERRAL: Duration = Duration::from_millis(500);
/// The most that is added to a wait at random, so that the runs waiting
/// for the same window do not all come back at the same instant.
const MAX_SPREAD: Duration = Duration::from_secs(2);

/// How long a step the provider (or the fleet limit) asked to wait
/// actually waits: at least [`MIN_DEFERRAL`], plus up to an eighth of the
/// wait (at most [`MAX_SPREAD`]) chosen by `unit` in `[0, 1)`.
pub(super) fn deferral(wait: Duration, unit: f64) -> Duration {
    let spread = (wait / 8).min(MAX_SPREAD).mul_f64(unit.clamp(0.0, 1.0));
    wait.max(MIN_DEFERRAL) + spread
}

/// A random `[0, 1)`.
pub(super) fn random_unit() -> f64 {
    (uuid::Uuid::new_v4().as_u128() >> 64) as f64 / (u64::MAX as f64 + 1.0)
}

/// Whose calls count together: every agent of the fleet naming the same
/// model of the same provider.
fn limit_key(provider: &str, model: &str) -> String {
    format!("{provider}/{model}")
}

/// About a token per four characters of what is sent: what the call is
/// counted at until its provider reports what it used.
fn estimated_tokens(request: &ModelRequest<'_>) -> u64 {
    let messages = serde_json::to_string(request.messages).map_or(0, |text| text.len());
    ((request.system.len() + messages) / 4) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentenkit_core::conversation::Message;

    #[test]
    fn a_deferral_waits_at_least_half_a_second_and_spreads_a_little() {
        assert_eq!(deferral(Duration::ZERO, 0.0), MIN_DEFERRAL);
        assert_eq!(deferral(Duration::ZERO, 0.99), MIN_DEFERRAL);
        let minute = Duration::from_secs(60);
        assert_eq!(deferral(minute, 0.0), minute);
        assert_eq!(deferral(minute, 0.5), minute + Duration::from_secs(1));
        let eight = Duration::from_secs(8);
        assert_eq!(deferral(eight, 0.5), eight + Duration::from_millis(500));
        let unit = random_unit();
        assert!((0.0..1.0).contains(&unit));
    }

    #[test]
    fn a_request_is_estimated_from_what_it_sends() {
        let messages = vec![Message::User {
            content: "x".repeat(400),
        }];
        let system = "s".repeat(40);
        let request = ModelRequest {
            call_index: 0,
            system: &system,
            messages: &messages,
            tools: &[],
        };
        let estimate = estimated_tokens(&request);
        assert!((110..=125).contains(&estimate), "{estimate}");
        assert_eq!(limit_key("openai", "gpt-4.1"), "openai/gpt-4.1");
    }
}
