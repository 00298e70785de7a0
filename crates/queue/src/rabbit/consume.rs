//! Consuming: one channel per [`Deliveries`], reconnected with a doubling
//! backoff when lost, and the acker each delivery carries (ack, requeue,
//! dead-letter, hand back), which settles a delivery exactly once.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::Channel;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use agentenkit_core::TraceContext;

use super::{declare, short, Headers, Inner, BACKOFF_MAX, BACKOFF_MIN};
use crate::{
    Acknowledge, Delivery, Error, Result, DELIVERIES_HEADER, TRACEPARENT_HEADER, TRACESTATE_HEADER,
};

/// Why a consumer's channel stopped.
enum Stopped {
    /// The adapter was closed or the [`Deliveries`] dropped: stop for good.
    Asked,
    /// The channel or connection failed: reconnect.
    Lost(Error),
}

/// The task behind one [`Deliveries`]: consume, and reconnect with backoff
/// whenever the channel is lost.
pub(super) async fn consume_until_stopped(
    inner: Arc<Inner>,
    queue: ShortString,
    prefetch: u16,
    sender: mpsc::Sender<Delivery>,
) {
    let mut backoff = BACKOFF_MIN;
    let mut redeclare = false;
    loop {
        let consumed = consume_channel(&inner, &queue, prefetch, &sender, redeclare, &mut backoff);
        match consumed.await {
            Stopped::Asked => return,
            Stopped::Lost(error) => {
                warn!(%error, prefix = %inner.topology.prefix, ?backoff, "consumer lost its channel; reconnecting");
            }
        }
        tokio::select! {
            () = inner.closed.cancelled() => return,
            () = sender.closed() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
        // Whatever cancelled the consumer may have deleted part of the
        // topology (a queue deleted by hand, or expired in tests).
        redeclare = true;
    }
}

async fn consume_channel(
    inner: &Arc<Inner>,
    queue: &ShortString,
    prefetch: u16,
    sender: &mpsc::Sender<Delivery>,
    redeclare: bool,
    backoff: &mut Duration,
) -> Stopped {
    let channel = match open_consumer_channel(inner, prefetch, redeclare).await {
        Ok(channel) => channel,
        Err(Error::Closed) => return Stopped::Asked,
        Err(error) => return Stopped::Lost(error),
    };
    let mut consumer = match channel
        .basic_consume(
            queue.clone(),
            // Empty: the broker picks a unique tag.
            ShortString::default(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
    {
        Ok(consumer) => consumer,
        Err(error) => return Stopped::Lost(Error::Broker(error.to_string())),
    };
    *backoff = BACKOFF_MIN;
    debug!(prefix = %inner.topology.prefix, prefetch, "consuming");
    // On return the consumer is cancelled and our handle of the channel
    // dropped; the channel closes (and the broker requeues what it holds
    // unacked) once every delivery handed out is settled or dropped, so a
    // worker that stops consuming can still ack its in-flight work.
    loop {
        let next = tokio::select! {
            () = inner.closed.cancelled() => return Stopped::Asked,
            () = sender.closed() => return Stopped::Asked,
            next = consumer.next() => next,
        };
        let delivery = match next {
            Some(Ok(delivery)) => delivery,
            Some(Err(error)) => return Stopped::Lost(Error::Broker(error.to_string())),
            None => {
                return Stopped::Lost(Error::Broker("the broker cancelled the consumer".into()))
            }
        };
        let headers = delivery.properties.headers().as_ref();
        let handed_back = headers
            .and_then(|headers| headers.inner().get(DELIVERIES_HEADER))
            .and_then(header_count)
            .unwrap_or(0);
        let trace = headers.and_then(trace_context);
        let acker = RabbitAcker {
            acker: Some(delivery.acker),
            channel: Some(channel.clone()),
            inner: Arc::clone(inner),
            queue: queue.clone(),
        };
        let delivery = Delivery::new(delivery.data, delivery.redelivered, Box::new(acker))
            .with_handed_back(handed_back)
            .with_trace(trace);
        tokio::select! {
            () = inner.closed.cancelled() => return Stopped::Asked,
            sent = sender.send(delivery) => if sent.is_err() {
                return Stopped::Asked;
            },
        }
    }
}

async fn open_consumer_channel(inner: &Inner, prefetch: u16, redeclare: bool) -> Result<Channel> {
    let channel = inner
        .connection()
        .await?
        .create_channel()
        .await
        .map_err(|e| Error::Connection(e.to_string()))?;
    if redeclare {
        declare(&channel, &inner.topology).await?;
    }
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await
        .map_err(|e| Error::Broker(e.to_string()))?;
    Ok(channel)
}

/// Settles one RabbitMQ delivery. Holds a handle of its channel so that
/// the channel stays open until the delivery is settled, even after the
/// consumer stopped.
/// Settles one delivery; one dropped unsettled (a panicked handler, a
/// crashed segment) is handed back to the broker at once rather than held
/// unacked, which would use up a prefetch slot for the channel's lifetime.
struct RabbitAcker {
    acker: Option<lapin::Acker>,
    channel: Option<Channel>,
    /// For hand-backs and dead letters, published with confirms.
    inner: Arc<Inner>,
    /// The queue it came from, where a hand-back goes.
    queue: ShortString,
}

/// The delivery count a header holds, whatever integer type carried it.
fn header_count(value: &AMQPValue) -> Option<u32> {
    match value {
        AMQPValue::LongUInt(n) => Some(*n),
        AMQPValue::LongInt(n) => u32::try_from(*n).ok(),
        AMQPValue::LongLongInt(n) => u32::try_from(*n).ok(),
        AMQPValue::ShortUInt(n) => Some(u32::from(*n)),
        AMQPValue::ShortInt(n) => u32::try_from(*n).ok(),
        AMQPValue::ShortShortUInt(n) => Some(u32::from(*n)),
        _ => None,
    }
}

/// The sender's span, from the W3C headers; a malformed one is ignored
/// (the handler starts a trace of its own), never a reason to refuse.
fn trace_context(headers: &FieldTable) -> Option<TraceContext> {
    let text = |name: &str| match headers.inner().get(name)? {
        AMQPValue::LongString(s) => std::str::from_utf8(s.as_bytes()).ok(),
        AMQPValue::ShortString(s) => Some(s.as_str()),
        _ => None,
    };
    TraceContext::from_headers(text(TRACEPARENT_HEADER)?, text(TRACESTATE_HEADER)).ok()
}

impl RabbitAcker {
    fn take(&mut self) -> Result<lapin::Acker> {
        self.acker.take().ok_or(Error::Closed)
    }
}

fn requeue_options() -> BasicNackOptions {
    BasicNackOptions {
        requeue: true,
        ..BasicNackOptions::default()
    }
}

#[async_trait]
impl Acknowledge for RabbitAcker {
    async fn ack(mut self: Box<Self>) -> Result<()> {
        settled(self.take()?.ack(BasicAckOptions::default()).await)
    }

    async fn nack(mut self: Box<Self>, requeue: bool) -> Result<()> {
        let options = BasicNackOptions {
            requeue,
            ..BasicNackOptions::default()
        };
        settled(self.take()?.nack(options).await)
    }

    async fn hand_back(
        self: Box<Self>,
        body: Vec<u8>,
        deliveries: u32,
        trace: Option<&TraceContext>,
    ) -> Result<()> {
        let queue = self.queue.clone();
        self.send_then_ack(queue, body, Headers::handed_back(deliveries, trace))
            .await
    }

    async fn dead_letter(
        self: Box<Self>,
        body: Vec<u8>,
        deliveries: u32,
        trace: Option<&TraceContext>,
    ) -> Result<()> {
        let dead = short(self.inner.topology.dead_queue())?;
        self.send_then_ack(dead, body, Headers::handed_back(deliveries, trace))
            .await
    }
}

impl RabbitAcker {
    /// Publishes a copy (confirmed) to `queue`, then acks the original; a
    /// crash in between leaves both, and consumers drop duplicates. If the
    /// copy cannot be published the original is requeued unchanged.
    async fn send_then_ack(
        mut self: Box<Self>,
        queue: ShortString,
        body: Vec<u8>,
        headers: Headers<'_>,
    ) -> Result<()> {
        let sent = self
            .inner
            .publish_with(ShortString::default(), queue, &body, headers)
            .await;
        let acker = self.take()?;
        match sent {
            Ok(()) => settled(acker.ack(BasicAckOptions::default()).await),
            Err(e) => {
                let _ = acker.nack(requeue_options()).await;
                Err(e)
            }
        }
    }
}

impl Drop for RabbitAcker {
    fn drop(&mut self) {
        let (Some(acker), Ok(runtime)) = (self.acker.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        // The channel lives until the nack is sent.
        let channel = self.channel.take();
        runtime.spawn(async move {
            let _ = acker.nack(requeue_options()).await;
            drop(channel);
        });
    }
}

fn settled(outcome: lapin::Result<bool>) -> Result<()> {
    match outcome {
        Ok(true) => Ok(()),
        // lapin answers false when the channel is gone (or the delivery
        // was settled already); the broker redelivers the message.
        Ok(false) => Err(Error::Broker(
            "the delivery's channel is closed; the broker will redeliver it".into(),
        )),
        Err(error) => Err(Error::Broker(error.to_string())),
    }
}
