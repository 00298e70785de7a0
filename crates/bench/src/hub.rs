//! In-process hooks that tell the bench the exact moment a run parked,
//! resumed or completed, without any extra database traffic (polling the
//! store would add read-only commits to the very counter we measure).
//!
//! * A run is parked / completed when the worker acks its segment (the ack
//!   comes right after the segment's last commit): [`HookedQueue`] wraps the
//!   queue adapter and reports each ack as [`Key::Acked`].
//! * A segment reached the worker when the wrapped consumer hands it over
//!   ([`Key::Delivered`]), which splits latencies into client, queue and
//!   worker time.
//! * The approved tool ran when [`SendEmail::execute`] is called: it reports
//!   [`Key::Executed`] with the run id.
//!
//! Whether a run really parked or completed (rather than failed) is checked
//! afterwards with one count per phase (see `meter`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use agentenkit_core::{QueueMessage, RunId};
use agentenkit_queue::{Acknowledge, Deliveries, Delivery, QueueAdapter};
use agentenkit_runtime::{Registry, Tool, ToolContext, ToolError, ToolSpec};
use anyhow::Context;
use async_trait::async_trait;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

/// The 200-character text of the user's request and of the email body, as
/// in the peers' scripts.
pub fn body_text() -> String {
    "Hello team, please find the quarterly report attached. "
        .repeat(4)
        .chars()
        .take(200)
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    /// The worker acked segment `seq` of the run.
    Acked(RunId, i64),
    /// Segment `seq` of the run reached the worker (left the queue).
    Delivered(RunId, i64),
    /// `send_email` ran for the run.
    Executed(RunId),
}

enum Slot {
    Done(Instant),
    Waiting(oneshot::Sender<Instant>),
}

/// Meeting point of the hooks (which `notify`) and the clients (which
/// `wait`); either may come first. The instant is taken at `notify`.
#[derive(Default)]
pub struct Hub {
    slots: Mutex<HashMap<Key, Slot>>,
    nacks: AtomicU64,
}

impl Hub {
    fn slots(&self) -> MutexGuard<'_, HashMap<Key, Slot>> {
        // Every critical section is one map operation: a poisoned lock
        // cannot leave it half-updated.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn notify(&self, key: Key) {
        let now = Instant::now();
        let mut slots = self.slots();
        match slots.remove(&key) {
            Some(Slot::Waiting(tx)) => {
                let _ = tx.send(now);
            }
            // A duplicate (redelivery): the first one counts.
            Some(Slot::Done(first)) => {
                slots.insert(key, Slot::Done(first));
            }
            None => {
                slots.insert(key, Slot::Done(now));
            }
        }
    }

    /// When `key` happened; waits for it up to `timeout`.
    pub async fn wait(&self, key: Key, timeout: Duration) -> anyhow::Result<Instant> {
        let rx = {
            let mut slots = self.slots();
            match slots.remove(&key) {
                Some(Slot::Done(at)) => return Ok(at),
                Some(Slot::Waiting(_)) => anyhow::bail!("two waiters for {key:?}"),
                None => {
                    let (tx, rx) = oneshot::channel();
                    slots.insert(key, Slot::Waiting(tx));
                    rx
                }
            }
        };
        tokio::time::timeout(timeout, rx)
            .await
            .with_context(|| format!("{key:?} did not happen within {timeout:?}: is the worker consuming? (RUST_LOG=info shows it)"))?
            .context("hub dropped")
    }

    /// Segments the worker handed back (store errors): should stay 0.
    pub fn nacks(&self) -> u64 {
        self.nacks.load(Ordering::Relaxed)
    }
}

/// A queue adapter that reports every ack of a segment to the hub.
pub struct HookedQueue {
    inner: Arc<dyn QueueAdapter>,
    hub: Arc<Hub>,
    counts: PublishCounts,
}

/// Broker writes made through the adapter: publishes (immediate and
/// delayed) and the delay-queue hops the delayed ones will take.
#[derive(Default)]
pub struct PublishCounts {
    pub publishes: AtomicU64,
    pub delayed: AtomicU64,
    pub delay_hops: AtomicU64,
}

/// A reading of [`PublishCounts`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Publishes {
    pub publishes: u64,
    pub delayed: u64,
    pub delay_hops: u64,
}

impl HookedQueue {
    pub fn new(inner: Arc<dyn QueueAdapter>, hub: Arc<Hub>) -> Self {
        Self {
            inner,
            hub,
            counts: PublishCounts::default(),
        }
    }

    pub fn publishes(&self) -> Publishes {
        Publishes {
            publishes: self.counts.publishes.load(Ordering::Relaxed),
            delayed: self.counts.delayed.load(Ordering::Relaxed),
            delay_hops: self.counts.delay_hops.load(Ordering::Relaxed),
        }
    }
}

#[async_trait]
impl QueueAdapter for HookedQueue {
    async fn publish_traced(
        &self,
        message: &QueueMessage,
        delay: Duration,
        trace: Option<&agentenkit_core::TraceContext>,
    ) -> agentenkit_queue::Result<()> {
        self.counts.publishes.fetch_add(1, Ordering::Relaxed);
        if !delay.is_zero() {
            self.counts.delayed.fetch_add(1, Ordering::Relaxed);
            self.counts
                .delay_hops
                .fetch_add(self.inner.delay_hops(delay) as u64, Ordering::Relaxed);
        }
        self.inner.publish_traced(message, delay, trace).await
    }

    fn delay_hops(&self, delay: Duration) -> usize {
        self.inner.delay_hops(delay)
    }

    // Notifications carry no segment the bench waits for.
    async fn consume_notifications(&self, prefetch: u16) -> agentenkit_queue::Result<Deliveries> {
        self.inner.consume_notifications(prefetch).await
    }

    async fn consume(&self, prefetch: u16) -> agentenkit_queue::Result<Deliveries> {
        let mut inner = self.inner.consume(prefetch).await?;
        let (tx, rx) = mpsc::channel(usize::from(prefetch.max(1)));
        let hub = self.hub.clone();
        tokio::spawn(async move {
            loop {
                let delivery = tokio::select! {
                    _ = tx.closed() => break,
                    d = inner.next() => match d {
                        Some(d) => d,
                        None => break,
                    },
                };
                let key = match delivery.message() {
                    Ok(QueueMessage::Segment { run_id, seq }) => {
                        hub.notify(Key::Delivered(run_id, seq));
                        Some(Key::Acked(run_id, seq))
                    }
                    _ => None,
                };
                let (body, redelivered, deliveries, trace) = (
                    delivery.body.clone(),
                    delivery.redelivered,
                    delivery.deliveries,
                    delivery.trace.clone(),
                );
                let acker = HookAck {
                    delivery,
                    hub: hub.clone(),
                    key,
                };
                let mut hooked =
                    Delivery::new(body, redelivered, Box::new(acker)).with_trace(trace);
                hooked.deliveries = deliveries;
                if tx.send(hooked).await.is_err() {
                    // Dropped unsettled: the broker redelivers it.
                    break;
                }
            }
        });
        Ok(Deliveries::new(rx))
    }

    async fn ready(&self) -> agentenkit_queue::Result<()> {
        self.inner.ready().await
    }

    async fn close(&self) {
        self.inner.close().await
    }
}

struct HookAck {
    delivery: Delivery,
    hub: Arc<Hub>,
    key: Option<Key>,
}

#[async_trait]
impl Acknowledge for HookAck {
    async fn ack(self: Box<Self>) -> agentenkit_queue::Result<()> {
        if let Some(key) = self.key {
            self.hub.notify(key);
        }
        self.delivery.ack().await
    }

    async fn nack(self: Box<Self>, requeue: bool) -> agentenkit_queue::Result<()> {
        self.hub.nacks.fetch_add(1, Ordering::Relaxed);
        self.delivery.nack(requeue).await
    }

    async fn hand_back(
        self: Box<Self>,
        _body: Vec<u8>,
        _deliveries: u32,
        _trace: Option<&agentenkit_core::TraceContext>,
    ) -> agentenkit_queue::Result<()> {
        self.hub.nacks.fetch_add(1, Ordering::Relaxed);
        self.delivery.hand_back().await
    }

    async fn dead_letter(
        self: Box<Self>,
        _body: Vec<u8>,
        _deliveries: u32,
        _trace: Option<&agentenkit_core::TraceContext>,
    ) -> agentenkit_queue::Result<()> {
        self.hub.nacks.fetch_add(1, Ordering::Relaxed);
        self.delivery.dead_letter().await
    }
}

/// The approved tool: an in-process function that reports when it ran.
pub struct SendEmail {
    hub: Arc<Hub>,
}

#[async_trait]
impl Tool for SendEmail {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "send_email".into(),
            description: "Sends an email".into(),
            input_schema: json!({
                "type": "object",
                "required": ["to", "subject", "body"],
                "properties": {
                    "to": {"type": "string"},
                    "subject": {"type": "string"},
                    "body": {"type": "string"}
                }
            }),
        }
    }

    fn requires_confirmation(&self) -> bool {
        true
    }

    async fn execute(&self, _arguments: Value, ctx: &ToolContext) -> Result<Value, ToolError> {
        self.hub.notify(Key::Executed(ctx.run_id));
        Ok(json!({ "sent": true }))
    }
}

/// Agent `mailer`: calls `send_email` as `c1`, then says "Done.". Defined
/// by an agent file, as a deployment's agents are (so its runs are pinned
/// to a version, as theirs are), with `send_email` in code.
pub fn registry(hub: Arc<Hub>) -> anyhow::Result<Registry> {
    // A JSON string is a TOML basic string: the same escapes.
    let body = serde_json::to_string(&body_text())?;
    let file = format!(
        r#"
[agents.mailer]
system = "You send email."
tools = ["send_email"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "send_email", arguments = {{ to = "ops@example.com", subject = "Quarterly report", body = {body} }} }} ] }},
  {{ text = "Done." }},
] }}
"#
    );
    Ok(Registry::from_toml_with_tools(
        &file,
        vec![Arc::new(SendEmail { hub })],
    )?)
}
