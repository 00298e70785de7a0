//! One LISTEN connection per API process, fanned out to every stream: a
//! thread's subscribers wake when any process commits an event for it.

use std::time::Duration;

use agentenkit_core::ThreadId;
use agentenkit_store::Store;
use tokio::sync::{broadcast, OnceCell};

pub struct EventHub {
    store: Store,
    sender: OnceCell<broadcast::Sender<ThreadId>>,
}

impl EventHub {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            sender: OnceCell::new(),
        }
    }

    /// Subscribes to "thread X has new events"; starts the listener on first
    /// use. A lagging or reconnecting listener can miss a wake-up, so
    /// streams also re-read on a timer.
    pub async fn subscribe(&self) -> broadcast::Receiver<ThreadId> {
        self.sender
            .get_or_init(|| async {
                let (sender, _) = broadcast::channel(4096);
                // Listen before the first subscriber reads, so that nothing
                // it is about to wait for can be committed unheard.
                let first = match self.store.listen_events().await {
                    Ok(notifications) => Some(notifications),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot listen for events; retrying");
                        None
                    }
                };
                tokio::spawn(listen(self.store.clone(), sender.clone(), first));
                sender
            })
            .await
            .subscribe()
    }
}

async fn listen(
    store: Store,
    sender: broadcast::Sender<ThreadId>,
    mut first: Option<tokio::sync::mpsc::Receiver<ThreadId>>,
) {
    loop {
        let listening = match first.take() {
            Some(notifications) => Ok(notifications),
            None => store.listen_events().await,
        };
        match listening {
            Ok(mut notifications) => {
                while let Some(thread) = notifications.recv().await {
                    // No subscriber right now is fine.
                    let _ = sender.send(thread);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot listen for events"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
