//! The topology on the broker: the segment and dead-letter queues, the
//! delay ladder's exchanges, queues and bindings, and the arguments each
//! queue is declared with (expiry for tests, the quorum type for clusters).

use lapin::options::{
    ExchangeBindOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};

use super::{broker, short};
use crate::ladder::{self, Target};
use crate::{Result, Topology};

/// Declares the segment, notifications and dead-letter queues and the
/// whole delay ladder.
pub(super) async fn declare(channel: &Channel, topology: &Topology) -> Result<()> {
    let plan = ladder::plan(topology);
    let exchange_options = ExchangeDeclareOptions {
        durable: true,
        // With expiring queues (tests), let the exchanges go too: each is
        // deleted once the last queue or exchange bound from it is gone.
        auto_delete: topology.queue_expires.is_some(),
        ..ExchangeDeclareOptions::default()
    };
    let queue_options = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    for exchange in &plan.exchanges {
        channel
            .exchange_declare(
                short(exchange.as_str())?,
                ExchangeKind::Topic,
                exchange_options,
                FieldTable::default(),
            )
            .await
            .map_err(|e| broker("declaring exchange", exchange, e))?;
    }
    for queue in [
        topology.segments_queue(),
        topology.notifications_queue(),
        topology.dead_queue(),
    ] {
        channel
            .queue_declare(
                short(queue.as_str())?,
                queue_options,
                queue_arguments(topology),
            )
            .await
            .map_err(|e| broker("declaring queue", &queue, e))?;
    }
    for queue in &plan.delay_queues {
        channel
            .queue_declare(
                short(queue.name.as_str())?,
                queue_options,
                delay_queue_arguments(topology, queue),
            )
            .await
            .map_err(|e| broker("declaring queue", &queue.name, e))?;
    }
    for binding in &plan.bindings {
        bind(channel, binding).await?;
    }
    Ok(())
}

/// A delay queue's arguments: its TTL, and where a message goes when it
/// runs out.
fn delay_queue_arguments(topology: &Topology, queue: &ladder::DelayQueue) -> FieldTable {
    let mut arguments = queue_arguments(topology);
    arguments.insert("x-message-ttl".into(), amqp_int(queue.ttl_ms));
    arguments.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(queue.dead_letter_exchange.clone().into()),
    );
    if let Some(key) = &queue.dead_letter_routing_key {
        arguments.insert(
            "x-dead-letter-routing-key".into(),
            AMQPValue::LongString(key.clone().into()),
        );
    }
    if topology.queue_type == crate::QueueType::Quorum {
        // A message leaves a delay queue only once the next hop has it:
        // at-least-once dead-lettering (which needs reject-publish).
        arguments.insert(
            "x-dead-letter-strategy".into(),
            AMQPValue::LongString("at-least-once".into()),
        );
        arguments.insert(
            "x-overflow".into(),
            AMQPValue::LongString("reject-publish".into()),
        );
    }
    arguments
}

/// One binding of the ladder: an exchange to a queue or to an exchange.
async fn bind(channel: &Channel, binding: &ladder::Binding) -> Result<()> {
    let source = short(binding.source.as_str())?;
    let pattern = short(binding.pattern.as_str())?;
    let bound = match &binding.target {
        Target::Queue(queue) => {
            channel
                .queue_bind(
                    short(queue.as_str())?,
                    source,
                    pattern,
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
        }
        Target::Exchange(exchange) => {
            channel
                .exchange_bind(
                    short(exchange.as_str())?,
                    source,
                    pattern,
                    ExchangeBindOptions::default(),
                    FieldTable::default(),
                )
                .await
        }
    };
    bound.map_err(|e| broker("binding", &binding.source, e))
}

fn queue_arguments(topology: &Topology) -> FieldTable {
    let mut arguments = FieldTable::default();
    if topology.queue_type == crate::QueueType::Quorum {
        arguments.insert(
            "x-queue-type".into(),
            AMQPValue::LongString("quorum".into()),
        );
    }
    if let Some(expires) = topology.queue_expires {
        let ms = u64::try_from(expires.as_millis()).unwrap_or(u64::MAX);
        arguments.insert("x-expires".into(), amqp_int(ms.max(1)));
    }
    arguments
}

fn amqp_int(value: u64) -> AMQPValue {
    AMQPValue::LongLongInt(i64::try_from(value).unwrap_or(i64::MAX))
}
