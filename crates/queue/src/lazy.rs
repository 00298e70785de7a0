//! A queue whose broker arrives later: [`LazyQueue`].

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agentenkit_core::QueueMessage;
use async_trait::async_trait;

use crate::{Deliveries, Error, QueueAdapter, Result};

/// A queue adapter whose broker connection is made elsewhere, later (a
/// task that waits for the broker, then [`LazyQueue::connected`]). Until
/// then every call fails as an unreachable broker would: a publisher keeps
/// its messages to retry (the outbox holds them anyway), and `ready` says
/// the broker is away. For a process that must serve while the broker is
/// down, such as the API: its answers and new turns go to the outbox.
#[derive(Clone, Default)]
pub struct LazyQueue {
    broker: Arc<OnceLock<Arc<dyn QueueAdapter>>>,
}

impl LazyQueue {
    pub fn new() -> Self {
        Self::default()
    }

    /// The broker is here: every later call goes to `queue`. Only the
    /// first call counts.
    pub fn connected(&self, queue: Arc<dyn QueueAdapter>) {
        let _ = self.broker.set(queue);
    }

    /// Whether the broker has arrived.
    pub fn is_connected(&self) -> bool {
        self.broker.get().is_some()
    }

    fn broker(&self) -> Result<&Arc<dyn QueueAdapter>> {
        self.broker
            .get()
            .ok_or_else(|| Error::Connection("not connected to the broker yet".into()))
    }
}

#[async_trait]
impl QueueAdapter for LazyQueue {
    async fn publish_traced(
        &self,
        message: &QueueMessage,
        delay: Duration,
        trace: Option<&agentenkit_core::TraceContext>,
    ) -> Result<()> {
        self.broker()?.publish_traced(message, delay, trace).await
    }

    fn delay_hops(&self, delay: Duration) -> usize {
        self.broker().map_or(0, |broker| broker.delay_hops(delay))
    }

    async fn consume(&self, prefetch: u16) -> Result<Deliveries> {
        self.broker()?.consume(prefetch).await
    }

    async fn consume_notifications(&self, prefetch: u16) -> Result<Deliveries> {
        self.broker()?.consume_notifications(prefetch).await
    }

    async fn ready(&self) -> Result<()> {
        self.broker()?.ready().await
    }

    async fn backlog(&self) -> Result<Option<u64>> {
        self.broker()?.backlog().await
    }

    async fn close(&self) {
        if let Ok(broker) = self.broker() {
            broker.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryQueue;
    use agentenkit_core::RunId;

    #[tokio::test]
    async fn calls_fail_as_an_unreachable_broker_until_it_arrives() {
        let lazy = LazyQueue::new();
        let message = QueueMessage::Segment {
            run_id: RunId::new(),
            seq: 1,
        };
        assert!(!lazy.is_connected());
        assert!(matches!(lazy.ready().await, Err(Error::Connection(_))));
        assert!(matches!(
            lazy.publish(&message).await,
            Err(Error::Connection(_))
        ));
        let memory = Arc::new(MemoryQueue::new());
        lazy.connected(memory.clone());
        assert!(lazy.is_connected());
        lazy.ready().await.expect("ready once connected");
        let mut deliveries = lazy.consume(1).await.expect("consume");
        lazy.publish(&message).await.expect("published");
        let delivered = deliveries.next().await.expect("a delivery");
        assert_eq!(delivered.message().expect("a message"), message);
    }
}
