//! agentenkit-reaper: reclaims what the queue lost. Run it from cron with
//! `--once`, or as a loop with `--every 30s`.

use std::time::Duration;

use agentenkit::{init_tracing, parse_duration, shutdown_on_signal, Connections, LogConfig};
use agentenkit_runtime::reaper::{reap_every, reap_once, ReaperConfig};
use agentenkit_runtime::Relay;
use clap::Parser;

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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_tracing(cli.log.log_format);
    let store = cli.connections.store()?;
    let queue = cli.connections.queue(&[]).await?;
    let relay = Relay::new(queue);
    let config = ReaperConfig {
        default_ttl: cli.default_ttl,
        ..ReaperConfig::default()
    };
    match cli.every {
        Some(every) if !cli.once => {
            reap_every(store, relay, config, every, shutdown_on_signal()).await;
        }
        _ => {
            let report = reap_once(&store, &relay, &config).await?;
            println!(
                "{}",
                serde_json::json!({
                    "expiredRequests": report.expired_requests,
                    "scheduledExpiries": report.scheduled_expiries,
                    "expiredLeases": report.expired_leases,
                    "stalledQueued": report.stalled_queued,
                    "outboxPublished": report.outbox_published,
                })
            );
        }
    }
    Ok(())
}
