//! How a worker runs: its leases, retries, slots and the bounds on settling
//! a delivery.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// How long a lease lasts without a commit or heartbeat. A dead worker's
    /// run is picked up again after at most this long.
    pub lease_ttl: Duration,
    /// Failed attempts (model errors, unavailable tools) before the run fails.
    pub max_attempts: u32,
    /// Workers that may die holding one step before the run fails. Apart
    /// from `max_attempts`: a worker killed by its platform (a deploy, an
    /// eviction, OOM elsewhere) says nothing about the step.
    pub max_takeovers: u32,
    /// The first retry waits this long; each next one twice as long.
    pub retry_backoff: Duration,
    /// Segments in flight at once.
    pub prefetch: u16,
    /// Notifications and reminders in flight at once, from their own queue:
    /// a receiver that never answers holds these, never a segment's slot.
    pub notify_prefetch: u16,
    /// On shutdown, how long in-flight segments may take to finish.
    pub shutdown_grace: Duration,
    /// A message handed back this many times (the store kept failing for
    /// it) goes to the dead-letter queue instead of looping for ever.
    pub max_deliveries: u32,
    /// How long a handed-back message waits before it goes back, so that a
    /// failing dependency is not hammered.
    pub hand_back_delay: Duration,
    /// How long settling a delivery (an ack, or a hand-back's or dead
    /// letter's confirmed publish) may take: a broker that blocks
    /// publishers (a memory or disk alarm) must not hold the delivery's
    /// prefetch slot, or the worker's shutdown, for ever.
    pub settle_timeout: Duration,
    /// A run that workers have handed back this long because none could
    /// serve its agent version (a tool in code this build lacks, a
    /// provider it does not have) fails, with an error naming both.
    pub unserved_timeout: Duration,
    /// How often the worker looks for tables that grew past their
    /// statistics and analyzes them (`Store::analyze_grown_tables`);
    /// `None`: never (autovacuum alone).
    pub statistics_every: Option<Duration>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            // Short, and kept alive by a heartbeat every quarter while a
            // step runs: a worker killed mid-step is taken over within it
            // (the segment is redelivered at once), not after half a minute.
            lease_ttl: Duration::from_secs(4),
            max_attempts: 3,
            max_takeovers: 10,
            retry_backoff: Duration::from_millis(500),
            prefetch: 16,
            notify_prefetch: crate::notify::DEFAULT_CONCURRENCY as u16,
            shutdown_grace: Duration::from_secs(30),
            max_deliveries: 10,
            hand_back_delay: Duration::from_millis(500),
            settle_timeout: Duration::from_secs(10),
            unserved_timeout: Duration::from_secs(600),
            statistics_every: Some(Duration::from_secs(10)),
        }
    }
}
