//! The processes of a test's deployment: each worker, API or reaper
//! assembles its own `Deployment` on the test's store and broker, as a
//! process of its agent file would.

use std::sync::Arc;

use agentenkit_runtime::{Deployment, Registry, Relay, Worker};

use super::TestEnv;

impl TestEnv {
    /// The deployment a process of `registry`'s agent file assembles on
    /// this test's store and broker, sending `concurrency` notifications
    /// at once.
    pub fn deployment_of(&self, registry: Arc<Registry>, concurrency: usize) -> Deployment {
        Deployment::assemble(
            self.connected.clone(),
            Relay::new(self.queue.clone()),
            registry,
            concurrency,
        )
    }

    /// A reaper process of this test's agent file (it sends no
    /// notification itself, as the reaper binary does not).
    pub fn reaper(&self) -> Deployment {
        Deployment::without_sending(
            self.connected.clone(),
            self.relay.clone(),
            self.registry.clone(),
        )
    }

    /// A worker process of `registry`'s agent file.
    pub fn worker_of(&self, registry: Arc<Registry>) -> Worker {
        let concurrency = usize::from(self.worker_config.notify_prefetch);
        Worker::new(
            &self.deployment_of(registry, concurrency),
            self.worker_config.clone(),
        )
    }
}
