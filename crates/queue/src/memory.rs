//! An in-process [`QueueAdapter`] for `agentenkit dev --queue memory` and
//! unit tests.
//!
//! One FIFO shared by every consumer of a handle (clones share it). It
//! mirrors the RabbitMQ adapter where the runtime can tell the difference:
//! `prefetch` bounds unsettled deliveries per consumer, `nack(requeue)` and
//! a delivery dropped unsettled put the message back at the head with
//! `redelivered = true`, and delays past [`ladder::MAX_DELAY_MS`] are
//! refused. What it cannot mirror is durability: messages and pending
//! delays live in memory and are lost with the process, which is fine for
//! development (the outbox and the reaper recover runs from Postgres).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agentenkit_core::QueueMessage;
use async_trait::async_trait;
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use agentenkit_core::TraceContext;

use crate::{ladder, Acknowledge, Deliveries, Delivery, Error, QueueAdapter, Result};

/// A message waiting on the in-memory queue.
struct Queued {
    body: Vec<u8>,
    redelivered: bool,
    /// Hand-backs recorded in the message (see `Delivery::hand_back`).
    handed_back: u32,
    /// The sender's span, as the broker's headers would carry it.
    trace: Option<TraceContext>,
}

struct Shared {
    queue: Mutex<VecDeque<Queued>>,
    /// Dead-lettered messages, kept for inspection.
    dead: Mutex<Vec<Vec<u8>>>,
    /// Woken on every push; consumers re-check the queue.
    pushed: Notify,
    closed: CancellationToken,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Queued>> {
        // A panic while holding this lock cannot leave the deque half
        // updated (every critical section is one push or pop), so a
        // poisoned lock is still usable.
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn push_back(&self, body: Vec<u8>, trace: Option<TraceContext>) {
        self.push_handed_back(body, 0, trace);
    }

    fn push_handed_back(&self, body: Vec<u8>, handed_back: u32, trace: Option<TraceContext>) {
        self.lock().push_back(Queued {
            body,
            redelivered: false,
            handed_back,
            trace,
        });
        self.pushed.notify_waiters();
    }

    /// Requeues at the head, as RabbitMQ puts a requeued message back near
    /// its original position.
    fn push_front(&self, body: Vec<u8>, trace: Option<TraceContext>) {
        self.lock().push_front(Queued {
            body,
            redelivered: true,
            handed_back: 0,
            trace,
        });
        self.pushed.notify_waiters();
    }

    /// Waits for the next message.
    async fn pop(&self) -> Queued {
        loop {
            let pushed = self.pushed.notified();
            tokio::pin!(pushed);
            // Register before looking, so a push between the look and the
            // await still wakes us.
            pushed.as_mut().enable();
            if let Some(queued) = self.lock().pop_front() {
                return queued;
            }
            pushed.await;
        }
    }
}

/// The in-process queues (the segments' and the notifications'); clone
/// the handle to share them.
#[derive(Clone)]
pub struct MemoryQueue {
    shared: Arc<Shared>,
    notifications: Arc<Shared>,
}

impl Default for MemoryQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemoryQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryQueue")
            .field("queued", &self.len())
            .field("closed", &self.shared.closed.is_cancelled())
            .finish()
    }
}

impl MemoryQueue {
    pub fn new() -> Self {
        // One closing ends both.
        let closed = CancellationToken::new();
        let queue = || {
            Arc::new(Shared {
                queue: Mutex::new(VecDeque::new()),
                dead: Mutex::new(Vec::new()),
                pushed: Notify::new(),
                closed: closed.clone(),
            })
        };
        Self {
            shared: queue(),
            notifications: queue(),
        }
    }

    /// Messages waiting to be delivered, on both queues (not counting
    /// pending delays or unsettled deliveries).
    pub fn len(&self) -> usize {
        self.shared.lock().len() + self.notifications.lock().len()
    }

    /// The queue `message` goes to.
    fn queue_of(&self, message: &QueueMessage) -> &Arc<Shared> {
        if message.is_notification() {
            &self.notifications
        } else {
            &self.shared
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bodies of the messages dead-lettered so far (segments' first).
    pub fn dead_letters(&self) -> Vec<Vec<u8>> {
        [&self.shared, &self.notifications]
            .iter()
            .flat_map(|queue| {
                queue
                    .dead
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .clone()
            })
            .collect()
    }

    fn consume_queue(&self, queue: &Arc<Shared>, prefetch: u16) -> Result<Deliveries> {
        self.check_open()?;
        let slots = usize::from(prefetch.max(1));
        let (sender, receiver) = mpsc::channel(slots);
        let in_flight = Arc::new(Semaphore::new(slots));
        tokio::spawn(forward(Arc::clone(queue), in_flight, sender));
        Ok(Deliveries::new(receiver))
    }

    fn check_open(&self) -> Result<()> {
        if self.shared.closed.is_cancelled() {
            return Err(Error::Closed);
        }
        Ok(())
    }
}

#[async_trait]
impl QueueAdapter for MemoryQueue {
    async fn publish_traced(
        &self,
        message: &QueueMessage,
        delay: Duration,
        trace: Option<&TraceContext>,
    ) -> Result<()> {
        self.check_open()?;
        let ms = ladder::delay_ms(delay)?;
        let trace = trace.cloned();
        if ms == 0 {
            self.queue_of(message).push_back(message.to_bytes(), trace);
            return Ok(());
        }
        // Delayed in process: it goes to its own queue when due (no
        // forwarding from the segments' queue, as the broker's ladder needs).
        let shared = Arc::clone(self.queue_of(message));
        let body = message.to_bytes();
        let delay = Duration::from_millis(u64::from(ms));
        tokio::spawn(async move {
            tokio::select! {
                () = shared.closed.cancelled() => {}
                () = tokio::time::sleep(delay) => shared.push_back(body, trace),
            }
        });
        Ok(())
    }

    async fn consume(&self, prefetch: u16) -> Result<Deliveries> {
        self.consume_queue(&self.shared, prefetch)
    }

    async fn consume_notifications(&self, prefetch: u16) -> Result<Deliveries> {
        self.consume_queue(&self.notifications, prefetch)
    }

    async fn ready(&self) -> Result<()> {
        self.check_open()
    }

    async fn close(&self) {
        self.shared.closed.cancel();
    }
}

/// One consumer: takes a prefetch slot, then a message, and hands it over;
/// ends when the queue is closed or the [`Deliveries`] is dropped.
async fn forward(shared: Arc<Shared>, in_flight: Arc<Semaphore>, sender: mpsc::Sender<Delivery>) {
    loop {
        let permit = tokio::select! {
            () = shared.closed.cancelled() => return,
            () = sender.closed() => return,
            permit = Arc::clone(&in_flight).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        // Reserve the channel slot before taking a message off the queue,
        // so that a message is never taken and then lost to a dropped
        // receiver.
        let slot = tokio::select! {
            () = shared.closed.cancelled() => return,
            slot = sender.reserve() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
        };
        let queued = tokio::select! {
            () = shared.closed.cancelled() => return,
            () = sender.closed() => return,
            queued = shared.pop() => queued,
        };
        let acker = MemoryAcker {
            shared: Arc::clone(&shared),
            body: Some(queued.body.clone()),
            trace: queued.trace.clone(),
            _permit: permit,
        };
        slot.send(
            Delivery::new(queued.body, queued.redelivered, Box::new(acker))
                .with_handed_back(queued.handed_back)
                .with_trace(queued.trace),
        );
    }
}

/// Settles one in-memory delivery. Holding the consumer's prefetch permit
/// is what bounds its unsettled deliveries.
struct MemoryAcker {
    shared: Arc<Shared>,
    /// `Some` until settled; a delivery dropped unsettled is requeued, as
    /// RabbitMQ requeues the unacked deliveries of a closed channel.
    body: Option<Vec<u8>>,
    trace: Option<TraceContext>,
    _permit: OwnedSemaphorePermit,
}

#[async_trait]
impl Acknowledge for MemoryAcker {
    async fn ack(mut self: Box<Self>) -> Result<()> {
        self.body = None;
        Ok(())
    }

    async fn nack(mut self: Box<Self>, requeue: bool) -> Result<()> {
        if let Some(body) = self.body.take() {
            if requeue {
                self.shared.push_front(body, self.trace.take());
            }
        }
        Ok(())
    }

    async fn hand_back(
        mut self: Box<Self>,
        body: Vec<u8>,
        deliveries: u32,
        trace: Option<&TraceContext>,
    ) -> Result<()> {
        self.body = None;
        self.shared
            .push_handed_back(body, deliveries, trace.cloned());
        Ok(())
    }

    async fn dead_letter(
        mut self: Box<Self>,
        body: Vec<u8>,
        _deliveries: u32,
        _trace: Option<&TraceContext>,
    ) -> Result<()> {
        self.body = None;
        self.shared
            .dead
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(body);
        Ok(())
    }
}

impl Drop for MemoryAcker {
    fn drop(&mut self) {
        if let Some(body) = self.body.take() {
            if !self.shared.closed.is_cancelled() {
                self.shared.push_front(body, self.trace.take());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use agentenkit_core::RunId;
    use tokio::time::{timeout, Instant};

    use super::*;

    const WAIT: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn a_handed_back_message_counts_its_deliveries_and_a_dead_letter_leaves_the_queue() {
        let queue = MemoryQueue::new();
        let message = QueueMessage::Segment {
            run_id: RunId::new(),
            seq: 1,
        };
        queue.publish(&message).await.unwrap();
        let mut deliveries = queue.consume(1).await.unwrap();
        for n in 1..=3 {
            let delivery = timeout(WAIT, deliveries.next()).await.unwrap().unwrap();
            assert_eq!(delivery.deliveries, n);
            delivery.hand_back().await.unwrap();
        }
        let delivery = timeout(WAIT, deliveries.next()).await.unwrap().unwrap();
        assert_eq!(delivery.deliveries, 4);
        delivery.dead_letter().await.unwrap();
        assert_eq!(queue.dead_letters(), vec![message.to_bytes()]);
        assert!(queue.is_empty());
        assert!(timeout(Duration::from_millis(100), deliveries.next())
            .await
            .is_err());
    }

    /// Notifications go to their own queue, which only its consumer sees,
    /// now or after a delay; a hand-back goes back there.
    #[tokio::test]
    async fn notifications_have_a_queue_of_their_own() {
        let queue = MemoryQueue::new();
        let notify = QueueMessage::Notify {
            run_id: RunId::new(),
            event_id: 7,
        };
        let mut segments = queue.consume(4).await.unwrap();
        let mut notifications = queue.consume_notifications(4).await.unwrap();
        queue.publish(&notify).await.unwrap();
        queue
            .publish_delayed(&notify, Duration::from_millis(20))
            .await
            .unwrap();
        queue.publish(&segment(1)).await.unwrap();
        let first = next(&mut segments).await;
        assert!(matches!(
            first.message().unwrap(),
            QueueMessage::Segment { .. }
        ));
        for _ in 0..2 {
            let delivery = next(&mut notifications).await;
            assert_eq!(delivery.message().unwrap(), notify);
            delivery.ack().await.unwrap();
        }
        let handed = {
            queue.publish(&notify).await.unwrap();
            next(&mut notifications).await
        };
        handed.hand_back().await.unwrap();
        let again = next(&mut notifications).await;
        assert_eq!(again.deliveries, 2);
        assert!(
            timeout(Duration::from_millis(100), segments.next())
                .await
                .is_err(),
            "no notification reached the segments' consumer"
        );
    }

    fn segment(seq: i64) -> QueueMessage {
        QueueMessage::Segment {
            run_id: RunId::new(),
            seq,
        }
    }

    async fn next(deliveries: &mut Deliveries) -> Delivery {
        timeout(WAIT, deliveries.next())
            .await
            .expect("a delivery in time")
            .expect("the stream is open")
    }

    #[tokio::test]
    async fn publish_consume_ack() {
        let queue = MemoryQueue::new();
        let (first, second) = (segment(1), segment(2));
        queue.publish(&first).await.unwrap();
        let mut deliveries = queue.consume(8).await.unwrap();
        queue.publish(&second).await.unwrap();
        let one = next(&mut deliveries).await;
        assert_eq!(one.message().unwrap(), first);
        assert!(!one.redelivered);
        one.ack().await.unwrap();
        let two = next(&mut deliveries).await;
        assert_eq!(two.message().unwrap(), second);
        two.ack().await.unwrap();
        assert!(queue.is_empty());
        queue.ready().await.unwrap();
    }

    /// As the broker's headers do: the sender's context goes with the
    /// message, delayed, requeued or handed back; a plain publish has none.
    #[tokio::test]
    async fn the_senders_trace_goes_with_the_message() {
        let queue = MemoryQueue::new();
        let trace = TraceContext::from_headers(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            None,
        )
        .unwrap();
        let mut deliveries = queue.consume(1).await.unwrap();
        let delay = Duration::from_millis(20);
        queue
            .publish_traced(&segment(1), delay, Some(&trace))
            .await
            .unwrap();
        let delayed = next(&mut deliveries).await;
        assert_eq!(delayed.trace.as_ref(), Some(&trace));
        delayed.nack(true).await.unwrap();
        let requeued = next(&mut deliveries).await;
        assert_eq!(requeued.trace.as_ref(), Some(&trace));
        requeued.hand_back().await.unwrap();
        let handed_back = next(&mut deliveries).await;
        assert_eq!(handed_back.trace.as_ref(), Some(&trace));
        handed_back.ack().await.unwrap();
        queue.publish(&segment(2)).await.unwrap();
        assert_eq!(next(&mut deliveries).await.trace, None);
    }

    #[tokio::test]
    async fn nack_requeue_redelivers_and_nack_drop_discards() {
        let queue = MemoryQueue::new();
        let message = segment(1);
        queue.publish(&message).await.unwrap();
        let mut deliveries = queue.consume(1).await.unwrap();
        next(&mut deliveries).await.nack(true).await.unwrap();
        let again = next(&mut deliveries).await;
        assert!(again.redelivered);
        assert_eq!(again.message().unwrap(), message);
        again.nack(false).await.unwrap();
        let other = segment(2);
        queue.publish(&other).await.unwrap();
        let delivered = next(&mut deliveries).await;
        assert_eq!(
            delivered.message().unwrap(),
            other,
            "the nacked one is gone"
        );
    }

    #[tokio::test]
    async fn prefetch_bounds_unsettled_deliveries() {
        let queue = MemoryQueue::new();
        for seq in 0..3 {
            queue.publish(&segment(seq)).await.unwrap();
        }
        let mut deliveries = queue.consume(2).await.unwrap();
        let a = next(&mut deliveries).await;
        let _b = next(&mut deliveries).await;
        let blocked = timeout(Duration::from_millis(50), deliveries.next()).await;
        assert!(blocked.is_err(), "a third delivery exceeds prefetch 2");
        a.ack().await.unwrap();
        next(&mut deliveries).await;
    }

    #[tokio::test]
    async fn unsettled_delivery_of_a_dropped_consumer_goes_to_the_next() {
        let queue = MemoryQueue::new();
        let message = segment(1);
        queue.publish(&message).await.unwrap();
        let mut first = queue.consume(1).await.unwrap();
        let delivery = next(&mut first).await;
        drop(first);
        drop(delivery);
        let mut second = queue.consume(1).await.unwrap();
        let again = next(&mut second).await;
        assert!(again.redelivered);
        assert_eq!(again.message().unwrap(), message);
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_messages_arrive_in_delay_order_not_before_their_delay() {
        let queue = MemoryQueue::new();
        let (late, early) = (segment(1), segment(2));
        let start = Instant::now();
        queue
            .publish_delayed(&late, Duration::from_millis(900))
            .await
            .unwrap();
        queue
            .publish_delayed(&early, Duration::from_millis(200))
            .await
            .unwrap();
        let mut deliveries = queue.consume(8).await.unwrap();
        let one = next(&mut deliveries).await;
        assert_eq!(one.message().unwrap(), early);
        assert!(start.elapsed() >= Duration::from_millis(200));
        let two = next(&mut deliveries).await;
        assert_eq!(two.message().unwrap(), late);
        assert!(start.elapsed() >= Duration::from_millis(900));
        assert!(matches!(
            queue
                .publish_delayed(&late, Duration::from_millis(ladder::MAX_DELAY_MS + 1))
                .await,
            Err(Error::DelayTooLong(_))
        ));
    }

    #[tokio::test]
    async fn close_ends_consumers_and_refuses_publishes() {
        let queue = MemoryQueue::new();
        let mut deliveries = queue.consume(1).await.unwrap();
        queue.close().await;
        let end = timeout(WAIT, deliveries.next()).await.unwrap();
        assert!(end.is_none());
        assert!(matches!(
            queue.publish(&segment(1)).await,
            Err(Error::Closed)
        ));
        assert!(matches!(queue.ready().await, Err(Error::Closed)));
    }
}
