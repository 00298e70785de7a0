//! The queue port of agentenkit and its two adapters.
//!
//! [`QueueAdapter`] is what the runtime needs from a message broker: publish
//! a message durably (now, or after a delay), and consume messages with
//! manual acknowledgement. [`rabbit::RabbitQueue`] is the production adapter
//! (RabbitMQ via lapin, no plugins); [`memory::MemoryQueue`] runs everything
//! in one process for `agentenkit dev --queue memory` and unit tests.

use std::time::Duration;

use agentenkit_core::{QueueMessage, TraceContext};
use async_trait::async_trait;

pub mod error;
pub mod ladder;
pub mod lazy;
pub mod memory;
pub mod rabbit;

pub use error::{Error, Result};

/// Names of everything a deployment declares on the broker. Tests use a
/// unique prefix each, so they can run in parallel on one broker.
#[derive(Debug, Clone)]
pub struct Topology {
    /// `agentenkit` in production: queues are `agentenkit.segments`, ….
    pub prefix: String,
    /// When set, every queue is declared with `x-expires` (and every
    /// exchange auto-delete) so that a test's topology vanishes once unused.
    /// Never set in production: an idle delay queue would expire with the
    /// messages waiting in it.
    pub queue_expires: Option<Duration>,
    /// Delays (ms) that get a lane of their own: one hop instead of one per
    /// set bit (see [`ladder`]). The agents' configured TTLs.
    pub delay_lanes: Vec<u64>,
    /// Classic queues (one node), or quorum queues for a cluster: replicated,
    /// and dead-lettering at least once, so a node lost while a message
    /// waits in a delay queue loses no expiry.
    pub queue_type: QueueType,
}

/// How the segment, dead-letter and delay queues are declared
/// (`AGENTENKIT_QUEUE_TYPE`). A queue keeps its type: switching an existing
/// deployment needs a new prefix (or its queues deleted while empty).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum QueueType {
    #[default]
    Classic,
    Quorum,
}

impl std::str::FromStr for QueueType {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "classic" => Ok(QueueType::Classic),
            "quorum" => Ok(QueueType::Quorum),
            other => Err(format!("unknown queue type {other:?} (classic or quorum)")),
        }
    }
}

impl std::fmt::Display for QueueType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QueueType::Classic => "classic",
            QueueType::Quorum => "quorum",
        })
    }
}

impl Default for Topology {
    fn default() -> Self {
        Self {
            prefix: "agentenkit".to_owned(),
            queue_expires: None,
            delay_lanes: Vec::new(),
            queue_type: QueueType::Classic,
        }
    }
}

impl Topology {
    /// The durable queue every segment message ends up on.
    pub fn segments_queue(&self) -> String {
        format!("{}.segments", self.prefix)
    }

    /// The durable queue notifications and reminders are sent from, apart
    /// from the segments' so that slow receivers cannot hold the slots of
    /// the workers' segments. One that comes back from the delay ladder
    /// lands on the segments' queue, whose consumer forwards it here.
    pub fn notifications_queue(&self) -> String {
        format!("{}.notifications", self.prefix)
    }

    /// Where a message goes that kept failing (or could not be read):
    /// kept for a person to look at, never consumed by workers.
    pub fn dead_queue(&self) -> String {
        format!("{}.dead", self.prefix)
    }

    /// The exchange the delay ladder dead-letters into once a message's
    /// delay has run out; it routes to [`Topology::segments_queue`].
    pub fn delivery_exchange(&self) -> String {
        format!("{}.delivery", self.prefix)
    }

    /// Name of both the queue and the exchange of delay level `level`
    /// (zero-padded so that the levels sort in a broker's listing).
    pub fn delay_level(&self, level: u8) -> String {
        format!("{}.delay.{level:02}", self.prefix)
    }

    /// Name of the queue of the lane of `lane_ms`.
    pub fn delay_lane(&self, lane_ms: u32) -> String {
        format!("{}.delay.after-{lane_ms}", self.prefix)
    }

    /// The lanes, as ladder delays: sorted, distinct, each within the
    /// ladder's reach and longer than 0.
    pub fn lanes(&self) -> Vec<u32> {
        let mut lanes: Vec<u32> = self
            .delay_lanes
            .iter()
            .filter_map(|&ms| u32::try_from(ms).ok())
            .filter(|&ms| ms > 0)
            .collect();
        lanes.sort_unstable();
        lanes.dedup();
        lanes
    }
}

/// What the runtime needs from a broker.
#[async_trait]
pub trait QueueAdapter: Send + Sync + 'static {
    /// Publishes `message` after `delay` (at once when zero: to its queue,
    /// the notifications queue for a notification, else the segment queue;
    /// delayed: so that it reaches the segment queue then, millisecond
    /// resolution, surviving a broker restart), persistent; returns once
    /// the broker has confirmed it. `trace` is the context of the span that
    /// sent it, for the span that handles it to continue
    /// ([`Delivery::trace`]). Every publish of an adapter comes here.
    async fn publish_traced(
        &self,
        message: &QueueMessage,
        delay: Duration,
        trace: Option<&TraceContext>,
    ) -> Result<()>;

    /// [`QueueAdapter::publish_traced`] at once, carrying no trace.
    async fn publish(&self, message: &QueueMessage) -> Result<()> {
        self.publish_traced(message, Duration::ZERO, None).await
    }

    /// [`QueueAdapter::publish_traced`] after `delay`, carrying no trace.
    async fn publish_delayed(&self, message: &QueueMessage, delay: Duration) -> Result<()> {
        self.publish_traced(message, delay, None).await
    }

    /// How many delay queues a message published with `delay` passes
    /// through on its way (each a persistent write on the broker); 0 for an
    /// adapter that delays without the broker.
    fn delay_hops(&self, delay: Duration) -> usize {
        let _ = delay;
        0
    }

    /// Starts consuming the segment queue with at most `prefetch`
    /// unacknowledged deliveries at once. Survives broker restarts: the
    /// stream reconnects; deliveries of a lost channel are redelivered.
    async fn consume(&self, prefetch: u16) -> Result<Deliveries>;

    /// Starts consuming the notifications queue ([`Topology::notifications_queue`])
    /// with at most `prefetch` unacknowledged deliveries at once, as
    /// [`QueueAdapter::consume`] does the segment queue.
    async fn consume_notifications(&self, prefetch: u16) -> Result<Deliveries>;

    /// Ok when the broker is reachable (for `/readyz`).
    async fn ready(&self) -> Result<()>;

    /// Segment messages waiting in the queue for a consumer (not those a
    /// consumer holds), when the adapter can tell. The reaper uses it to
    /// tell an orphaned outbox row (its committer died before publishing)
    /// from one queued behind a backlog.
    async fn backlog(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    /// Stops every consumer (their [`Deliveries`] end) and releases the
    /// broker connection; later calls fail with [`Error::Closed`]. Settle
    /// in-flight deliveries first: the broker redelivers unsettled ones.
    async fn close(&self) {}
}

/// A stream of deliveries; ends when the adapter is closed.
pub struct Deliveries {
    receiver: tokio::sync::mpsc::Receiver<Delivery>,
}

impl Deliveries {
    pub fn new(receiver: tokio::sync::mpsc::Receiver<Delivery>) -> Self {
        Self { receiver }
    }

    pub async fn next(&mut self) -> Option<Delivery> {
        self.receiver.recv().await
    }
}

/// One delivered message; must be acked or nacked exactly once.
pub struct Delivery {
    /// The raw body: the consumer parses it, so a malformed message can be
    /// logged and dropped rather than crash a consumer.
    pub body: Vec<u8>,
    /// True when the broker delivered this message before.
    pub redelivered: bool,
    /// Which delivery of the message this is, from 1: hand-backs are
    /// counted in the message itself, and a broker redelivery (a consumer
    /// died holding it) counts once more.
    pub deliveries: u32,
    /// The context of the span that published it (W3C `traceparent` and
    /// `tracestate` headers), when it came with a well-formed one.
    pub trace: Option<TraceContext>,
    acker: Box<dyn Acknowledge>,
}

/// The header that carries how often a message was handed back.
pub const DELIVERIES_HEADER: &str = "x-agentenkit-deliveries";
/// The headers that carry the sender's span (W3C trace context, the names
/// the OpenTelemetry messaging conventions give them on AMQP).
pub const TRACEPARENT_HEADER: &str = "traceparent";
pub const TRACESTATE_HEADER: &str = "tracestate";

impl Delivery {
    pub fn new(body: Vec<u8>, redelivered: bool, acker: Box<dyn Acknowledge>) -> Self {
        Self {
            body,
            redelivered,
            deliveries: 1 + u32::from(redelivered),
            trace: None,
            acker,
        }
    }

    /// The same delivery, continuing the span `trace` names.
    pub fn with_trace(mut self, trace: Option<TraceContext>) -> Self {
        self.trace = trace;
        self
    }

    /// The same delivery, `handed_back` deliveries having come before it
    /// (read from the message), plus one if the broker redelivered it.
    pub fn with_handed_back(mut self, handed_back: u32) -> Self {
        self.deliveries = handed_back
            .saturating_add(1)
            .saturating_add(u32::from(self.redelivered));
        self
    }

    /// Hands the message back for a later delivery, counted: it goes to the
    /// back of the queue carrying this delivery's number, then this one is
    /// acked. If the message cannot be sent back it is requeued as is.
    pub async fn hand_back(self) -> Result<()> {
        self.acker
            .hand_back(self.body, self.deliveries, self.trace.as_ref())
            .await
    }

    /// Moves the message to the dead-letter queue (see
    /// [`Topology::dead_queue`]), then acks it.
    pub async fn dead_letter(self) -> Result<()> {
        self.acker
            .dead_letter(self.body, self.deliveries, self.trace.as_ref())
            .await
    }

    pub fn message(&self) -> std::result::Result<QueueMessage, serde_json::Error> {
        QueueMessage::from_bytes(&self.body)
    }

    pub async fn ack(self) -> Result<()> {
        self.acker.ack().await
    }

    /// `requeue = true` hands the message back to the broker for redelivery.
    pub async fn nack(self, requeue: bool) -> Result<()> {
        self.acker.nack(requeue).await
    }
}

/// How an adapter settles one delivery.
#[async_trait]
pub trait Acknowledge: Send + Sync {
    async fn ack(self: Box<Self>) -> Result<()>;
    async fn nack(self: Box<Self>, requeue: bool) -> Result<()>;
    /// Sends `body` back to the queue marked as delivered `deliveries`
    /// times (with the trace context it came with), then acks; requeues the
    /// original if that fails.
    async fn hand_back(
        self: Box<Self>,
        body: Vec<u8>,
        deliveries: u32,
        trace: Option<&TraceContext>,
    ) -> Result<()>;
    /// Sends `body` to the dead-letter queue, then acks; requeues the
    /// original if that fails.
    async fn dead_letter(
        self: Box<Self>,
        body: Vec<u8>,
        deliveries: u32,
        trace: Option<&TraceContext>,
    ) -> Result<()>;
}
