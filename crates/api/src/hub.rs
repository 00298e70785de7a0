//! One event watch per API process, fanned out to every stream: a thread's
//! subscribers wake when any process commits an event for it.
//!
//! The watch polls the `events` table (see `agentenkit_store::EventWatch`)
//! while anyone is subscribed, and stops after a while without subscribers.

use std::sync::Arc;
use std::time::Duration;

use agentenkit_core::ThreadId;
use agentenkit_store::{EventWatch, Store};
use tokio::sync::{broadcast, Mutex};

/// A watch without subscribers for this long stops polling.
const IDLE_STOP: Duration = Duration::from_secs(5);

pub struct EventHub {
    store: Store,
    poll_every: Duration,
    /// The sender of the running watch; `None` when none runs. Subscribing
    /// and stopping both hold this lock, so a watch never stops with a
    /// subscriber it has not seen.
    running: Arc<Mutex<Option<broadcast::Sender<ThreadId>>>>,
}

impl EventHub {
    pub fn new(store: Store, poll_every: Duration) -> Self {
        Self {
            store,
            poll_every,
            running: Arc::new(Mutex::new(None)),
        }
    }

    /// Subscribes to "thread X has new events". The watch starts (or is
    /// known to run) before this returns, so anything the subscriber then
    /// waits for is seen. A lagging subscriber can miss a wake-up, so streams
    /// also re-read on a timer.
    pub async fn subscribe(&self) -> broadcast::Receiver<ThreadId> {
        let mut running = self.running.lock().await;
        if let Some(sender) = running.as_ref() {
            return sender.subscribe();
        }
        let watch = match self.store.event_watch().await {
            Ok(watch) => Some(watch),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the event watch; retrying");
                None
            }
        };
        let (sender, receiver) = broadcast::channel(4096);
        *running = Some(sender.clone());
        tokio::spawn(poll(
            self.store.clone(),
            self.poll_every,
            watch,
            sender,
            self.running.clone(),
        ));
        receiver
    }
}

async fn poll(
    store: Store,
    every: Duration,
    mut watch: Option<EventWatch>,
    sender: broadcast::Sender<ThreadId>,
    running: Arc<Mutex<Option<broadcast::Sender<ThreadId>>>>,
) {
    let mut idle_since = None;
    loop {
        tokio::time::sleep(every).await;
        if sender.receiver_count() == 0 {
            let since = *idle_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() >= IDLE_STOP {
                let mut slot = running.lock().await;
                // Checked again under the lock: a subscriber may just have come.
                if sender.receiver_count() == 0 {
                    *slot = None;
                    return;
                }
            }
            continue;
        }
        idle_since = None;
        let Some(w) = watch.as_mut() else {
            // Could not start: try again. Events from before are in the
            // table, and subscribers re-read on their own timer.
            watch = store.event_watch().await.ok();
            continue;
        };
        match store.poll_events(w).await {
            Ok(threads) => {
                for thread in threads {
                    let _ = sender.send(thread);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "event watch poll failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
