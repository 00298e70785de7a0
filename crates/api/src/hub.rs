//! One event watch per API process, fanned out to the streams of each
//! thread: a stream wakes only when some process commits an event of its
//! own thread, and an owner holds at most a fixed number of streams.
//!
//! The watch polls the `events` table (see `agentenkit_store::EventWatch`)
//! while anyone is subscribed, and stops after a while without subscribers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agentenkit_core::{Owner, ThreadId};
use agentenkit_store::{EventWatch, Store};
use tokio::sync::watch;

/// A watch without subscribers for this long stops polling.
const IDLE_STOP: Duration = Duration::from_secs(5);

pub struct EventHub {
    store: Store,
    poll_every: Duration,
    max_per_owner: usize,
    state: Arc<Mutex<HubState>>,
}

#[derive(Default)]
struct HubState {
    /// Per watched thread: a counter bumped on news, and its subscribers.
    threads: HashMap<ThreadId, (watch::Sender<u64>, usize)>,
    streams_per_owner: HashMap<Owner, usize>,
    /// A poll task runs. Subscribing and the task's stopping both hold the
    /// lock, so the task never stops with a subscriber it has not seen.
    polling: bool,
}

/// The owner already holds the most streams allowed.
#[derive(Debug)]
pub struct TooManyStreams {
    pub max: usize,
}

/// One stream's registration; dropping it unsubscribes.
pub struct Subscription {
    thread: ThreadId,
    owner: Owner,
    news: watch::Receiver<u64>,
    state: Arc<Mutex<HubState>>,
}

fn lock(state: &Mutex<HubState>) -> MutexGuard<'_, HubState> {
    // The state stays consistent across a panic (plain counters), so a
    // poisoned lock is used as is.
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl EventHub {
    pub fn new(store: Store, poll_every: Duration, max_per_owner: usize) -> Self {
        Self {
            store,
            poll_every,
            max_per_owner,
            state: Arc::default(),
        }
    }

    /// Subscribes `owner`'s stream to news of `thread`. The watch runs (or
    /// is started) before this returns, so an event committed after it is
    /// seen.
    pub async fn subscribe(
        &self,
        thread: ThreadId,
        owner: &Owner,
    ) -> Result<Subscription, TooManyStreams> {
        // The watch's starting point is read before registering, outside
        // the lock; a watch started later than needed only looks back more.
        let needs_start = !lock(&self.state).polling;
        let watch = if needs_start {
            match self.store.event_watch().await {
                Ok(watch) => Some(watch),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the event watch; retrying");
                    None
                }
            }
        } else {
            None
        };
        let mut state = lock(&self.state);
        let held = state.streams_per_owner.entry(owner.clone()).or_default();
        if *held >= self.max_per_owner {
            return Err(TooManyStreams {
                max: self.max_per_owner,
            });
        }
        *held += 1;
        let (sender, subscribers) = state
            .threads
            .entry(thread)
            .or_insert_with(|| (watch::channel(0).0, 0));
        *subscribers += 1;
        let news = sender.subscribe();
        if !state.polling {
            state.polling = true;
            tokio::spawn(poll(
                self.store.clone(),
                self.poll_every,
                watch,
                self.state.clone(),
            ));
        }
        Ok(Subscription {
            thread,
            owner: owner.clone(),
            news,
            state: self.state.clone(),
        })
    }

    /// Streams `owner` holds now.
    #[cfg(test)]
    fn streams_of(&self, owner: &Owner) -> usize {
        lock(&self.state)
            .streams_per_owner
            .get(owner)
            .copied()
            .unwrap_or(0)
    }
}

impl Subscription {
    /// Marks every wake-up so far as seen: call before reading the thread,
    /// then [`Subscription::changed`] returns for any news after the mark.
    pub fn mark_seen(&mut self) {
        self.news.borrow_and_update();
    }

    /// Until the thread has news not yet marked seen.
    pub async fn changed(&mut self) {
        if self.news.changed().await.is_err() {
            // The sender went with the thread's entry, which only happens
            // once this subscription is dropped; wait for the re-read timer.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        if let Some(held) = state.streams_per_owner.get_mut(&self.owner) {
            *held -= 1;
            if *held == 0 {
                state.streams_per_owner.remove(&self.owner);
            }
        }
        if let Some((_, subscribers)) = state.threads.get_mut(&self.thread) {
            *subscribers -= 1;
            if *subscribers == 0 {
                state.threads.remove(&self.thread);
            }
        }
    }
}

async fn poll(
    store: Store,
    every: Duration,
    mut watch: Option<EventWatch>,
    state: Arc<Mutex<HubState>>,
) {
    let mut idle_since = None;
    loop {
        tokio::time::sleep(every).await;
        {
            let mut hub = lock(&state);
            if hub.threads.is_empty() {
                let since = *idle_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= IDLE_STOP {
                    hub.polling = false;
                    return;
                }
                continue;
            }
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
                let hub = lock(&state);
                for thread in threads {
                    if let Some((sender, _)) = hub.threads.get(&thread) {
                        sender.send_modify(|n| *n = n.wrapping_add(1));
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "event watch poll failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(max: usize) -> EventHub {
        // The store is never reached: a watch that cannot start retries in
        // its task, and these tests only count subscriptions.
        let config = agentenkit_store::StoreConfig::new("postgres://nobody@127.0.0.1:1/none");
        let store = Store::connect(&config).expect("a lazy pool");
        EventHub::new(store, Duration::from_secs(3600), max)
    }

    #[tokio::test]
    async fn an_owner_holds_at_most_the_limit_and_a_dropped_stream_frees_its_place() {
        let hub = hub(2);
        let alice = Owner("alice".into());
        let bob = Owner("bob".into());
        let thread = ThreadId::new();
        let first = hub.subscribe(thread, &alice).await.expect("first");
        let _second = hub
            .subscribe(ThreadId::new(), &alice)
            .await
            .expect("second");
        let refused = hub
            .subscribe(thread, &alice)
            .await
            .err()
            .expect("third refused");
        assert_eq!(refused.max, 2);
        let _bobs = hub
            .subscribe(thread, &bob)
            .await
            .expect("another owner's count");
        drop(first);
        assert_eq!(hub.streams_of(&alice), 1);
        let _again = hub
            .subscribe(thread, &alice)
            .await
            .expect("a place was freed");
    }

    #[tokio::test]
    async fn news_of_one_thread_wakes_only_its_subscribers() {
        let hub = hub(8);
        let owner = Owner("alice".into());
        let (one, other) = (ThreadId::new(), ThreadId::new());
        let mut on_one = hub.subscribe(one, &owner).await.unwrap();
        let mut on_other = hub.subscribe(other, &owner).await.unwrap();
        on_one.mark_seen();
        on_other.mark_seen();
        // What the poll task does when thread `one` has news.
        lock(&hub.state).threads[&one].0.send_modify(|n| *n += 1);
        tokio::time::timeout(Duration::from_secs(1), on_one.changed())
            .await
            .expect("the thread's stream wakes");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), on_other.changed())
                .await
                .is_err(),
            "another thread's stream does not"
        );
    }
}
