//! The RabbitMQ adapter (lapin 4, no plugins).
//!
//! One connection per adapter, shared by one long-lived publishing channel
//! (publisher confirms on) and one channel per consumer. Whoever connects
//! first declares the topology: the durable segment queue and the delay
//! ladder of [`ladder::plan`]; declaring is idempotent, so every process
//! (and every reconnect) simply declares it again.
//!
//! Recovery is done here rather than with lapin's `enable_auto_recover`:
//! a dead connection is noticed by its status or by a failed operation and
//! replaced on next use (re-declaring the topology). A publish retries once
//! on a fresh channel; a consumer reconnects with a doubling backoff. The
//! broker requeues what a lost channel had not acked, so a consumer sees
//! those messages again with `redelivered = true`.

use std::sync::Arc;
use std::time::Duration;

use agentenkit_core::{QueueMessage, TraceContext};
use async_trait::async_trait;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use tokio::sync::{mpsc, Mutex};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::ladder;
use crate::{
    Deliveries, Error, QueueAdapter, Result, Topology, DELIVERIES_HEADER, TRACEPARENT_HEADER,
    TRACESTATE_HEADER,
};

mod consume;
mod declare;
use consume::consume_until_stopped;
use declare::declare;

/// How long establishing a connection may take before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A consumer's first wait before reconnecting; doubles up to the max.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// AMQP `reply-success`, for closing cleanly.
const REPLY_SUCCESS: u16 = 200;

/// The production [`QueueAdapter`]. Cheap to clone; clones share the
/// connection.
#[derive(Clone)]
pub struct RabbitQueue {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RabbitQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the URL: it carries the password.
        f.debug_struct("RabbitQueue")
            .field("prefix", &self.inner.topology.prefix)
            .finish_non_exhaustive()
    }
}

struct Inner {
    url: String,
    /// Certificates (PEM) trusted for `amqps://` besides the platform's
    /// roots: a private CA.
    ca_pem: Option<String>,
    topology: Topology,
    segments: ShortString,
    notifications: ShortString,
    /// The lanes this adapter declared: the only ones it routes to, so a
    /// message never goes to a lane that does not exist.
    lanes: Vec<u32>,
    connection: Mutex<Option<Arc<Connection>>>,
    publisher: Mutex<Option<Channel>>,
    closed: CancellationToken,
}

impl RabbitQueue {
    /// Connects to `amqp_url` and declares `topology`; fails when the broker
    /// is unreachable or refuses the declarations (e.g. a queue of the same
    /// name exists with other arguments).
    pub async fn connect(amqp_url: &str, topology: Topology) -> Result<Self> {
        Self::connect_with_ca(amqp_url, topology, None).await
    }

    /// Like `connect`; an `amqps://` broker's certificate may also be
    /// issued by `ca_pem` (PEM), a private CA.
    pub async fn connect_with_ca(
        amqp_url: &str,
        topology: Topology,
        ca_pem: Option<String>,
    ) -> Result<Self> {
        let segments = short(topology.segments_queue())?;
        let notifications = short(topology.notifications_queue())?;
        let lanes = topology.lanes();
        let queue = Self {
            inner: Arc::new(Inner {
                url: amqp_url.to_owned(),
                ca_pem,
                topology,
                segments,
                notifications,
                lanes,
                connection: Mutex::new(None),
                publisher: Mutex::new(None),
                closed: CancellationToken::new(),
            }),
        };
        queue.inner.connection().await?;
        Ok(queue)
    }

    pub fn topology(&self) -> &Topology {
        &self.inner.topology
    }

    /// Consumes `queue` (the segments' or the notifications').
    async fn consume_queue(&self, queue: ShortString, prefetch: u16) -> Result<Deliveries> {
        // Connect now so that a broker that is down fails the call rather
        // than a background task.
        self.inner.connection().await?;
        let prefetch = prefetch.max(1);
        let (sender, receiver) = mpsc::channel(usize::from(prefetch));
        tokio::spawn(consume_until_stopped(
            Arc::clone(&self.inner),
            queue,
            prefetch,
            sender,
        ));
        Ok(Deliveries::new(receiver))
    }
}

#[async_trait]
impl QueueAdapter for RabbitQueue {
    fn delay_hops(&self, delay: Duration) -> usize {
        ladder::delay_ms(delay).map_or(0, |ms| ladder::route(ms, &self.inner.lanes).hops())
    }

    async fn publish_traced(
        &self,
        message: &QueueMessage,
        delay: Duration,
        trace: Option<&TraceContext>,
    ) -> Result<()> {
        let ms = ladder::delay_ms(delay)?;
        let (exchange, key) = if ms > 0 {
            let (exchange, key) = ladder::route(ms, &self.inner.lanes).entry(&self.inner.topology);
            (short(exchange)?, short(key)?)
        } else if message.is_notification() {
            // The default exchange routes on the queue name.
            (ShortString::default(), self.inner.notifications.clone())
        } else {
            (ShortString::default(), self.inner.segments.clone())
        };
        let headers = Headers {
            deliveries: None,
            trace,
        };
        self.inner
            .publish_with(exchange, key, &message.to_bytes(), headers)
            .await
    }

    async fn consume(&self, prefetch: u16) -> Result<Deliveries> {
        self.consume_queue(self.inner.segments.clone(), prefetch)
            .await
    }

    async fn consume_notifications(&self, prefetch: u16) -> Result<Deliveries> {
        self.consume_queue(self.inner.notifications.clone(), prefetch)
            .await
    }

    async fn ready(&self) -> Result<()> {
        self.inner.connection().await.map(|_| ())
    }

    async fn backlog(&self) -> Result<Option<u64>> {
        let channel = self
            .inner
            .connection()
            .await?
            .create_channel()
            .await
            .map_err(|e| Error::Connection(e.to_string()))?;
        let queue = self.inner.topology.segments_queue();
        let declared = channel
            .queue_declare(
                short(queue.clone())?,
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| broker("counting", &queue, e))?;
        let _ = channel.close(REPLY_SUCCESS, "counted".into()).await;
        Ok(Some(u64::from(declared.message_count())))
    }

    async fn close(&self) {
        self.inner.closed.cancel();
        self.inner.publisher.lock().await.take();
        let connection = self.inner.connection.lock().await.take();
        if let Some(connection) = connection.filter(|c| c.status().connected()) {
            if let Err(error) = connection.close(REPLY_SUCCESS, "closing".into()).await {
                debug!(%error, "closing the broker connection");
            }
        }
    }
}

impl Inner {
    /// The live connection, or a new one with the topology declared on it.
    /// The lock makes concurrent callers share one reconnect.
    async fn connection(&self) -> Result<Arc<Connection>> {
        let mut current = self.connection.lock().await;
        if self.closed.is_cancelled() {
            return Err(Error::Closed);
        }
        if let Some(connection) = current.as_ref().filter(|c| c.status().connected()) {
            return Ok(Arc::clone(connection));
        }
        let name = format!("agentenkit {}", self.topology.prefix);
        let properties = ConnectionProperties::default().with_connection_name(name.into());
        let builder = lapin::DefaultConnectionBuilder::new()
            .map_err(|e| Error::Connection(e.to_string()))?
            .with_uri_str(self.url.clone())
            .with_properties(properties)
            .with_tls_config(lapin::tcp::OwnedTLSConfig {
                identity: None,
                cert_chain: self.ca_pem.clone(),
            });
        let connection = tokio::time::timeout(CONNECT_TIMEOUT, builder.connect())
            .await
            .map_err(|_| Error::Connection("timed out connecting to the broker".into()))?
            .map_err(|e| Error::Connection(e.to_string()))?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| Error::Connection(e.to_string()))?;
        declare(&channel, &self.topology).await?;
        // Dropping the last handle of the channel closes it.
        drop(channel);
        info!(prefix = %self.topology.prefix, "connected to the broker, topology declared");
        let connection = Arc::new(connection);
        *current = Some(Arc::clone(&connection));
        Ok(connection)
    }

    /// The publishing channel, reopened (on a fresh connection if need be)
    /// when the last one died.
    async fn publisher(&self) -> Result<Channel> {
        let mut current = self.publisher.lock().await;
        if let Some(channel) = current.as_ref().filter(|c| c.status().connected()) {
            return Ok(channel.clone());
        }
        let channel = self
            .connection()
            .await?
            .create_channel()
            .await
            .map_err(|e| Error::Connection(e.to_string()))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| Error::Broker(e.to_string()))?;
        *current = Some(channel.clone());
        Ok(channel)
    }

    /// Forgets `failed` so that the next publish opens a new channel (on a
    /// new connection when the old one is down: see [`Inner::connection`]).
    async fn discard_publisher(&self, failed: &Channel) {
        let mut current = self.publisher.lock().await;
        if current.as_ref().is_some_and(|c| c.id() == failed.id()) {
            *current = None;
        }
    }

    /// Publishes and awaits the confirm; retries once on a fresh channel
    /// when the channel or connection failed, since the caller (an outbox
    /// drain) would otherwise leave the row for the reaper. A retry may
    /// duplicate a message whose confirm was lost: consumers are idempotent.
    async fn publish_with(
        &self,
        exchange: ShortString,
        key: ShortString,
        body: &[u8],
        headers: Headers<'_>,
    ) -> Result<()> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            if self.closed.is_cancelled() {
                return Err(Error::Closed);
            }
            let channel = self.publisher().await?;
            let failure = match publish_once(&channel, &exchange, &key, body, &headers).await {
                Ok(()) => return Ok(()),
                Err(PublishFailure::Refused(reason)) => return Err(Error::NotConfirmed(reason)),
                Err(failure) => failure,
            };
            self.discard_publisher(&channel).await;
            if attempt >= 2 {
                return Err(failure.into());
            }
            warn!(error = %failure, exchange = %exchange, "publish failed; retrying on a fresh channel");
        }
    }
}

/// The headers of a published message, all optional.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Headers<'a> {
    /// How often the message was handed back ([`DELIVERIES_HEADER`]).
    deliveries: Option<u32>,
    /// The sender's span ([`TRACEPARENT_HEADER`], [`TRACESTATE_HEADER`]);
    /// dead-lettering through the delay ladder keeps them.
    trace: Option<&'a TraceContext>,
}

impl<'a> Headers<'a> {
    /// Those of a copy sent back or to the dead letters.
    fn handed_back(deliveries: u32, trace: Option<&'a TraceContext>) -> Self {
        Self {
            deliveries: Some(deliveries),
            trace,
        }
    }

    fn table(&self) -> Option<FieldTable> {
        if self.deliveries.is_none() && self.trace.is_none() {
            return None;
        }
        let mut table = FieldTable::default();
        if let Some(deliveries) = self.deliveries {
            table.insert(DELIVERIES_HEADER.into(), AMQPValue::LongUInt(deliveries));
        }
        if let Some(trace) = self.trace {
            let text = |s: &str| AMQPValue::LongString(s.as_bytes().to_vec().into());
            table.insert(TRACEPARENT_HEADER.into(), text(&trace.traceparent));
            if let Some(state) = &trace.tracestate {
                table.insert(TRACESTATE_HEADER.into(), text(state));
            }
        }
        Some(table)
    }
}

/// Why one publish attempt failed.
#[derive(Debug)]
enum PublishFailure {
    /// The broker answered no (nack, or unroutable): retrying will not help.
    Refused(String),
    /// The message never left: the channel or connection is down.
    Send(lapin::Error),
    /// The channel died before the confirm came: the outcome is unknown.
    Confirm(lapin::Error),
}

impl std::fmt::Display for PublishFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused(reason) => write!(f, "refused: {reason}"),
            Self::Send(error) => write!(f, "send failed: {error}"),
            Self::Confirm(error) => write!(f, "confirm lost: {error}"),
        }
    }
}

impl From<PublishFailure> for Error {
    fn from(failure: PublishFailure) -> Self {
        match failure {
            PublishFailure::Refused(reason) => Error::NotConfirmed(reason),
            PublishFailure::Send(error) => Error::Connection(error.to_string()),
            PublishFailure::Confirm(error) => Error::NotConfirmed(error.to_string()),
        }
    }
}

async fn publish_once(
    channel: &Channel,
    exchange: &ShortString,
    key: &ShortString,
    body: &[u8],
    headers: &Headers<'_>,
) -> std::result::Result<(), PublishFailure> {
    let mut properties = BasicProperties::default()
        .with_delivery_mode(2) // persistent
        .with_content_type("application/json".into());
    if let Some(table) = headers.table() {
        properties = properties.with_headers(table);
    }
    // `mandatory`: a message no queue takes comes back (and is an error)
    // instead of being confirmed and silently dropped.
    let options = BasicPublishOptions {
        mandatory: true,
        ..BasicPublishOptions::default()
    };
    let confirm = channel
        .basic_publish(exchange.clone(), key.clone(), options, body, properties)
        .await
        .map_err(PublishFailure::Send)?;
    match confirm.await.map_err(PublishFailure::Confirm)? {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(returned)) => Err(PublishFailure::Refused(format!(
            "unroutable: {} {}",
            returned.reply_code, returned.reply_text
        ))),
        Confirmation::Nack(_) => Err(PublishFailure::Refused("nacked by the broker".into())),
        Confirmation::NotRequested => Err(PublishFailure::Refused(
            "publisher confirms are not enabled on the channel".into(),
        )),
    }
}

/// AMQP names are at most 255 bytes; a long prefix fails here rather
/// than panicking inside lapin's `From<String>`.
fn short(name: impl Into<String>) -> Result<ShortString> {
    let name = name.into();
    ShortString::try_new(name.clone())
        .map_err(|_| Error::Broker(format!("name longer than 255 bytes: {name}")))
}

fn broker(doing: &str, name: &str, error: lapin::Error) -> Error {
    Error::Broker(format!("{doing} {name}: {error}"))
}
