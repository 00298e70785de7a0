//! Removing a run's RabbitMQ topology at the end (the bench's, the chaos run's).
//!
//! The bench cannot rely on `Topology::queue_expires` alone: the delay
//! ladder's queues have no consumer, so with a short `x-expires` they vanish
//! while the bench still publishes (each park schedules its expiry message
//! through the ladder) and those publishes come back unroutable. So the
//! topology expires only long after the bench (a safety net should it
//! crash), and is deleted here by name.

use agentenkit_queue::{ladder, Topology};
use anyhow::Context;
use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
use lapin::types::ShortString;
use lapin::{Connection, ConnectionProperties};

/// Deletes the segment queue, the delay queues and the exchanges of
/// `topology`; returns how many deletions failed.
pub async fn delete_topology(amqp_url: &str, topology: &Topology) -> anyhow::Result<usize> {
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
