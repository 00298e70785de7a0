//! agentenkit-reaper: reclaims what the queue lost. Run it from cron with
//! `--once`, or as a loop with `--every 30s`.

use std::sync::Arc;
use std::time::Duration;

use agentenkit::{init_tracing, parse_duration, shutdown_on_signal, Connections, LogConfig};
use agentenkit_runtime::reaper::{reap_every, reap_once, ReaperConfig};
use agentenkit_runtime::{Deployment, Relay};
use clap::Parser;

#[global_allocator]
static ALLOCATOR: agentenkit::Allocator = agentenkit::Allocator;

#[derive(Debug, Parser)]
#[command(version, about = "Reclaims orphaned runs and unpublished messages")]
struct Cli {
    #[command(flatten)]
    log: LogConfig,
    #[command(flatten)]
    connections: Connections,
    /// One pass, then exit (for cron).
    #[arg(long, conflicts_with = "every")]
    once: bool,
    /// Run a pass this often until stopped.
    #[arg(long, env = "AGENTENKIT_REAP_EVERY", value_parser = parse_duration)]
    every: Option<Duration>,
    /// The expiry given to an open approval parked without one.
    #[arg(long, env = "AGENTENKIT_DEFAULT_TTL", default_value = "15m", value_parser = parse_duration)]
    default_ttl: Duration,
    /// An outbox row this long past due, its message unhandled, is
    /// published again (its committer died, or the broker lost it).
    #[arg(long, env = "AGENTENKIT_OUTBOX_STALE_AFTER", default_value = "30s", value_parser = parse_duration)]
    outbox_stale_after: Duration,
    /// The agent file: when given, the events its notification targets
    /// want are written to the outbox with the events this reaper writes
    /// (a run it fails, a request it expires), as a worker's are.
    #[arg(long = "config", env = "AGENTENKIT_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// The same for a segment's row when the segment queue has no backlog
    /// (so the message cannot be waiting in it).
    #[arg(long, env = "AGENTENKIT_OUTBOX_ORPHAN_AFTER", default_value = "5s", value_parser = parse_duration)]
    outbox_orphan_after: Duration,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _telemetry = init_tracing(cli.log.log_format, "agentenkit-reaper")?;
    let store = cli.connections.store()?;
    // With the agent file, the events this reaper writes (a run it fails,
    // a request it expires) get the `Notify` rows its targets want, for the
    // workers to send.
    let registry = match &cli.config {
        Some(path) => agentenkit_runtime::Registry::from_file(path)?,
        None => agentenkit_runtime::Registry::new(),
    };
    let looping = cli.every.is_some() && !cli.once;
    let shutdown = shutdown_on_signal();
    // A loop waits for the broker; a cron pass (`--once`) fails at once.
    let queue = if looping {
        cli.connections.queue_when_up(&[], &shutdown).await?
    } else {
        cli.connections.queue(&[]).await?
    };
    let deployment = Deployment::without_sending(store, Relay::new(queue), Arc::new(registry));
    let config = ReaperConfig {
        default_ttl: cli.default_ttl,
        outbox_stale_after: cli.outbox_stale_after,
        outbox_orphan_after: cli.outbox_orphan_after,
        ..ReaperConfig::default()
    };
    match cli.every {
        Some(every) if !cli.once => {
            reap_every(deployment, config, every, shutdown).await;
        }
        _ => {
            let report = reap_once(&deployment, &config).await?;
            println!(
                "{}",
                serde_json::json!({
                    "expiredRequests": report.expired_requests,
                    "scheduledExpiries": report.scheduled_expiries,
                    "expiredLeases": report.expired_leases,
                    "stalledQueued": report.stalled_queued,
                    "outboxPublished": report.outbox_published,
                    "idempotencyKeysDeleted": report.idempotency_keys_deleted,
                    "deliveriesDeleted": report.deliveries_deleted,
                })
            );
        }
    }
    Ok(())
}
