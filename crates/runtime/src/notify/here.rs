//! Sending the events this process's own transactions claimed, at once
//! and from memory (see `agentenkit_store::SentHere`): one transaction per
//! notified event (the record) instead of a read, a claim and a record
//! through the notifications queue.
//!
//! A send never holds up the commit that offered it: it runs as a task of
//! its own, at most `concurrency` at a time. What the sends got is recorded
//! by one transaction at a time, each taking every send that finished
//! within `RECORD_LINGER` of the first or while the one before committed:
//! one commit per event when idle, one for many under load. Past
//! `concurrency × QUEUED_PER_SLOT` waiting, an event is given back and its
//! `Notify` message published, delayed until its claim runs out, for a
//! worker to send as the next attempt.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentenkit_store::{ClaimedEvent, LocalSender, SentHere, Store};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Notifier;
use crate::metrics;

/// Events waiting for a slot, per slot, before more are given back.
const QUEUED_PER_SLOT: usize = 32;

/// How long a recorder waits for more sends to finish before it records:
/// under load its one commit then takes the sends of this long instead of
/// the one or two that finished meanwhile. Measured at 8 clients, 3
/// notified events a cycle: records cost 1.64 transactions a cycle without
/// it. A record only spares a later attempt (its claim holds the delivery
/// for the target's timeout and some), so a little later costs nothing.
const RECORD_LINGER: Duration = Duration::from_millis(20);

/// What sends the events a store claimed for this process.
#[derive(Clone)]
pub struct SendsHere {
    inner: Arc<Inner>,
}

struct Inner {
    notifier: Notifier,
    slots: Semaphore,
    /// What sends got, waiting to be recorded, and whether a recorder is
    /// at work: the sends that finish while one transaction records are
    /// recorded together by the next (one commit for many events under
    /// load, one each when idle).
    records: std::sync::Mutex<(Vec<agentenkit_store::RecordItem>, bool)>,
    /// Sends offered and not finished (waiting or running).
    open: AtomicUsize,
    max_open: usize,
    /// Told when `open` drops to zero.
    idle: Notify,
    /// Cancelled when a send stopped at a crash point (tests): the
    /// process is to die there.
    crashed: CancellationToken,
}

impl SendsHere {
    /// `store` as this process writes with it: claiming, in each notified
    /// event's transaction, the first attempt for every target that wants
    /// it, to send here. `None` (the store as it was) when the deployment
    /// has no targets.
    ///
    /// `notifier` sends them (its store is `store` as it was: a retry it
    /// writes is published, never claimed here); a process shares one
    /// notifier between this and its notifications queue, so a target's
    /// circuit is one, whichever way a delivery goes.
    pub fn attach(
        store: Store,
        notifier: Notifier,
        concurrency: usize,
    ) -> (Store, Option<SendsHere>) {
        let registry = notifier.registry();
        let notifications = registry.notifications();
        if notifications.events().is_empty() {
            return (store, None);
        }
        let targets: Vec<(String, Vec<agentenkit_core::EventType>)> = notifications
            .targets()
            .map(|t| (t.name.clone(), t.events.iter().collect()))
            .collect();
        let claim = notifications.claim();
        let slots = concurrency.max(1);
        let sends = SendsHere {
            inner: Arc::new(Inner {
                notifier,
                slots: Semaphore::new(slots),
                records: std::sync::Mutex::default(),
                open: AtomicUsize::new(0),
                max_open: slots * QUEUED_PER_SLOT,
                idle: Notify::new(),
                crashed: CancellationToken::new(),
            }),
        };
        let store = store.with_sent_here(SentHere::new(
            targets,
            claim,
            Arc::new(sends.clone()) as Arc<dyn LocalSender>,
        ));
        (store, Some(sends))
    }

    /// Cancelled when a send stopped at a crash point.
    pub fn crashed(&self) -> CancellationToken {
        self.inner.crashed.clone()
    }

    /// Waits up to `grace` for the sends under way. What is left is sent
    /// again, as its next attempt, once its claim runs out (the reaper
    /// publishes its outbox row).
    pub async fn drain(&self, grace: Duration) {
        let drained = tokio::time::timeout(grace, async {
            loop {
                let idle = self.inner.idle.notified();
                if self.inner.open.load(Ordering::SeqCst) == 0 {
                    return;
                }
                idle.await;
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                left = self.inner.open.load(Ordering::SeqCst),
                "notifications still being sent at shutdown are left to the reaper"
            );
        }
    }
}

impl LocalSender for SendsHere {
    fn offer(&self, event: Arc<ClaimedEvent>) -> bool {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let inner = self.inner.clone();
        if inner.open.fetch_add(1, Ordering::SeqCst) >= inner.max_open {
            inner.open.fetch_sub(1, Ordering::SeqCst);
            ::metrics::counter!(metrics::NOTIFICATIONS_GIVEN_BACK).increment(1);
            return false;
        }
        let span = tracing::info_span!(
            "notify",
            run_id = ?event.event.run_id,
            thread_id = %event.event.thread_id,
            event_id = event.event.id,
            here = true
        );
        runtime.spawn(
            async move {
                // The semaphore is never closed: a slot always comes.
                let slot = inner.slots.acquire().await;
                let item = inner.notifier.send_here(&event).await;
                drop(slot);
                if inner.notifier.crashed("notify:sent") {
                    inner.crashed.cancel();
                    inner.done(1);
                } else {
                    inner.record(item).await;
                }
            }
            .instrument(span),
        );
        true
    }
}

impl Inner {
    /// `count` sends are over (recorded, or left to the reaper).
    fn done(&self, count: usize) {
        if self.open.fetch_sub(count, Ordering::SeqCst) == count {
            self.idle.notify_waiters();
        }
    }

    /// Queues `item` for recording; records it, with whatever else
    /// finishes within [`RECORD_LINGER`] and while it records, unless a
    /// recorder is at work already (it takes this one in its round).
    async fn record(&self, item: agentenkit_store::RecordItem) {
        {
            let mut records = lock(&self.records);
            records.0.push(item);
            if records.1 {
                return;
            }
            records.1 = true;
        }
        tokio::time::sleep(RECORD_LINGER).await;
        loop {
            let batch = {
                let mut records = lock(&self.records);
                if records.0.is_empty() {
                    records.1 = false;
                    return;
                }
                std::mem::take(&mut records.0)
            };
            if let Err(e) = self.notifier.store().record_many(&batch).await {
                // Their outbox rows stay: the reaper publishes them once
                // the claims run out, and a worker sends them again.
                tracing::warn!(error = %e, events = batch.len(), "could not record notifications");
            }
            if self.notifier.crashed("notify:recorded") {
                self.crashed.cancel();
            }
            self.done(batch.len());
        }
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain data: a panic elsewhere cannot leave it half updated.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
