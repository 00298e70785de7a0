//! Notifications sent by the process that commits their event.
//!
//! Through the queue, each notified event cost two transactions of its
//! own: the worker that took the `Notify` message read the event and
//! claimed its delivery in one, and recorded what the targets answered in
//! another. A process that knows the targets (it loaded the agent file)
//! can do better: the transaction that writes the event also claims its
//! first attempt for every target that wants it, and returns only the
//! event's id and time: once committed the process sends at once, from
//! memory (the event as the transaction wrote it), and only the record
//! costs a transaction.
//!
//! Nothing is lost when it cannot: the event's `Notify` outbox row is
//! written as always, due when the claim runs out. A process too busy to
//! send publishes it delayed by the claim; one that dies leaves it to the
//! reaper. Either way a worker then claims the next attempt and sends it
//! through the notifications queue, under the same delivery id.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agentenkit_core::{EventType, QueueMessage, RunId, ThreadId};
use serde_json::Value;

use crate::notifications::DeliveryAttempt;
use crate::outbox::OutboxRow;
use crate::views::EventView;

/// An event committed with its first attempt claimed for `attempts`'
/// targets, to send now.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedEvent {
    /// The event as readers see it.
    pub event: EventView,
    /// Its `Notify` message, whose outbox row the record consumes.
    pub message: QueueMessage,
    pub attempts: Vec<DeliveryAttempt>,
}

/// A notified event as its transaction writes it, whole, with the targets
/// its statement (`event_insert::NOTIFY_HERE_SQL`) claims it for: what
/// the database adds, its id and time, comes back from that statement.
/// Reading the event back instead cost a join of four relations per
/// notified event, the most expensive statement of a notified cycle.
#[derive(Debug)]
pub(crate) struct EventDraft {
    thread_id: ThreadId,
    run_id: RunId,
    event_type: EventType,
    /// As readers see it (`threads::event_view`): with what is computed
    /// on read.
    data: Value,
    targets: Vec<String>,
    /// How long the claim holds, and so when the outbox row is due (ms).
    claim_ms: u64,
}

impl EventDraft {
    pub(crate) fn new(
        thread_id: ThreadId,
        run_id: RunId,
        event_type: EventType,
        data: Value,
        targets: &[String],
        claim_ms: u64,
    ) -> Self {
        EventDraft {
            thread_id,
            run_id,
            event_type,
            data: crate::threads::with_arguments_hash(event_type, data),
            targets: targets.to_vec(),
            claim_ms,
        }
    }

    /// The outbox row its statement returned, with this event.
    pub(crate) fn claimed_row(&self, row: &tokio_postgres::Row) -> OutboxRow {
        let event_id: i64 = row.get("event_id");
        let message = QueueMessage::Notify {
            run_id: self.run_id,
            event_id,
        };
        let claimed = ClaimedEvent {
            event: EventView {
                id: event_id,
                thread_id: self.thread_id,
                run_id: Some(self.run_id),
                event_type: self.event_type,
                data: self.data.clone(),
                created_at: row.get("created_at"),
            },
            message: message.clone(),
            attempts: self
                .targets
                .iter()
                .map(|target| DeliveryAttempt {
                    target: target.clone(),
                    attempt: 1,
                })
                .collect(),
        };
        OutboxRow {
            id: row.get("outbox_id"),
            message,
            delay_ms: self.claim_ms,
            claimed: Some(Arc::new(claimed)),
            trace: None,
        }
    }
}

/// What sends the events a store's transactions claimed (the runtime's
/// notifier).
pub trait LocalSender: Send + Sync {
    /// Takes `event` to send now (true), or leaves it (false) when it
    /// cannot (it is busy): its message is then published, delayed by the
    /// claim.
    fn offer(&self, event: Arc<ClaimedEvent>) -> bool;
}

/// Which targets want each event type, how long a claim lasts, and who
/// sends (see [`crate::Store::with_sent_here`]).
#[derive(Clone)]
pub struct SentHere {
    targets: HashMap<EventType, Vec<String>>,
    claim: Duration,
    sender: Arc<dyn LocalSender>,
}

impl SentHere {
    /// `targets`: each target with the event types it wants; `claim`: the
    /// longest attempt's timeout and some.
    pub fn new(
        targets: impl IntoIterator<Item = (String, Vec<EventType>)>,
        claim: Duration,
        sender: Arc<dyn LocalSender>,
    ) -> SentHere {
        let mut by_type: HashMap<EventType, Vec<String>> = HashMap::new();
        for (target, events) in targets {
            for event in events {
                by_type.entry(event).or_default().push(target.clone());
            }
        }
        SentHere {
            targets: by_type,
            claim,
            sender,
        }
    }

    /// The targets an event of `event_type` is claimed for.
    pub(crate) fn targets_of(&self, event_type: EventType) -> Option<&[String]> {
        self.targets
            .get(&event_type)
            .map(Vec::as_slice)
            .filter(|t| !t.is_empty())
    }

    pub(crate) fn claim_ms(&self) -> u64 {
        self.claim.as_millis() as u64
    }

    pub(crate) fn sender(&self) -> &dyn LocalSender {
        self.sender.as_ref()
    }
}
