//! The RabbitMQ adapter against a real broker (`AMQP_URL`, default the
//! local guest account). Every test declares its own topology under a
//! unique prefix, with expiring queues, so tests run in parallel and leave
//! nothing behind.

use std::time::Duration;

use agentenkit_core::{QueueMessage, RunId};
use agentenkit_queue::rabbit::RabbitQueue;
use agentenkit_queue::{ladder, Deliveries, Delivery, Error, QueueAdapter, QueueType, Topology};
use anyhow::{bail, Context, Result};
use tokio::time::{timeout, Instant};

/// Upper bound for anything expected to happen "now".
const WAIT: Duration = Duration::from_secs(10);
/// How late a delayed message may be (dead-lettering hops, scheduling).
const DELAY_SLACK: Duration = Duration::from_secs(2);

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

fn topology() -> Topology {
    Topology {
        prefix: format!("test.{}", uuid::Uuid::new_v4()),
        queue_expires: Some(Duration::from_secs(60)),
        delay_lanes: vec![],
        ..Topology::default()
    }
}

async fn connect(topology: &Topology) -> Result<RabbitQueue> {
    RabbitQueue::connect(&amqp_url(), topology.clone())
        .await
        .context("connecting to RabbitMQ (is it running? set AMQP_URL)")
}

fn segment(seq: i64) -> QueueMessage {
    QueueMessage::Segment {
        run_id: RunId::new(),
        seq,
    }
}

async fn next(deliveries: &mut Deliveries) -> Result<Delivery> {
    timeout(WAIT, deliveries.next())
        .await
        .context("no delivery in time")?
        .context("the delivery stream ended")
}

/// Asserts that nothing is delivered for a short while.
async fn assert_quiet(deliveries: &mut Deliveries) -> Result<()> {
    if let Ok(delivery) = timeout(Duration::from_millis(300), deliveries.next()).await {
        bail!("unexpected delivery: {:?}", delivery.map(|d| d.body));
    }
    Ok(())
}

#[tokio::test]
async fn publish_consume_ack() -> Result<()> {
    let topology = topology();
    let queue = connect(&topology).await?;
    let mut deliveries = queue.consume(4).await?;
    let message = segment(1);
    queue.publish(&message).await?;
    let delivery = next(&mut deliveries).await?;
    assert_eq!(delivery.message()?, message);
    assert!(!delivery.redelivered);
    delivery.ack().await?;
    drop(deliveries);

    // Acked means gone: a new consumer sees nothing.
    let mut again = queue.consume(4).await?;
    assert_quiet(&mut again).await?;
    queue.ready().await?;
    queue.close().await;
    assert!(matches!(queue.publish(&message).await, Err(Error::Closed)));
    Ok(())
}

#[tokio::test]
async fn nack_requeue_redelivers() -> Result<()> {
    let queue = connect(&topology()).await?;
    let mut deliveries = queue.consume(1).await?;
    let message = segment(1);
    queue.publish(&message).await?;
    let first = next(&mut deliveries).await?;
    assert!(!first.redelivered);
    first.nack(true).await?;
    let second = next(&mut deliveries).await?;
    assert!(second.redelivered);
    assert_eq!(second.message()?, message);
    second.ack().await?;
    assert_quiet(&mut deliveries).await?;
    queue.close().await;
    Ok(())
}

#[tokio::test]
async fn unacked_delivery_of_a_dropped_consumer_is_redelivered() -> Result<()> {
    let queue = connect(&topology()).await?;
    let message = segment(1);
    queue.publish(&message).await?;
    let mut first = queue.consume(1).await?;
    let delivery = next(&mut first).await?;
    drop(first);
    drop(delivery);
    let mut second = queue.consume(1).await?;
    let again = next(&mut second).await?;
    assert!(again.redelivered);
    assert_eq!(again.message()?, message);
    again.ack().await?;
    queue.close().await;
    Ok(())
}

#[tokio::test]
async fn an_in_flight_delivery_can_be_acked_after_its_consumer_stopped() -> Result<()> {
    let queue = connect(&topology()).await?;
    let message = segment(1);
    queue.publish(&message).await?;
    let mut deliveries = queue.consume(1).await?;
    let delivery = next(&mut deliveries).await?;
    // A draining worker stops consuming, then settles what it holds.
    drop(deliveries);
    delivery.ack().await?;
    let mut after = queue.consume(1).await?;
    assert_quiet(&mut after).await?;
    queue.close().await;
    Ok(())
}

#[tokio::test]
async fn delayed_message_arrives_after_its_delay() -> Result<()> {
    let queue = connect(&topology()).await?;
    let mut deliveries = queue.consume(4).await?;
    let message = segment(1);
    let delay = Duration::from_millis(300);
    let start = Instant::now();
    queue.publish_delayed(&message, delay).await?;
    let delivery = next(&mut deliveries).await?;
    let elapsed = start.elapsed();
    assert_eq!(delivery.message()?, message);
    assert!(elapsed >= delay, "arrived after {elapsed:?}");
    assert!(elapsed < delay + DELAY_SLACK, "arrived after {elapsed:?}");
    delivery.ack().await?;
    queue.close().await;
    Ok(())
}

#[tokio::test]
async fn a_delay_with_a_lane_takes_one_hop_and_arrives_on_time_and_the_remainder_rides_the_ladder(
) -> Result<()> {
    let topology = Topology {
        delay_lanes: vec![400],
        ..topology()
    };
    let queue = connect(&topology).await?;
    let mut deliveries = queue.consume(4).await?;
    assert_eq!(queue.delay_hops(Duration::from_millis(400)), 1);
    assert_eq!(queue.delay_hops(Duration::from_millis(403)), 3);
    for (seq, ms) in [(1, 400), (2, 403)] {
        let delay = Duration::from_millis(ms);
        let message = segment(seq);
        let start = Instant::now();
        queue.publish_delayed(&message, delay).await?;
        let delivery = next(&mut deliveries).await?;
        let elapsed = start.elapsed();
        assert_eq!(delivery.message()?, message);
        assert!(elapsed >= delay, "arrived after {elapsed:?}");
        assert!(elapsed < delay + DELAY_SLACK, "arrived after {elapsed:?}");
        delivery.ack().await?;
    }
    queue.close().await;
    Ok(())
}

#[tokio::test]
async fn delayed_messages_arrive_in_delay_order() -> Result<()> {
    let queue = connect(&topology()).await?;
    let mut deliveries = queue.consume(4).await?;
    let (late, early) = (segment(1), segment(2));
    let start = Instant::now();
    queue
        .publish_delayed(&late, Duration::from_millis(900))
        .await?;
    queue
        .publish_delayed(&early, Duration::from_millis(200))
        .await?;
    for (expected, delay) in [(&early, 200), (&late, 900)] {
        let delivery = next(&mut deliveries).await?;
        let elapsed = start.elapsed();
        assert_eq!(&delivery.message()?, expected);
        let delay = Duration::from_millis(delay);
        assert!(elapsed >= delay, "{delay:?} arrived after {elapsed:?}");
        assert!(
            elapsed < delay + DELAY_SLACK,
            "{delay:?} arrived after {elapsed:?}"
        );
        delivery.ack().await?;
    }
    queue.close().await;
    Ok(())
}

#[tokio::test]
async fn zero_delay_is_immediate_and_too_long_a_delay_is_refused() -> Result<()> {
    let queue = connect(&topology()).await?;
    let mut deliveries = queue.consume(4).await?;
    let message = segment(1);
    queue.publish_delayed(&message, Duration::ZERO).await?;
    next(&mut deliveries).await?.ack().await?;
    let too_long = Duration::from_millis(ladder::MAX_DELAY_MS + 1);
    assert!(matches!(
        queue.publish_delayed(&message, too_long).await,
        Err(Error::DelayTooLong(_))
    ));
    queue.close().await;
    Ok(())
}

#[tokio::test]
async fn declaring_the_topology_twice_is_fine() -> Result<()> {
    let topology = topology();
    let publisher = connect(&topology).await?;
    let consumer = connect(&topology).await?;
    let mut deliveries = consumer.consume(4).await?;
    let message = segment(1);
    publisher
        .publish_delayed(&message, Duration::from_millis(50))
        .await?;
    let delivery = next(&mut deliveries).await?;
    assert_eq!(delivery.message()?, message);
    delivery.ack().await?;
    publisher.close().await;
    consumer.close().await;
    Ok(())
}

/// Closes this test's broker connections from the server side, as a broker
/// restart or a network cut would. `None` when `rabbitmqctl` is not usable
/// here (a remote broker): the test is then skipped.
async fn kill_connections(topology: &Topology) -> Result<Option<usize>> {
    let Ok(listing) = tokio::process::Command::new("rabbitmqctl")
        .args(["-q", "list_connections", "pid", "client_properties"])
        .output()
        .await
    else {
        return Ok(None);
    };
    if !listing.status.success() {
        return Ok(None);
    }
    let name = format!("agentenkit {}", topology.prefix);
    let mut killed = 0;
    for line in String::from_utf8_lossy(&listing.stdout).lines() {
        if !line.contains(&name) {
            continue;
        }
        let pid = line.split_whitespace().next().context("no pid")?;
        let closed = tokio::process::Command::new("rabbitmqctl")
            .args(["-q", "close_connection", pid, "test kills the connection"])
            .status()
            .await?;
        assert!(closed.success(), "rabbitmqctl close_connection {pid}");
        killed += 1;
    }
    Ok(Some(killed))
}

fn broker_is_local() -> bool {
    std::env::var("AMQP_URL").map_or(true, |url| {
        url.contains("@127.0.0.1") || url.contains("@localhost") || url.contains("@[::1]")
    })
}

#[tokio::test]
async fn consumer_and_publisher_survive_a_lost_connection() -> Result<()> {
    let topology = topology();
    let queue = connect(&topology).await?;
    let mut deliveries = queue.consume(1).await?;
    let in_flight = segment(1);
    queue.publish(&in_flight).await?;
    let delivery = next(&mut deliveries).await?;
    assert!(!delivery.redelivered);

    match kill_connections(&topology).await? {
        // Only a remote broker may skip: against the local one (what
        // `make test` runs) a skip would be a test that cannot fail.
        None if !broker_is_local() => {
            eprintln!("skipped: rabbitmqctl cannot reach the remote broker");
            return Ok(());
        }
        None => panic!("rabbitmqctl cannot reach the local broker; the test would test nothing"),
        Some(killed) => assert_eq!(killed, 1, "one connection per adapter"),
    }
    // The channel is gone: settling fails, and the broker requeues.
    assert!(delivery.ack().await.is_err());
    let again = next(&mut deliveries).await?;
    assert!(again.redelivered);
    assert_eq!(again.message()?, in_flight);
    again.ack().await?;

    let after = segment(2);
    queue.publish(&after).await?;
    let delivery = next(&mut deliveries).await?;
    assert_eq!(delivery.message()?, after);
    delivery.ack().await?;
    queue.ready().await?;
    queue.close().await;
    Ok(())
}

#[tokio::test]
async fn quorum_queues_carry_segments_and_delays_through_lane_and_ladder() -> Result<()> {
    let topology = Topology {
        delay_lanes: vec![300],
        queue_type: QueueType::Quorum,
        ..topology()
    };
    let queue = connect(&topology).await?;
    let mut deliveries = queue.consume(4).await?;
    let now = segment(1);
    queue.publish(&now).await?;
    let delivery = next(&mut deliveries).await?;
    assert_eq!(delivery.message()?, now);
    delivery.ack().await?;
    // A lane hop and a ladder of hops, both dead-lettered at least once.
    for (seq, ms) in [(2, 300), (3, 301)] {
        let delay = Duration::from_millis(ms);
        let message = segment(seq);
        let start = Instant::now();
        queue.publish_delayed(&message, delay).await?;
        let delivery = next(&mut deliveries).await?;
        let elapsed = start.elapsed();
        assert_eq!(delivery.message()?, message);
        assert!(elapsed >= delay, "arrived after {elapsed:?}");
        assert!(elapsed < delay + DELAY_SLACK, "arrived after {elapsed:?}");
        delivery.ack().await?;
    }
    // The queues really are quorum queues: declaring them classic is refused.
    let classic = Topology {
        queue_type: QueueType::Classic,
        ..topology.clone()
    };
    let refused = RabbitQueue::connect(&amqp_url(), classic)
        .await
        .err()
        .context("a classic declaration of a quorum queue must be refused")?;
    assert!(refused.to_string().contains("x-queue-type"), "{refused}");
    queue.close().await;
    Ok(())
}

/// The sender's trace context rides in the W3C headers: at once, through
/// the delay ladder (dead-lettering keeps headers), and on a hand-back; a
/// message without one, or with a malformed one, has none.
#[tokio::test]
async fn a_trace_context_rides_the_headers_through_the_ladder_and_a_hand_back() -> Result<()> {
    let topology = topology();
    let queue = connect(&topology).await?;
    let mut deliveries = queue.consume(4).await?;
    let trace = agentenkit_core::TraceContext::from_headers(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("congo=t61rcWkgMzE"),
    )?;

    queue
        .publish_traced(&segment(1), Duration::ZERO, Some(&trace))
        .await?;
    let now = next(&mut deliveries).await?;
    assert_eq!(now.trace.as_ref(), Some(&trace));
    // Handed back, it comes again with the same context.
    now.hand_back().await?;
    let again = next(&mut deliveries).await?;
    assert_eq!((again.deliveries, again.trace.as_ref()), (2, Some(&trace)));
    again.ack().await?;

    let delay = Duration::from_millis(300);
    queue
        .publish_traced(&segment(2), delay, Some(&trace))
        .await?;
    let delayed = next(&mut deliveries).await?;
    assert!(matches!(
        delayed.message()?,
        QueueMessage::Segment { seq: 2, .. }
    ));
    assert_eq!(delayed.trace.as_ref(), Some(&trace));
    delayed.ack().await?;

    queue.publish(&segment(3)).await?;
    let plain = next(&mut deliveries).await?;
    assert_eq!(plain.trace, None);
    plain.ack().await?;

    // Another publisher's malformed header is ignored, not a failure.
    let connection =
        lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    let mut headers = lapin::types::FieldTable::default();
    headers.insert(
        "traceparent".into(),
        lapin::types::AMQPValue::LongString(
            "00-nothex-00f067aa0ba902b7-01".as_bytes().to_vec().into(),
        ),
    );
    channel
        .basic_publish(
            "".into(),
            topology.segments_queue().as_str().into(),
            lapin::options::BasicPublishOptions::default(),
            &segment(4).to_bytes(),
            lapin::BasicProperties::default().with_headers(headers),
        )
        .await?
        .await?;
    let malformed = next(&mut deliveries).await?;
    assert_eq!(malformed.trace, None);
    malformed.ack().await?;
    queue.close().await;
    Ok(())
}
