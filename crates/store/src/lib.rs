//! The Postgres store of agentenkit: the only source of truth.
//!
//! Every state change is one transaction. Workers write through
//! [`Store::commit`], which applies a list of [`Change`]s fenced by the
//! worker's [`Lease`]: a worker whose lease ran out changes nothing.
//! Messages that must follow a commit are written to the outbox in that same
//! transaction, and the store hands them to its [`Publisher`] right after
//! it commits: no caller has to remember to.

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

mod answer;
mod bounded;
mod calls;
mod change;
mod commit;
mod engine;
mod error;
mod event_insert;
mod expire;
mod format;
mod idempotency;
mod keys;
mod lease;
pub mod memory;
mod migrate;
mod notifications;
mod outbox;
mod pipeline;
mod poll;
mod reclaim;
mod runs;
mod sent_here;
mod shares;
mod start;
mod statistics;
mod stop;
#[cfg(test)]
mod test_changes;
mod threads;
mod tls;
mod turns;
mod upgrade;
mod versions;
mod views;
mod wait;
mod watch;

pub use answer::{AddressedTool, AnswerTarget, Answered, LockedCall};
pub use bounded::{ReadBound, ReadPage};
pub use change::Change;
pub use commit::Committed;
pub use engine::{ProviderLimit, Reservation, RunEngine, Steering};
pub use error::{Error, Result};
pub use event_insert::{INSERT_EVENT_SQL, INSERT_MESSAGE_SQL};
pub use expire::{Expiry, Scope};
pub use idempotency::{Claim, Hold, KeyTimes, RecordedItem};
pub use keys::{is_key_form, KeyRecord, NewKey, KEY_PREFIX};
pub use lease::{Lease, LeaseAttempt, RunContext};
pub use memory::MemoryEngine;
pub use notifications::{
    Attempted, DeliveryAttempt, DeliveryResult, DeliveryRow, RecordItem, Recorded, RetryRule,
};
pub use outbox::{OutboxRow, Publisher};
pub use pipeline::retry_conflicts;
pub use poll::{PolledCall, WaitingCall};
pub use reclaim::Reclaimed;
pub use sent_here::{ClaimedEvent, LocalSender, SentHere};
pub use start::StartedRun;
pub use statistics::{PreparedPlan, GROWN_MARGIN_ROWS};
pub use threads::THREAD_PENDING_INPUTS;
pub use tls::SslMode;
pub use turns::{Arrival, Forked, Once, PostedTurn, Sent};
pub use upgrade::{LockedRun, OpenCall, OpenRun};
pub use versions::StoredVersion;
pub use views::{
    EventView, InboxPosition, MessageView, PendingInput, QueuedTurn, RunView, Spending, ThreadView,
    UsageView,
};
pub use watch::EventWatch;

/// How to reach the database.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub database_url: String,
    /// The schema to use (through `search_path`); `None` uses the server's
    /// default (`public`). Tests use one schema each.
    pub schema: Option<String>,
    pub max_connections: usize,
    /// How long a caller waits for a pooled connection (and for a new one
    /// to connect) before it gets an error [`Error::is_unavailable`] says
    /// is one: a saturated pool answers 503 rather than hanging requests.
    pub pool_wait: Duration,
    /// The server's `statement_timeout` for this store's sessions
    /// (migrations lift it for their own transactions).
    pub statement_timeout: Duration,
    /// Plan every statement as for tables that grow: the store's sessions
    /// run with `enable_seqscan = off` and
    /// `plan_cache_mode = force_generic_plan`. Each hot statement has an
    /// index; planned while its table was empty (a fresh deployment, a
    /// truncate, a new partition) and kept as a prepared statement's
    /// generic plan, it would otherwise read the whole table every time
    /// until something analyzes it, costing more with every thread stored.
    /// And Postgres's choice between a generic and a per-execution plan
    /// compares the generic plan's cost with the average of the first five
    /// custom plans, made while the tables were small: once an `ANALYZE`
    /// shows them grown, the generic plan looks dearer than that stale
    /// average and the statement is planned again at every execution
    /// (docs/performance.md). A statement without an index still scans.
    pub plan_for_growth: bool,
}

impl StoreConfig {
    pub fn new(database_url: impl Into<String>) -> Self {
        Self {
            database_url: database_url.into(),
            schema: None,
            max_connections: 16,
            pool_wait: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(30),
            plan_for_growth: true,
        }
    }
}

/// A handle on the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    schema: Option<String>,
    publisher: Option<std::sync::Arc<dyn Publisher>>,
    /// The events whose commits also write a `Notify` outbox row (the
    /// deployment's notification targets want them).
    notified: agentenkit_core::notify::NotifiedEvents,
    /// The notified events this process claims and sends itself, if any.
    sent_here: Option<std::sync::Arc<sent_here::SentHere>>,
    /// The version of each agent this process loaded, by agent name: a
    /// turn's run is pinned to it when it starts.
    agent_versions: std::sync::Arc<std::sync::RwLock<std::collections::HashMap<String, String>>>,
    /// The agents of threads this process created or started turns on.
    thread_agents: std::sync::Arc<start::ThreadAgents>,
    /// The caps runs start under (`shares`); `None` when none is set, so a
    /// deployment without caps does not look them up per run.
    run_limits: Option<std::sync::Arc<agentenkit_core::shares::RunLimits>>,
}

impl Store {
    /// Builds the pool; connections open lazily, so this does not fail when
    /// the server is down (`ready` tells).
    pub fn connect(config: &StoreConfig) -> Result<Store> {
        let split = tls::split_url(&config.database_url)?;
        let mut pg = tokio_postgres::Config::from_str(&split.url)
            .map_err(|e| Error::Config(format!("invalid database url: {e}")))?;
        let mut options = format!(
            "-c statement_timeout={}",
            config.statement_timeout.as_millis()
        );
        if config.plan_for_growth {
            options.push_str(" -c enable_seqscan=off -c plan_cache_mode=force_generic_plan");
        }
        if let Some(schema) = &config.schema {
            if !is_plain_identifier(schema) {
                return Err(Error::Config(format!("invalid schema name {schema:?}")));
            }
            options.push_str(&format!(" -c search_path={schema}"));
        }
        pg.options(options);
        pg.connect_timeout(config.pool_wait);
        pg.application_name("agentenkit");
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = match tls::client_config(&split)? {
            Some(tls) => Manager::from_config(
                pg,
                tokio_postgres_rustls::MakeRustlsConnect::new(tls),
                manager_config,
            ),
            None => Manager::from_config(pg, NoTls, manager_config),
        };
        let pool = Pool::builder(manager)
            .max_size(config.max_connections.max(1))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(config.pool_wait))
            .create_timeout(Some(config.pool_wait))
            .recycle_timeout(Some(config.pool_wait))
            .build()
            .map_err(|e| Error::Config(e.to_string()))?;
        Ok(Store {
            pool,
            schema: config.schema.clone(),
            publisher: None,
            notified: agentenkit_core::notify::NotifiedEvents::NONE,
            sent_here: None,
            agent_versions: std::sync::Arc::default(),
            thread_agents: std::sync::Arc::default(),
            run_limits: None,
        })
    }

    /// The same store, handing what each transaction writes to the outbox
    /// to `publisher` once it commits. A store without one leaves those
    /// messages to the reaper (which publishes outbox rows left past due):
    /// right for tools that only read, slow for anything that writes.
    pub fn with_publisher(mut self, publisher: std::sync::Arc<dyn Publisher>) -> Store {
        self.publisher = Some(publisher);
        self
    }

    /// The same store, writing a `Notify` outbox row in the transaction of
    /// every event of these types, for the notification targets. Every
    /// process that writes events (worker, API, reaper) must be told the
    /// same set: an event written by one told none is sent to nobody.
    pub fn with_notified(mut self, notified: agentenkit_core::notify::NotifiedEvents) -> Store {
        self.notified = notified;
        self
    }

    /// The same store, claiming in the transaction of each notified event
    /// the first attempt of its delivery to each target `sent_here` names
    /// for its type, and handing the event, once committed, to its sender
    /// (see `sent_here`). The `Notify` outbox row is still written, due
    /// when the claim runs out, for the reaper.
    pub fn with_sent_here(mut self, sent_here: sent_here::SentHere) -> Store {
        self.sent_here = Some(std::sync::Arc::new(sent_here));
        self
    }

    /// The same store, starting each run under the caps `limits` set for
    /// its agent and owner (`shares`). Every process that starts runs (the
    /// API, the workers, which start sub-agents) must be told the same.
    pub fn with_run_limits(mut self, limits: agentenkit_core::shares::RunLimits) -> Store {
        self.run_limits = (!limits.is_empty()).then(|| std::sync::Arc::new(limits));
        self
    }

    /// The caps a run of `agent` starts under, if any.
    pub(crate) fn slot_of(&self, agent: &str) -> Option<agentenkit_core::shares::Slot> {
        self.run_limits.as_ref()?.slot_of(agent)
    }

    /// The caps runs start under, `None` when none is set.
    pub(crate) fn run_limits(&self) -> Option<&agentenkit_core::shares::RunLimits> {
        self.run_limits.as_deref()
    }

    /// How this store's transactions notify.
    pub(crate) fn notify_rule(&self) -> event_insert::NotifyRule<'_> {
        event_insert::NotifyRule {
            events: self.notified,
            here: self.sent_here.as_deref(),
        }
    }

    /// The same store, pinning each turn's run it starts to the version
    /// `versions` names for its agent (agent name → version hash).
    pub fn with_agent_versions(
        mut self,
        versions: std::collections::HashMap<String, String>,
    ) -> Store {
        self.agent_versions = std::sync::Arc::new(std::sync::RwLock::new(versions));
        self
    }

    /// The same store, pinning turns as `other` does, now and after
    /// `other` is re-pinned (a deployment wired again from the same one).
    pub fn sharing_pins_of(mut self, other: &Store) -> Store {
        self.agent_versions = other.agent_versions.clone();
        self
    }

    /// Pins the turns this store (and every clone of it) starts from now
    /// on to `versions` (a deployment's file listed again).
    pub fn repin_agent_versions(&self, versions: std::collections::HashMap<String, String>) {
        *self.agent_versions.write().expect("agent versions") = versions;
    }

    /// The version a turn's run of `agent` starts on, if it has one.
    pub(crate) fn pinned_version_of(&self, agent: &str) -> Option<String> {
        self.agent_versions
            .read()
            .expect("agent versions")
            .get(agent)
            .cloned()
    }

    /// The events this store writes a `Notify` outbox row for.
    pub fn notified(&self) -> agentenkit_core::notify::NotifiedEvents {
        self.notified
    }

    /// Hands `rows`, committed, to the publisher; an event claimed to be
    /// sent here goes to its sender instead, unless it is busy.
    pub(crate) async fn publish(&self, rows: &[OutboxRow]) {
        if rows.iter().all(|r| r.claimed.is_none()) {
            if let (Some(publisher), false) = (&self.publisher, rows.is_empty()) {
                publisher.publish(rows).await;
            }
            return;
        }
        let mut left = Vec::with_capacity(rows.len());
        for row in rows {
            let taken = match (&row.claimed, &self.sent_here) {
                (Some(claimed), Some(here)) => here.sender().offer(claimed.clone()),
                _ => false,
            };
            if !taken {
                left.push(OutboxRow {
                    claimed: None,
                    ..row.clone()
                });
            }
        }
        if let (Some(publisher), false) = (&self.publisher, left.is_empty()) {
            publisher.publish(&left).await;
        }
    }

    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object> {
        Ok(self.pool.get().await?)
    }

    /// Ok when the database answers.
    pub async fn ready(&self) -> Result<()> {
        let client = self.client().await?;
        client.simple_query("SELECT 1").await?;
        Ok(())
    }

    /// Whether this store's connections are encrypted (`pg_stat_ssl`), for
    /// the startup log and for checking a deployment's `sslmode`.
    pub async fn connection_encrypted(&self) -> Result<bool> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)",
                &[],
            )
            .await?;
        Ok(row.get(0))
    }

    /// A server setting (`SHOW name`).
    pub async fn setting(&self, name: &str) -> Result<String> {
        if !is_plain_identifier(name) {
            return Err(Error::Config(format!("invalid setting name {name:?}")));
        }
        let client = self.client().await?;
        let row = client.query_one(&format!("SHOW {name}"), &[]).await?;
        Ok(row.get(0))
    }

    /// The schema this store works in, if not the default.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// Drops this store's schema and everything in it (tests only clean up
    /// with this; production never calls it).
    ///
    /// A reader still running (a stream's page being read as its API
    /// stops) locks a view before the tables under it, the drop the tables
    /// before their views: Postgres may end one of them as a deadlock, and
    /// when that is the drop it is tried again.
    pub async fn drop_schema(&self) -> Result<()> {
        let Some(schema) = &self.schema else {
            return Ok(());
        };
        let client = self.client().await?;
        let drop = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
        let mut attempt = 1;
        loop {
            match client.batch_execute(&drop).await {
                Err(e)
                    if attempt < 5
                        && e.code()
                            == Some(&tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED) =>
                {
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                result => return Ok(result?),
            }
        }
    }
}

fn is_plain_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        assert!(is_plain_identifier("t_0190abc"));
        assert!(!is_plain_identifier(""));
        assert!(!is_plain_identifier("1abc"));
        assert!(!is_plain_identifier("a;drop"));
        assert!(!is_plain_identifier("Public"));
    }
}
