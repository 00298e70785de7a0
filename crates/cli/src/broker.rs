//! Removing a run's RabbitMQ topology at the end (the bench's, the chaos run's).
//!
//! The bench cannot rely on `Topology::queue_expires` alone: the delay
//! ladder's queues have no consumer, so with a short `x-expires` they vanish
//! while the bench still publishes (each park schedules its expiry message
//! through the ladder) and those publishes come back unroutable. So the
//! topology expires only long after the bench (a safety net should it
//! crash), and is deleted here by name.

use std::time::Duration;

use agentenkit_queue::{ladder, Topology};
use anyhow::Context;
use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
use lapin::types::ShortString;
use lapin::{Connection, ConnectionProperties};

/// How long deleting a topology may take before it is left to expire: a
/// broker that accepts the connection and then never answers (lapin's
/// handshake and deletes have no deadline of their own) must not keep the
/// bench or the chaos run from ending.
const DELETE_TIMEOUT: Duration = Duration::from_secs(30);

/// Deletes the segment queue, the delay queues and the exchanges of
/// `topology`; returns how many deletions failed. Gives up after
/// [`DELETE_TIMEOUT`].
pub async fn delete_topology(amqp_url: &str, topology: &Topology) -> anyhow::Result<usize> {
    delete_topology_within(amqp_url, topology, DELETE_TIMEOUT).await
}

/// [`delete_topology`], giving up after `limit`.
pub async fn delete_topology_within(
    amqp_url: &str,
    topology: &Topology,
    limit: Duration,
) -> anyhow::Result<usize> {
    tokio::time::timeout(limit, delete(amqp_url, topology))
        .await
        .with_context(|| {
            format!("the broker did not finish deleting the topology within {limit:?}")
        })?
}

async fn delete(amqp_url: &str, topology: &Topology) -> anyhow::Result<usize> {
    let connection = Connection::connect(amqp_url, ConnectionProperties::default())
        .await
        .context("connecting to RabbitMQ to delete a topology")?;
    let plan = ladder::plan(topology);
    let mut queues = vec![topology.segments_queue(), topology.dead_queue()];
    queues.extend(plan.delay_queues.into_iter().map(|q| q.name));
    let mut failed = 0;
    let mut channel = connection.create_channel().await?;
    for (name, is_queue) in queues
        .into_iter()
        .map(|q| (q, true))
        .chain(plan.exchanges.into_iter().map(|e| (e, false)))
    {
        let Ok(short) = ShortString::try_new(name.clone()) else {
            failed += 1;
            continue;
        };
        let deleted = if is_queue {
            channel
                .queue_delete(short, QueueDeleteOptions::default())
                .await
                .map(|_| ())
        } else {
            channel
                .exchange_delete(short, ExchangeDeleteOptions::default())
                .await
        };
        if let Err(e) = deleted {
            tracing::warn!(%name, error = %e, "could not delete");
            failed += 1;
            // A refused delete closes the channel.
            channel = connection.create_channel().await?;
        }
    }
    let _ = connection.close(200, "topology deleted".into()).await;
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_broker_that_never_answers_does_not_keep_the_delete_waiting() {
        // Accepts the connection and says nothing: the AMQP handshake never
        // completes.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = silent.local_addr().unwrap().port();
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((stream, _)) = silent.accept().await {
                open.push(stream);
            }
        });
        let topology = Topology {
            prefix: "silent".to_owned(),
            ..Topology::default()
        };
        let started = std::time::Instant::now();
        let err = delete_topology_within(
            &format!("amqp://guest:guest@127.0.0.1:{port}/%2f"),
            &topology,
            Duration::from_millis(500),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("did not finish"), "{err:#}");
        assert!(started.elapsed() < Duration::from_secs(10));
        held.abort();
    }
}
