//! Handling `Notify` and `Remind` messages: claim the targets still owed
//! the delivery, send to each at once, record what each answered (see
//! `agentenkit_store::notifications`).

use std::sync::Arc;
use std::time::Duration;

use agentenkit_core::notify::{sign, SIGNATURE_HEADER};
use agentenkit_core::{QueueMessage, RunId, ToolCallId};
use agentenkit_store::{Attempted, DeliveryAttempt, DeliveryResult, Store};
use serde_json::json;

use super::payload::{body, Delivery, REMINDER_EVENT};
use super::{Target, CLAIM_MARGIN};
use crate::agent::Registry;
use crate::agent_loop::CrashPoint;
use crate::metrics;

/// What became of a notification message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// Sent to what was owed it (or rescheduled for a retry).
    Done,
    /// Nothing to send: the event or request is gone or closed, or no
    /// target wants it.
    Dropped,
    /// A reminder that came early, put back on its way.
    Early,
    /// The crash point fired (tests).
    Crashed,
}

/// Sends notifications for a worker.
#[derive(Clone)]
pub struct Notifier {
    store: Store,
    /// The deployment's registries: its targets, and the escalations of
    /// the tools it serves now (its MCP servers may list more later).
    registries: Arc<crate::versions::PinnedRegistries>,
    /// Built on the first send: a worker of a deployment without targets
    /// never loads the TLS roots for it.
    /// A client that cannot be built stays an error that each delivery
    /// reports: a default client would follow redirects.
    client: Arc<std::sync::OnceLock<Result<reqwest::Client, String>>>,
    /// Targets this process stops trying for a while after failures in a
    /// row.
    breakers: Arc<super::breaker::Breakers>,
    crash: Option<CrashPoint>,
}

impl Notifier {
    pub fn new(
        store: Store,
        registries: Arc<crate::versions::PinnedRegistries>,
        crash: Option<CrashPoint>,
    ) -> Self {
        Self {
            store,
            registries,
            client: Arc::default(),
            breakers: Arc::default(),
            crash,
        }
    }

    /// The deployment it sends for, as it serves now.
    pub fn registry(&self) -> Arc<Registry> {
        self.registries.current()
    }

    fn client(&self) -> Result<&reqwest::Client, &str> {
        self.client
            .get_or_init(|| {
                crate::tls::http_client()
                    // A target that redirects is misconfigured: a signed body
                    // is not for whoever it points at.
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .map_err(|e| format!("the notification client could not be built: {e}"))
            })
            .as_ref()
            .map_err(String::as_str)
    }

    /// Whether the crash point `point` fires (tests).
    pub(super) fn crashed(&self, point: &str) -> bool {
        self.crash.as_ref().is_some_and(|crash| crash(point))
    }

    /// Sends event `event_id` to the targets that want its type.
    pub async fn notify(&self, run: RunId, event_id: i64) -> agentenkit_store::Result<Handled> {
        let message = QueueMessage::Notify {
            run_id: run,
            event_id,
        };
        let registry = self.registry();
        let notifications = registry.notifications();
        // The event is read and its delivery claimed in one statement: the
        // claim names each target with the types it wants, and only the
        // event's own type claims.
        let wanted = notifications.wanted();
        let claim = notifications.claim();
        let read = self
            .store
            .event_with_claim(event_id, &wanted, claim)
            .await?;
        let targets = read
            .as_ref()
            .map(|(event, _)| notifications.targets_for(event.event_type))
            .unwrap_or_default();
        let Some((event, claimed)) = read.filter(|_| !targets.is_empty()) else {
            self.store.drop_notification(&message).await?;
            return Ok(Handled::Dropped);
        };
        self.send_claimed(&message, &Delivery::of(event), &targets, claimed)
            .await
    }

    /// Sends an event that the transaction writing it claimed for this
    /// process (see `here`); what to record, not recorded yet.
    pub(super) async fn send_here(
        &self,
        claimed: &agentenkit_store::ClaimedEvent,
    ) -> agentenkit_store::RecordItem {
        let registry = self.registry();
        let notifications = registry.notifications();
        let targets = notifications.targets_for(claimed.event.event_type);
        let delivery = Delivery::of(claimed.event.clone());
        let results = self
            .attempt(&delivery, &targets, claimed.attempts.clone())
            .await;
        agentenkit_store::RecordItem {
            message: claimed.message.clone(),
            delivery_id: delivery.id,
            targets: targets.iter().map(|t| t.name.clone()).collect(),
            results,
        }
    }

    /// Reminds the tool's escalation target of request `call` if it is
    /// still open once `remind_after` has passed.
    pub async fn remind(&self, run: RunId, call: &ToolCallId) -> agentenkit_store::Result<Handled> {
        let message = QueueMessage::Remind {
            run_id: run,
            tool_call_id: call.clone(),
        };
        let open = self.store.open_request(run, call).await?;
        let registry = self.registry();
        let escalation = open
            .as_ref()
            .and_then(|(request, _)| registry.escalation(&request.tool_name));
        let target = escalation.and_then(|e| registry.notifications().target(&e.target));
        let (Some((request, waited)), Some(escalation), Some(target)) = (open, escalation, target)
        else {
            ::metrics::counter!(metrics::REMINDERS, "outcome" => "dropped").increment(1);
            self.store.drop_notification(&message).await?;
            return Ok(Handled::Dropped);
        };
        // The delay ladder may deliver a little early: never remind
        // before the time, come back for the rest.
        if let Some(left) = escalation.remind_after.checked_sub(waited) {
            if left > Duration::from_millis(50) {
                self.store.reschedule_notification(&message, left).await?;
                return Ok(Handled::Early);
            }
        }
        let mut data = serde_json::to_value(&request)?;
        data["waited"] = json!(humantime_short(escalation.remind_after));
        data["waitedSeconds"] = json!(waited.as_secs());
        let delivery = Delivery {
            id: message.outbox_key(),
            event_type: REMINDER_EVENT.to_owned(),
            thread_id: request.thread_id,
            run_id: Some(run),
            created_at: request.created_at
                + chrono::Duration::from_std(escalation.remind_after).unwrap_or_default(),
            data,
        };
        let handled = self.deliver(&message, &delivery, &[target]).await?;
        if handled == Handled::Done {
            ::metrics::counter!(metrics::REMINDERS, "outcome" => "sent").increment(1);
        }
        Ok(handled)
    }

    async fn deliver(
        &self,
        message: &QueueMessage,
        delivery: &Delivery,
        targets: &[&Target],
    ) -> agentenkit_store::Result<Handled> {
        let names: Vec<String> = targets.iter().map(|t| t.name.clone()).collect();
        // A claim outlasts the slowest attempt, so a copy of the message
        // handled meanwhile does not send alongside.
        let longest = targets.iter().map(|t| t.timeout).max().unwrap_or_default();
        let claimed = self
            .store
            .claim_deliveries(&delivery.id, &names, longest + CLAIM_MARGIN)
            .await?;
        self.send_claimed(message, delivery, targets, claimed).await
    }

    /// Sends `delivery` to each target `claimed` names (its attempt
    /// counted), then records what each answered.
    async fn send_claimed(
        &self,
        message: &QueueMessage,
        delivery: &Delivery,
        targets: &[&Target],
        claimed: Vec<DeliveryAttempt>,
    ) -> agentenkit_store::Result<Handled> {
        let names: Vec<String> = targets.iter().map(|t| t.name.clone()).collect();
        let results = self.attempt(delivery, targets, claimed).await;
        if self.crashed("notify:sent") {
            return Ok(Handled::Crashed);
        }
        self.store
            .record_deliveries(message, &delivery.id, &names, &results)
            .await?;
        if self.crashed("notify:recorded") {
            return Ok(Handled::Crashed);
        }
        Ok(Handled::Done)
    }

    /// Sends `delivery` to each target `claimed` names, at once; what each
    /// answered, counted and logged, not recorded yet.
    pub(super) async fn attempt(
        &self,
        delivery: &Delivery,
        targets: &[&Target],
        claimed: Vec<DeliveryAttempt>,
    ) -> Vec<Attempted> {
        let link = self.registry().notifications().inbox_link();
        let sends = claimed.into_iter().filter_map(|attempt| {
            let target = *targets.iter().find(|t| t.name == attempt.target)?;
            let body = body(delivery, target.format, link.as_deref());
            Some(async move {
                // Attempts whose workers died after sending count too: past
                // the last, the delivery is dead without another.
                let open = self
                    .breakers
                    .open_for(&target.name, std::time::Instant::now());
                let result = if attempt.attempt > target.retry.max_attempts {
                    DeliveryResult::Failed {
                        status: None,
                        error: "no attempts left (earlier ones were cut short)".into(),
                    }
                } else if let Some(left) = open {
                    DeliveryResult::Deferred {
                        after: left,
                        reason: format!(
                            "not tried: the target failed {} times in a row (its circuit is open for {} ms more)",
                            target.breaker.failures,
                            left.as_millis()
                        ),
                    }
                } else {
                    let result = self.post(target, delivery, &attempt, body).await;
                    let delivered = matches!(result, DeliveryResult::Delivered { .. });
                    self.breakers.record(
                        &target.name,
                        delivered,
                        target.breaker,
                        std::time::Instant::now(),
                    );
                    result
                };
                Attempted {
                    attempt,
                    result,
                    rule: target.retry,
                }
            })
        });
        let results = futures::future::join_all(sends).await;
        for attempted in &results {
            let outcome = match &attempted.result {
                DeliveryResult::Delivered { .. } => "delivered",
                DeliveryResult::Deferred { .. } => "deferred",
                DeliveryResult::Failed { .. }
                    if attempted.attempt.attempt >= attempted.rule.max_attempts =>
                {
                    "dead"
                }
                DeliveryResult::Failed { .. } => "failed",
            };
            ::metrics::counter!(metrics::NOTIFICATIONS, "outcome" => outcome).increment(1);
            if let DeliveryResult::Failed { status, error } = &attempted.result {
                tracing::warn!(
                    target_name = %attempted.attempt.target,
                    attempt = attempted.attempt.attempt,
                    status,
                    error = %error,
                    outcome,
                    "notification not delivered"
                );
            }
        }
        results
    }

    pub(super) fn store(&self) -> &Store {
        &self.store
    }

    /// One attempt: a 2xx is delivered, anything else failed.
    async fn post(
        &self,
        target: &Target,
        delivery: &Delivery,
        attempt: &DeliveryAttempt,
        body: Vec<u8>,
    ) -> DeliveryResult {
        let secret = match target.secret_bytes() {
            Ok(secret) => secret,
            Err(error) => {
                return DeliveryResult::Failed {
                    status: None,
                    error,
                }
            }
        };
        let client = match self.client() {
            Ok(client) => client,
            Err(error) => {
                return DeliveryResult::Failed {
                    status: None,
                    error: error.to_owned(),
                }
            }
        };
        let mut request = client
            .post(target.url.clone())
            .timeout(target.timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("X-Agentenkit-Event-Id", &delivery.id)
            .header("X-Agentenkit-Event-Type", &delivery.event_type)
            .header("X-Agentenkit-Delivery-Attempt", attempt.attempt.to_string());
        if let Some(secret) = secret {
            let now = chrono::Utc::now().timestamp();
            request = request.header(SIGNATURE_HEADER, sign(&secret, now, &body));
        }
        match request.body(body).send().await {
            Ok(response) if response.status().is_success() => DeliveryResult::Delivered {
                status: response.status().as_u16(),
            },
            Ok(response) => DeliveryResult::Failed {
                status: Some(response.status().as_u16()),
                error: format!("the target answered {}", response.status()),
            },
            // Without the URL: it may hold a token (a Slack webhook's does).
            Err(e) => DeliveryResult::Failed {
                status: None,
                error: if e.is_timeout() {
                    format!("no answer within {:?}", target.timeout)
                } else if e.is_connect() {
                    "could not connect".to_owned()
                } else {
                    "the request failed".to_owned()
                },
            },
        }
    }
}

/// `1h30m`, `45s`: how an agent file writes a duration.
fn humantime_short(d: Duration) -> String {
    let mut secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_written_as_agent_files_write_them() {
        assert_eq!(humantime_short(Duration::from_secs(5400)), "1h30m");
        assert_eq!(humantime_short(Duration::from_secs(45)), "45s");
        assert_eq!(humantime_short(Duration::from_millis(300)), "300ms");
        assert_eq!(humantime_short(Duration::from_secs(90_061)), "1d1h1m1s");
    }
}
