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
//! Spelling a delay in binary costs one persistent hop per set bit: the
//! default 15-minute TTL (900,000 ms) has 11. A deployment's usual delays
//! (the TTLs its agents are configured with) get a *lane* each: one queue
//! whose fixed TTL is that delay, reached from the delivery exchange by the
//! destination word `after-<ms>`, dead-lettering to the segment queue. A
//! delay of exactly a lane's length then costs one hop; a longer one spells
//! the remainder on the ladder with the lane as its destination, when that
//! costs fewer hops. Lanes are FIFO for the same reason levels are.
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
    routing_key_to(delay_ms, DESTINATION)
}

/// The routing key of a message that waits `delay_ms` on the ladder, then
/// goes to `destination` (a word: [`DESTINATION`] or a lane's).
pub fn routing_key_to(delay_ms: u32, destination: &str) -> String {
    let mut key = String::with_capacity(2 * LEVELS as usize + destination.len());
    for level in (0..LEVELS).rev() {
        key.push(if delay_ms >> level & 1 == 1 { '1' } else { '0' });
        key.push('.');
    }
    key.push_str(destination);
    key
}

/// The destination word of the lane of `lane_ms`.
pub fn lane_word(lane_ms: u32) -> String {
    format!("after-{lane_ms}")
}

/// How a delay travels: the routing key to publish with (to the ladder's
/// entry exchange) and the delay queues it passes through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub key: String,
    /// Ladder levels, in the order visited, then the lane (if any).
    pub levels: Vec<u8>,
    pub lane: Option<u32>,
}

impl Route {
    /// Persistent delay-queue hops on the way.
    pub fn hops(&self) -> usize {
        self.levels.len() + usize::from(self.lane.is_some())
    }

    /// Where to publish: the exchange and routing key. A message enters the
    /// ladder at the level of its highest set bit (the levels above would
    /// only forward it, each an exchange-to-exchange routing step on the
    /// broker's hot path); a lane with nothing left on the ladder is
    /// published straight to its queue through the default exchange (`""`).
    pub fn entry(&self, topology: &Topology) -> (String, String) {
        match (self.levels.first(), self.lane) {
            (Some(&top), _) => (topology.delay_level(top), self.key.clone()),
            (None, Some(lane)) => (String::new(), topology.delay_lane(lane)),
            (None, None) => (topology.delivery_exchange(), self.key.clone()),
        }
    }
}

/// The cheapest way to delay by `delay_ms` with the given lanes: the plain
/// ladder, or the longest lane that fits with the remainder on the ladder,
/// whichever passes fewer queues (the ladder when they tie).
pub fn route(delay_ms: u32, lanes: &[u32]) -> Route {
    let plain = Route {
        key: routing_key(delay_ms),
        levels: levels_for(delay_ms),
        lane: None,
    };
    let best_lane = lanes
        .iter()
        .copied()
        .filter(|&lane| lane > 0 && lane <= delay_ms)
        .map(|lane| {
            let rest = delay_ms - lane;
            Route {
                key: routing_key_to(rest, &lane_word(lane)),
                levels: levels_for(rest),
                lane: Some(lane),
            }
        })
        .min_by_key(Route::hops);
    match best_lane {
        Some(lane) if lane.hops() < plain.hops() => lane,
        _ => plain,
    }
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

/// Binding pattern of the delivery exchange to the lane of `lane_ms`.
pub fn lane_pattern(lane_ms: u32) -> String {
    format!("#.{}", lane_word(lane_ms))
}

/// One level's queue: a fixed TTL and where it dead-letters to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayQueue {
    /// The ladder level, or `None` for a lane.
    pub level: Option<u8>,
    pub name: String,
    pub ttl_ms: u64,
    pub dead_letter_exchange: String,
    /// The routing key a message leaves with (a lane's: [`DESTINATION`]);
    /// `None` keeps the key it came with.
    pub dead_letter_routing_key: Option<String>,
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
            level: Some(level),
            name: name.clone(),
            ttl_ms: ttl_ms(level),
            dead_letter_exchange: next(level),
            dead_letter_routing_key: None,
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
    for &lane in &topology.lanes() {
        let name = topology.delay_lane(lane);
        delay_queues.push(DelayQueue {
            level: None,
            name: name.clone(),
            ttl_ms: u64::from(lane),
            dead_letter_exchange: delivery.clone(),
            dead_letter_routing_key: Some(DESTINATION.to_owned()),
        });
        bindings.push(Binding {
            source: delivery.clone(),
            target: Target::Queue(name),
            pattern: lane_pattern(lane),
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
    fn route_key(plan: &Plan, exchange: &str, key: &str) -> BTreeSet<String> {
        let words: Vec<&str> = key.split('.').collect();
        let mut queues = BTreeSet::new();
        for binding in plan.bindings.iter().filter(|b| b.source == exchange) {
            let pattern: Vec<&str> = binding.pattern.split('.').collect();
            if topic_matches(&pattern, &words) {
                match &binding.target {
                    Target::Queue(queue) => {
                        queues.insert(queue.clone());
                    }
                    Target::Exchange(next) => queues.extend(route_key(plan, next, key)),
                }
            }
        }
        queues
    }

    /// Publishes with `key` to the entry exchange of a simulated broker and
    /// lets each delay queue expire (dead-lettering with its own key when it
    /// has one); returns the levels and lanes visited and the time spent.
    fn simulate(topology: &Topology, plan: &Plan, key: &str) -> (Vec<u8>, Vec<u64>, u64) {
        simulate_from(topology, plan, &plan.entry_exchange, key)
    }

    /// As [`simulate`], entering at `exchange` (`""`: the default exchange,
    /// which routes a key to the queue of that name).
    fn simulate_from(
        topology: &Topology,
        plan: &Plan,
        exchange: &str,
        key: &str,
    ) -> (Vec<u8>, Vec<u64>, u64) {
        let mut key = key.to_owned();
        let mut exchange = exchange.to_owned();
        let (mut levels, mut lanes, mut waited) = (Vec::new(), Vec::new(), 0);
        for _hop in 0..=LEVELS + 1 {
            let queues = if exchange.is_empty() {
                BTreeSet::from([key.clone()])
            } else {
                route_key(plan, &exchange, &key)
            };
            assert_eq!(queues.len(), 1, "{key} from {exchange} reached {queues:?}");
            let queue = queues.into_iter().next().unwrap_or_default();
            if queue == topology.segments_queue() {
                return (levels, lanes, waited);
            }
            let delay = plan
                .delay_queues
                .iter()
                .find(|q| q.name == queue)
                .unwrap_or_else(|| panic!("{queue} is not a delay queue"));
            match delay.level {
                Some(level) => levels.push(level),
                None => lanes.push(delay.ttl_ms),
            }
            waited += delay.ttl_ms;
            exchange = delay.dead_letter_exchange.clone();
            if let Some(next) = &delay.dead_letter_routing_key {
                key = next.clone();
            }
        }
        panic!("{key} loops through the ladder");
    }

    fn topology(lanes: &[u64]) -> Topology {
        Topology {
            prefix: "t".to_owned(),
            queue_expires: None,
            delay_lanes: lanes.to_vec(),
            ..Topology::default()
        }
    }

    fn check(delay: u32) {
        let topology = topology(&[]);
        let plan = plan(&topology);
        let (visited, lanes, waited) = simulate(&topology, &plan, &routing_key(delay));
        assert!(lanes.is_empty());
        assert_eq!(visited, levels_for(delay), "delay {delay}");
        assert!(visited.windows(2).all(|w| w[0] > w[1]));
        assert!(visited.iter().all(|&k| delay >> k & 1 == 1));
        assert_eq!(visited.len(), delay.count_ones() as usize);
        assert_eq!(waited, u64::from(delay));
    }

    /// With lanes: the route waits exactly the delay, through the levels
    /// and lane it names, never through more queues than the plain ladder.
    fn check_lanes(delay: u32, lanes: &[u64]) {
        let topology = topology(lanes);
        let plan = plan(&topology);
        let route = route(delay, &topology.lanes());
        // The full key from the ladder's top, and the short cut from where
        // the route enters, take the same path.
        let (exchange, key) = route.entry(&topology);
        for (visited, lanes_visited, waited) in [
            simulate(&topology, &plan, &route.key),
            simulate_from(&topology, &plan, &exchange, &key),
        ] {
            assert_eq!(waited, u64::from(delay), "delay {delay} via {route:?}");
            assert_eq!(visited, route.levels);
            assert_eq!(
                lanes_visited,
                route.lane.map(u64::from).into_iter().collect::<Vec<_>>()
            );
        }
        assert!(route.hops() <= delay.count_ones() as usize);
    }

    proptest! {
        #[test]
        fn every_delay_routes_through_exactly_its_set_bits(delay in any::<u32>()) {
            check(delay);
        }

        #[test]
        fn with_lanes_every_delay_waits_exactly_its_length_in_no_more_hops(
            delay in any::<u32>(),
            lanes in proptest::collection::vec(0u64..(1u64 << 33), 0..4),
            exact in any::<bool>(),
        ) {
            let mut lanes = lanes;
            if exact {
                lanes.push(u64::from(delay));
            }
            check_lanes(delay, &lanes);
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
    fn the_configured_ttl_takes_one_hop_and_a_little_more_takes_few() {
        let lanes = [900_000u64, 3_600_000];
        check_lanes(900_000, &lanes);
        let topology = topology(&lanes);
        assert_eq!(route(900_000, &topology.lanes()).hops(), 1);
        assert_eq!(
            routing_key(900_000).matches('1').count(),
            11,
            "the ladder's 11"
        );
        // A delay just past a lane spells only the remainder.
        let past = route(900_003, &topology.lanes());
        assert_eq!(
            (past.lane, past.levels.clone()),
            (Some(900_000), vec![1, 0])
        );
        check_lanes(900_003, &lanes);
        // Shorter than every lane, or cheaper on the ladder: the ladder.
        assert_eq!(route(1_000, &topology.lanes()).lane, None);
        assert_eq!(route(0, &topology.lanes()).hops(), 0);
        // The plan: one queue per lane, bound from the delivery exchange,
        // leaving for the segment queue.
        let plan = plan(&topology);
        let lane = plan
            .delay_queues
            .iter()
            .find(|q| q.name == "t.delay.after-900000")
            .unwrap();
        assert_eq!(lane.ttl_ms, 900_000);
        assert_eq!(lane.dead_letter_exchange, "t.delivery");
        assert_eq!(lane.dead_letter_routing_key.as_deref(), Some(DESTINATION));
        // Lanes too long for the ladder, or zero, are ignored.
        assert_eq!(
            self::topology(&[0, 1 << 40, 5, 5]).lanes(),
            vec![5],
            "sorted, distinct, within reach"
        );
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
