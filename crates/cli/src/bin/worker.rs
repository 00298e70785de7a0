//! agentenkit-worker: consumes run segments from RabbitMQ and advances runs.

use std::time::Duration;

use agentenkit::{
    init_tracing, parse_duration, shutdown_on_signal, AgentConfig, Connections, LogConfig,
};
use agentenkit_runtime::{Worker, WorkerConfig};
use clap::Parser;

#[global_allocator]
static ALLOCATOR: agentenkit::Allocator = agentenkit::Allocator;

#[derive(Debug, Parser)]
#[command(version, about = "Consumes run segments and advances runs")]
struct Cli {
    #[command(flatten)]
    log: LogConfig,
    #[command(flatten)]
    connections: Connections,
    #[command(flatten)]
    agents: AgentConfig,
    /// Segments in flight at once.
    #[arg(long, env = "AGENTENKIT_PREFETCH", default_value_t = 16)]
    prefetch: u16,
    /// Notifications and reminders in flight at once, from their own queue
    /// (a receiver that never answers holds these, never a segment's slot).
    #[arg(long, env = "AGENTENKIT_NOTIFY_CONCURRENCY", default_value_t = 8)]
    notify_concurrency: u16,
    /// How long a run's lease lasts without a commit or heartbeat (a
    /// heartbeat every quarter of it keeps a long step's lease): the most a
    /// killed worker's run waits before another worker takes it over.
    #[arg(long, env = "AGENTENKIT_LEASE_TTL", default_value = "4s", value_parser = parse_duration)]
    lease_ttl: Duration,
    /// On SIGTERM, how long in-flight segments may take to finish before
    /// they are handed back (keep it under the platform's kill deadline).
    #[arg(long, env = "AGENTENKIT_SHUTDOWN_GRACE", default_value = "30s", value_parser = parse_duration)]
    shutdown_grace: Duration,
    /// How long settling a delivery (an ack, or the confirmed publish of a
    /// hand-back or dead letter) may take before the worker gives up and
    /// leaves the message to the broker: a broker blocking publishers (a
    /// memory or disk alarm) must not hold a worker's slots for ever.
    #[arg(long, env = "AGENTENKIT_SETTLE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    settle_timeout: Duration,
    /// A run that workers have handed back this long because none could
    /// serve its agent version (a tool in code this build lacks) fails,
    /// naming the version and why.
    #[arg(long, env = "AGENTENKIT_UNSERVED_TIMEOUT", default_value = "10m", value_parser = parse_duration)]
    unserved_timeout: Duration,
    /// How often the worker analyzes tables that outgrew their statistics
    /// (twice the rows, and 50 more), so plans follow the tables from their
    /// first rows; 0 turns it off (autovacuum alone).
    #[arg(long, env = "AGENTENKIT_STATISTICS_EVERY", default_value = "10s", value_parser = parse_duration)]
    statistics_every: Duration,
    /// Serve Prometheus metrics on this address at `/metrics` (e.g.
    /// `0.0.0.0:9090`); none when unset.
    #[arg(long, env = "AGENTENKIT_METRICS_LISTEN")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Failed attempts of a step before its run fails.
    #[arg(long, env = "AGENTENKIT_MAX_ATTEMPTS", default_value_t = 3)]
    max_attempts: u32,
    /// Workers that may die holding one step (each taken over after its
    /// lease ran out) before the run fails.
    #[arg(long, env = "AGENTENKIT_MAX_TAKEOVERS", default_value_t = 10)]
    max_takeovers: u32,
    /// Deliveries of a message that keeps failing before it goes to the
    /// dead-letter queue `<prefix>.dead`.
    #[arg(long, env = "AGENTENKIT_MAX_DELIVERIES", default_value_t = 10)]
    max_deliveries: u32,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _telemetry = init_tracing(cli.log.log_format, "agentenkit-worker")?;
    let registry = cli.agents.load_for_sending().await?;
    let store = cli.connections.store()?;
    let config = WorkerConfig {
        prefetch: cli.prefetch,
        notify_prefetch: cli.notify_concurrency.max(1),
        lease_ttl: cli.lease_ttl,
        max_attempts: cli.max_attempts,
        max_takeovers: cli.max_takeovers.max(1),
        max_deliveries: cli.max_deliveries.max(1),
        shutdown_grace: cli.shutdown_grace,
        settle_timeout: cli.settle_timeout,
        unserved_timeout: cli.unserved_timeout,
        statistics_every: Some(cli.statistics_every).filter(|every| !every.is_zero()),
        ..WorkerConfig::default()
    };
    let shutdown = shutdown_on_signal();
    let queue = cli
        .connections
        .queue_when_up(&registry.delay_lanes(), &shutdown)
        .await?;
    if let Some(listen) = cli.metrics_listen {
        let addr = agentenkit::serve_metrics(listen, shutdown.clone()).await?;
        tracing::info!(%addr, "metrics at /metrics");
    }
    let deployment = agentenkit_runtime::Deployment::assemble(
        store,
        agentenkit_runtime::Relay::new(queue),
        registry,
        usize::from(config.notify_prefetch),
    );
    let worker = Worker::new(&deployment, config);
    tracing::info!("worker started");
    worker.run(shutdown).await?;
    tracing::info!("worker stopped");
    Ok(())
}
