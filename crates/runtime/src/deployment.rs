//! What one process serves with, assembled once: its store wired to the
//! deployment (what its commits write to the outbox is published through
//! one relay; events the notification targets want get their `Notify` row;
//! a turn's run is pinned to its agent's version; the notified events its
//! own commits claim are sent from here), the agent file, the registries
//! of the versions runs are pinned to, and the notifier.
//!
//! Every process part takes a `Deployment` (the worker, the API, the
//! inline runner, the bench), so how a store is wired lives here alone.
//! A part built from the same deployment shares its relay, its circuit
//! breakers and its pinned registries.

use std::sync::Arc;

use agentenkit_queue::QueueAdapter;
use agentenkit_store::Store;

use crate::agent::Registry;

mod relisting;
use crate::agent_loop::CrashPoint;
use crate::notify::{Notifier, SendsHere};
use crate::replies::Replies;
use crate::versions::PinnedRegistries;
use crate::Relay;

/// A process's store, agent file and what sends for them, wired once.
#[derive(Clone)]
pub struct Deployment {
    /// The store as the process connected it, before any wiring: what the
    /// deployment is assembled again from (`with_crash_point`,
    /// `with_relay`), and what a process of the same store (a bench's
    /// worker) starts from.
    connected: Store,
    /// `connected` publishing through `relay`, notifying the targets'
    /// events, pinning turns, and claiming the notified events its commits
    /// write for this process to send (`sends_here`): what every part
    /// writes with. (The notifier writes its retries without the claim:
    /// they are published, never claimed here.)
    store: Store,
    relay: Relay,
    /// Holds the registry new turns are served from (`registry()`), and
    /// those of the versions runs are pinned to.
    pinned: Arc<PinnedRegistries>,
    notifier: Notifier,
    sends_here: Option<SendsHere>,
    /// Notifications this process sends at once, if it sends any.
    sending: Option<usize>,
}

impl Deployment {
    /// `store` and `relay` wired for `registry`'s agent file: this
    /// process's commits publish through `relay`, write the `Notify` rows
    /// the registry's targets want, pin each turn's run to its agent's
    /// version, and (when the file has targets) send the events they claim
    /// from here, `concurrency` at a time.
    pub fn assemble(
        store: Store,
        relay: Relay,
        registry: Arc<Registry>,
        concurrency: usize,
    ) -> Deployment {
        Self::wired(store, relay, registry, Some(concurrency), None)
    }

    /// [`Deployment::assemble`] for a process that sends no notification
    /// itself (the reaper, which may not hold the targets' secrets): the
    /// `Notify` rows its commits write are published for the workers.
    pub fn without_sending(store: Store, relay: Relay, registry: Arc<Registry>) -> Deployment {
        Self::wired(store, relay, registry, None, None)
    }

    /// `sending`: how many notifications this process sends at once, if
    /// it sends those its commits claim.
    fn wired(
        connected: Store,
        relay: Relay,
        registry: Arc<Registry>,
        sending: Option<usize>,
        crash: Option<CrashPoint>,
    ) -> Deployment {
        let publishing = registry.prepare(relay.attach(connected.clone()));
        let pinned = Arc::new(PinnedRegistries::new(registry));
        let notifier = Notifier::new(publishing.clone(), pinned.clone(), crash);
        let (store, sends_here) = match sending {
            Some(concurrency) => SendsHere::attach(publishing, notifier.clone(), concurrency),
            None => (publishing, None),
        };
        Deployment {
            pinned,
            connected,
            store,
            relay,
            notifier,
            sends_here,
            sending,
        }
    }

    /// The same deployment, its notifier stopping at the crash point
    /// `crash` (tests of crash safety).
    pub fn with_crash_point(&self, crash: CrashPoint) -> Deployment {
        let deployment = Self::wired(
            self.connected.clone(),
            self.relay.clone(),
            self.registry(),
            self.sending,
            Some(crash),
        );
        Deployment {
            pinned: self.pinned.clone(),
            store: deployment.store.sharing_pins_of(&self.store),
            ..deployment
        }
    }

    /// The same deployment publishing through `relay` instead (another
    /// publish timeout, a queue that fails on purpose).
    pub fn with_relay(&self, relay: Relay) -> Deployment {
        let deployment = Self::wired(
            self.connected.clone(),
            relay,
            self.registry(),
            self.sending,
            None,
        );
        Deployment {
            pinned: self.pinned.clone(),
            store: deployment.store.sharing_pins_of(&self.store),
            ..deployment
        }
    }

    /// The store every part of the process writes with.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The store as connected, wired to nothing (reads, and tools that
    /// write nothing that must be published).
    pub fn connected(&self) -> &Store {
        &self.connected
    }

    pub fn relay(&self) -> &Relay {
        &self.relay
    }

    pub fn queue(&self) -> Arc<dyn QueueAdapter> {
        self.relay.queue()
    }

    /// The registry new turns are served from: the agent file as loaded,
    /// or as listed again since (see [`Deployment::watch_servers`]).
    pub fn registry(&self) -> Arc<Registry> {
        self.pinned.current()
    }

    /// The registries of the agent versions runs are pinned to, built
    /// once per version and shared by every part of the process.
    pub fn pinned(&self) -> &Arc<PinnedRegistries> {
        &self.pinned
    }

    pub fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    /// What sends the events this process's commits claim, when the
    /// deployment has notification targets.
    pub fn sends_here(&self) -> Option<&SendsHere> {
        self.sends_here.as_ref()
    }

    /// Replies and reclaims through this deployment (the answer path of
    /// the API, the library and the terminal).
    pub fn replies(&self) -> Replies {
        Replies::new(self.store.clone(), self.pinned.clone())
    }
}
