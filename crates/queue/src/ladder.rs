//! The delayed-delivery ladder: pure arithmetic, no IO.
//!
//! RabbitMQ has no built-in delayed delivery and we do not use the
//! delayed-message plugin (it keeps timers in a non-replicated Mnesia table
//! and loses them with its node). Instead, as in the NServiceBus RabbitMQ
//! transport, a delay is spelled in binary and each set bit `k` costs one
//! stay in queue `{prefix}.delay.{k:02}`, whose *fixed* `x-message-ttl` is
//! 2^k ms. Because every message in one level queue has the same TTL, the
//! queue expires strictly in FIFO order: nothing waits behind a longer
//! delay at the head, which per-message TTLs would cause.
//!
//! The routing key carries the delay: its 32 bits, most significant first,
//! dot-separated, then the destination word, e.g. `0.….1.0.1.segments`.
//! Each level `k` has a topic exchange of the same name as its queue, with
//! two bindings that look only at word `31 - k` (bit `k`):
//!
//! - bit `k` = 1: to the level's queue, which after 2^k ms dead-letters the
//!   message (same routing key) to the exchange of level `k - 1`;
//! - bit `k` = 0: exchange-to-exchange straight to level `k - 1`.
//!
//! Level 0's "next" is the delivery exchange, which routes
//! `#.{DESTINATION}` to the segment queue. A message is published to the
//! level-31 exchange and so waits in exactly the levels whose bit is set, in
//! descending order, for 2^k ms each: the delay in total.
//!
//! [`plan`] lists every exchange, queue and binding; the RabbitMQ adapter
//! declares exactly that list, and the tests route keys through it.

use std::time::Duration;

use crate::{Error, Result, Topology};

/// Number of levels; level `k` waits 2^k ms.
pub const LEVELS: u8 = 32;

/// The longest delay the ladder can express: all 32 bits set, about 49.7
/// days (the runtime needs 30).
pub const MAX_DELAY_MS: u64 = (1 << LEVELS) - 1;

/// The last word of every ladder routing key. The delivery exchange routes
/// on it, so that other destinations (an expiry queue) can join later.
pub const DESTINATION: &str = "segments";

/// The whole milliseconds a message must wait for `delay`, rounded up so
/// that it never arrives early; `Error::DelayTooLong` past [`MAX_DELAY_MS`].
pub fn delay_ms(delay: Duration) -> Result<u32> {
    let ms = delay.as_nanos().div_ceil(1_000_000);
    u32::try_from(ms).map_err(|_| Error::DelayTooLong(u64::try_from(ms).unwrap_or(u64::MAX)))
}

/// The routing key of a message delayed by `delay_ms`: 32 bits, most
/// significant first, then [`DESTINATION`].
pub fn routing_key(delay_ms: u32) -> String {
    let mut key = String::with_capacity(2 * LEVELS as usize + DESTINATION.len());
    for level in (0..LEVELS).rev() {
        key.push(if delay_ms >> level & 1 == 1 { '1' } else { '0' });
        key.push('.');
    }
    key.push_str(DESTINATION);
    key
}

/// The levels a message delayed by `delay_ms` waits in, in the order it
/// visits them (descending).
pub fn levels_for(delay_ms: u32) -> Vec<u8> {
    (0..LEVELS)
        .rev()
        .filter(|level| delay_ms >> level & 1 == 1)
        .collect()
}

/// The fixed `x-message-ttl` of level `level`'s queue.
pub fn ttl_ms(level: u8) -> u64 {
    1 << level
}

/// The topic pattern that matches keys whose bit `level` equals `bit`.
fn bit_pattern(level: u8, bit: char) -> String {
    let mut pattern = "*.".repeat(usize::from(LEVELS - 1 - level));
    pattern.push(bit);
    pattern.push_str(".#");
    pattern
}

/// Binding pattern of level `level`'s exchange to its own queue (bit set).
pub fn queue_pattern(level: u8) -> String {
    bit_pattern(level, '1')
}

/// Binding pattern of level `level`'s exchange to the next level down, or
/// to the delivery exchange from level 0 (bit clear).
pub fn forward_pattern(level: u8) -> String {
    bit_pattern(level, '0')
}

/// Binding pattern of the delivery exchange to the segment queue.
pub fn delivery_pattern() -> String {
    format!("#.{DESTINATION}")
}

/// One level's queue: a fixed TTL and where it dead-letters to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayQueue {
    pub level: u8,
    pub name: String,
    pub ttl_ms: u64,
    pub dead_letter_exchange: String,
}

/// Where a binding forwards matching messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Queue(String),
    Exchange(String),
}

/// One topic binding from `source` to `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub source: String,
    pub target: Target,
    pub pattern: String,
}

/// Everything the ladder needs on the broker, besides the segment queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The exchange delayed messages are published to (level 31).
    pub entry_exchange: String,
    /// All topic exchanges: the delivery exchange and one per level.
    pub exchanges: Vec<String>,
    pub delay_queues: Vec<DelayQueue>,
    pub bindings: Vec<Binding>,
}

/// The ladder for `topology`, in an order that can be declared as is:
/// exchanges, then queues, then bindings.
pub fn plan(topology: &Topology) -> Plan {
    let delivery = topology.delivery_exchange();
    let next = |level: u8| match level {
        0 => delivery.clone(),
        _ => topology.delay_level(level - 1),
    };
    let mut exchanges = vec![delivery.clone()];
    let mut delay_queues = Vec::new();
    let mut bindings = vec![Binding {
        source: delivery.clone(),
        target: Target::Queue(topology.segments_queue()),
        pattern: delivery_pattern(),
    }];
    for level in 0..LEVELS {
        let name = topology.delay_level(level);
        exchanges.push(name.clone());
        delay_queues.push(DelayQueue {
            level,
            name: name.clone(),
            ttl_ms: ttl_ms(level),
            dead_letter_exchange: next(level),
        });
        bindings.push(Binding {
            source: name.clone(),
            target: Target::Queue(name.clone()),
            pattern: queue_pattern(level),
        });
        bindings.push(Binding {
            source: name,
            target: Target::Exchange(next(level)),
            pattern: forward_pattern(level),
        });
    }
    Plan {
        entry_exchange: topology.delay_level(LEVELS - 1),
        exchanges,
        delay_queues,
        bindings,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    /// AMQP topic matching: `*` is one word, `#` zero or more.
    fn topic_matches(pattern: &[&str], key: &[&str]) -> bool {
        match pattern.split_first() {
            None => key.is_empty(),
            Some((&"#", rest)) => (0..=key.len()).any(|i| topic_matches(rest, &key[i..])),
            Some((&"*", rest)) => !key.is_empty() && topic_matches(rest, &key[1..]),
            Some((word, rest)) => key.first() == Some(word) && topic_matches(rest, &key[1..]),
        }
    }

    /// The queues `key` reaches from `exchange`, following
    /// exchange-to-exchange bindings; a set, as RabbitMQ delivers at most
    /// one copy per queue.
    fn route(plan: &Plan, exchange: &str, key: &str) -> BTreeSet<String> {
        let words: Vec<&str> = key.split('.').collect();
        let mut queues = BTreeSet::new();
        for binding in plan.bindings.iter().filter(|b| b.source == exchange) {
            let pattern: Vec<&str> = binding.pattern.split('.').collect();
            if topic_matches(&pattern, &words) {
                match &binding.target {
                    Target::Queue(queue) => {
                        queues.insert(queue.clone());
                    }
                    Target::Exchange(next) => queues.extend(route(plan, next, key)),
                }
            }
        }
        queues
    }

    /// Publishes `delay_ms` to the entry exchange of a simulated broker and
    /// lets each level queue expire; returns the levels visited and the
    /// time spent.
    fn simulate(topology: &Topology, plan: &Plan, delay_ms: u32) -> (Vec<u8>, u64) {
        let key = routing_key(delay_ms);
        let mut exchange = plan.entry_exchange.clone();
        let (mut visited, mut waited) = (Vec::new(), 0);
        for _hop in 0..=LEVELS {
            let queues = route(plan, &exchange, &key);
            assert_eq!(queues.len(), 1, "{key} from {exchange} reached {queues:?}");
            let queue = queues.into_iter().next().unwrap_or_default();
            if queue == topology.segments_queue() {
                return (visited, waited);
            }
            let level = plan
                .delay_queues
                .iter()
                .find(|q| q.name == queue)
                .unwrap_or_else(|| panic!("{queue} is not a delay queue"));
            visited.push(level.level);
            waited += level.ttl_ms;
            exchange = level.dead_letter_exchange.clone();
        }
        panic!("{key} loops through the ladder");
    }

    fn check(delay: u32) {
        let topology = Topology {
            prefix: "t".to_owned(),
            queue_expires: None,
        };
        let plan = plan(&topology);
        let (visited, waited) = simulate(&topology, &plan, delay);
        assert_eq!(visited, levels_for(delay), "delay {delay}");
        assert!(visited.windows(2).all(|w| w[0] > w[1]));
        assert!(visited.iter().all(|&k| delay >> k & 1 == 1));
        assert_eq!(visited.len(), delay.count_ones() as usize);
        assert_eq!(waited, u64::from(delay));
    }

    proptest! {
        #[test]
        fn every_delay_routes_through_exactly_its_set_bits(delay in any::<u32>()) {
            check(delay);
        }
    }

    #[test]
    fn edge_delays_route_through_exactly_their_set_bits() {
        for delay in [0, 1, 2, 3, 300, 1 << 31, u32::MAX, u32::MAX - 1] {
            check(delay);
        }
        for level in 0..LEVELS {
            check(1 << level);
        }
    }

    #[test]
    fn keys_and_patterns_read_as_documented() {
        assert_eq!(
            routing_key(5),
            format!("{}0.1.0.1.segments", "0.".repeat(28))
        );
        assert_eq!(levels_for(5), vec![2, 0]);
        assert_eq!(queue_pattern(31), "1.#");
        assert_eq!(forward_pattern(30), "*.0.#");
        assert_eq!(queue_pattern(0), format!("{}1.#", "*.".repeat(31)));
        let topology = Topology::default();
        let plan = plan(&topology);
        assert_eq!(plan.entry_exchange, "agentenkit.delay.31");
        assert_eq!(plan.exchanges.len(), 33);
        assert_eq!(plan.bindings.len(), 65);
        assert_eq!(
            plan.delay_queues[0].dead_letter_exchange,
            "agentenkit.delivery"
        );
        assert_eq!(
            plan.delay_queues[7].dead_letter_exchange,
            "agentenkit.delay.06"
        );
    }

    #[test]
    fn delays_round_up_to_whole_milliseconds_and_stop_at_the_max() {
        assert_eq!(delay_ms(Duration::ZERO).ok(), Some(0));
        assert_eq!(delay_ms(Duration::from_micros(1)).ok(), Some(1));
        assert_eq!(delay_ms(Duration::from_millis(300)).ok(), Some(300));
        assert_eq!(
            delay_ms(Duration::from_secs(30 * 86_400)).ok(),
            Some(2_592_000_000)
        );
        assert_eq!(
            delay_ms(Duration::from_millis(MAX_DELAY_MS)).ok(),
            Some(u32::MAX)
        );
        assert!(matches!(
            delay_ms(Duration::from_millis(MAX_DELAY_MS + 1)),
            Err(Error::DelayTooLong(ms)) if ms == MAX_DELAY_MS + 1
        ));
        assert!(matches!(
            delay_ms(Duration::from_micros(MAX_DELAY_MS * 1000 + 1)),
            Err(Error::DelayTooLong(_))
        ));
    }
}
