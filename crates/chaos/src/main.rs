//! `agentenkit-chaos` (`make chaos`): a load of runs through the HTTP API
//! while workers are SIGKILLed and the API, RabbitMQ and Postgres restart;
//! then a checker says whether anything was lost, doubled, early or stuck.
//! Exits 1 when it was.

use std::path::PathBuf;
use std::time::Duration;

use agentenkit::{parse_duration, DEFAULT_AMQP_URL, DEFAULT_DATABASE_URL};
use agentenkit_chaos::faults::{local_postgres_restart, FaultKind};
use agentenkit_chaos::{self as chaos, ChaosConfig};
use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Outage {
    Api,
    Broker,
    Postgres,
}

#[derive(Debug, Parser)]
#[command(
    name = "agentenkit-chaos",
    about = "Faults on purpose: runs under worker kills and API, broker and database restarts, checked from the outside"
)]
struct Args {
    /// Postgres connection URL [default: postgres://postgres@127.0.0.1:5432/agentenkit].
    #[arg(long, env = "DATABASE_URL", default_value = DEFAULT_DATABASE_URL, hide_env_values = true, hide_default_value = true)]
    database_url: String,
    /// RabbitMQ URL [default: amqp://guest:***@127.0.0.1:5672/%2f].
    #[arg(long, env = "AMQP_URL", default_value = DEFAULT_AMQP_URL, hide_env_values = true, hide_default_value = true)]
    amqp_url: String,
    /// Runs to drive.
    #[arg(long, env = "CHAOS_RUNS", default_value_t = 1000)]
    runs: usize,
    /// Runs in flight at once.
    #[arg(long, default_value_t = 24)]
    concurrency: usize,
    /// Worker processes.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Seed of the load's choices and of the fault schedule.
    #[arg(long, env = "CHAOS_SEED", default_value_t = 7)]
    seed: u64,
    /// `classic`, or `quorum` (as a RabbitMQ cluster would run it).
    #[arg(long, env = "AGENTENKIT_QUEUE_TYPE", default_value = "classic")]
    queue_type: agentenkit_queue::QueueType,
    /// Do not kill workers.
    #[arg(long)]
    no_kills: bool,
    /// The outages that take turns (comma-separated; `none` for none).
    #[arg(long, value_delimiter = ',', default_value = "api,broker,postgres")]
    outages: Vec<String>,
    /// Pause between two outages.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    outage_every: Duration,
    /// How long RabbitMQ stays stopped.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    broker_down: Duration,
    /// Shell command that restarts Postgres [default: pg_ctlcluster <version> <name> restart,
    /// when this machine has one Debian cluster].
    #[arg(long, env = "CHAOS_POSTGRES_RESTART")]
    postgres_restart: Option<String>,
    /// How long the approved action (the `send` tool) takes.
    #[arg(long, default_value = "300ms", value_parser = parse_duration)]
    tool_latency: Duration,
    /// TTL of the requests nobody answers.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    expiry_ttl: Duration,
    /// How long one run may take before it counts as stuck.
    #[arg(long, default_value = "180s", value_parser = parse_duration)]
    run_timeout: Duration,
    /// Where the processes' logs go (a directory per run; removed when it passes).
    #[arg(long, default_value = "target/chaos")]
    log_dir: PathBuf,
    /// Keep the schema, the queues and the logs even when the run passes.
    #[arg(long)]
    keep: bool,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Its report is for a person: only warnings log (to stderr).
    let _telemetry = agentenkit::init_tracing_at(
        "warn,lapin=off",
        agentenkit::LogFormat::Text,
        "agentenkit-chaos",
    )?;
    let args = Args::parse();
    let mut outages = Vec::new();
    for name in args.outages.iter().filter(|n| n.as_str() != "none") {
        outages.push(
            match Outage::from_str(name, true).map_err(anyhow::Error::msg)? {
                Outage::Api => FaultKind::ApiRestart,
                Outage::Broker => FaultKind::BrokerRestart,
                Outage::Postgres => FaultKind::PostgresRestart,
            },
        );
    }
    let postgres_restart = args
        .postgres_restart
        .clone()
        .or_else(local_postgres_restart);
    if outages.contains(&FaultKind::PostgresRestart) && postgres_restart.is_none() {
        anyhow::bail!(
            "cannot restart Postgres here: give --postgres-restart '<command>' or leave postgres out of --outages"
        );
    }
    let config = ChaosConfig {
        database_url: args.database_url,
        amqp_url: args.amqp_url,
        runs: args.runs,
        concurrency: args.concurrency,
        workers: args.workers,
        seed: args.seed,
        queue_type: args.queue_type,
        kill_workers: !args.no_kills,
        outages,
        outage_every: args.outage_every,
        broker_down: args.broker_down,
        postgres_restart,
        tool_latency: args.tool_latency,
        expiry_ttl: args.expiry_ttl,
        run_timeout: args.run_timeout,
        log_dir: args.log_dir,
        keep: args.keep,
    };
    let report = chaos::run(&config).await?;
    println!("{report}");
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report.to_json())?)?;
    }
    if !report.passed() {
        std::process::exit(1);
    }
    Ok(())
}
