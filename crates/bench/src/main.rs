//! `agentenkit-bench`: N runs parked for approval, then approved, at each
//! concurrency; prints cycles/s, latencies, Postgres commits per cycle and
//! bytes per parked thread, beside a raw INSERT baseline measured in the same
//! run and the peers' figures (LangGraph, DBOS) when their results exist.
//!
//! Everything is real: Postgres (a fresh `bench_<uuid>` schema, dropped at
//! the end), RabbitMQ (a unique `bench.<uuid>` prefix, deleted at the end),
//! one in-process worker. The approved tool is an in-process function.

mod against_peers;
mod cpu;
mod cycle;
mod expiry;
mod fleet;
mod hub;
mod meter;
mod peers;
mod report;
mod shares;
mod statements;
mod webhook;
mod wire;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cpu::CpuSample;
use crate::cycle::{park_phase, resume_phase, start_worker, Ctx};
use crate::fleet::{Fleet, FleetConfig};
use crate::hub::{HookedQueue, Hub, Publishes};
use crate::meter::{Meter, ProcSample};
use crate::report::{ConfigResult, Params, Passes, RoundTrips};
use crate::wire::Proxy;
use agentenkit::{redact, QueueKind, DEFAULT_AMQP_URL, DEFAULT_DATABASE_URL};
use agentenkit_core::Owner;
use agentenkit_queue::memory::MemoryQueue;
use agentenkit_queue::rabbit::RabbitQueue;
use agentenkit_queue::{QueueAdapter, Topology};
use agentenkit_runtime::Deployment;
use agentenkit_runtime::Relay;
use agentenkit_store::{Store, StoreConfig};
use anyhow::{bail, Context};
use clap::Parser;

#[global_allocator]
static ALLOCATOR: agentenkit::Allocator = agentenkit::Allocator;

#[derive(Debug, Parser)]
#[command(
    name = "agentenkit-bench",
    about = "Benchmark: runs parked for approval, approved, resumed, completed"
)]
struct Args {
    /// Send each cycle's INPUT_REQUIRED, INPUT_RESOLVED and RUN_COMPLETED,
    /// signed, to a webhook receiver in this process: what notifications
    /// cost (compare a run without it).
    #[arg(long, env = "BENCH_NOTIFY")]
    notify: bool,
    /// Parked-then-approved runs per concurrency.
    #[arg(long, env = "BENCH_N", default_value_t = 2000)]
    n: usize,
    /// Requests for the expiry-accuracy measurement (0 skips it).
    #[arg(long, env = "BENCH_EXPIRY_N", default_value_t = 1000)]
    expiry_n: usize,
    /// Cycles of the round-trip pass (c=1, through a counting proxy in
    /// front of Postgres, after the measured configurations; 0 skips it).
    #[arg(long, env = "BENCH_ROUND_TRIP_N", default_value_t = 200)]
    round_trip_n: usize,
    /// Full cycles before each configuration's measurement (excluded).
    #[arg(long, env = "BENCH_WARMUP", default_value_t = 50)]
    warmup: usize,
    /// Client tasks, one configuration each (comma-separated).
    #[arg(
        long,
        env = "BENCH_CONCURRENCY",
        default_value = "1,8",
        value_delimiter = ','
    )]
    concurrency: Vec<usize>,
    #[arg(long, env = "DATABASE_URL", default_value = DEFAULT_DATABASE_URL, hide_env_values = true, hide_default_value = true)]
    database_url: String,
    #[arg(long, env = "AMQP_URL", default_value = DEFAULT_AMQP_URL, hide_env_values = true, hide_default_value = true)]
    amqp_url: String,
    #[arg(long, env = "BENCH_QUEUE", value_enum, default_value_t = QueueKind::Rabbitmq)]
    queue: QueueKind,
    /// Seconds of the raw INSERT baseline, per client count.
    #[arg(long, env = "BENCH_BASELINE_SECS", default_value_t = 3.0)]
    baseline_secs: f64,
    /// Idle seconds before reading Postgres counters (PG 15 backends flush
    /// them within 10 s of going idle).
    #[arg(long, env = "BENCH_STATS_FLUSH_SECS", default_value_t = 11.0)]
    stats_flush_secs: f64,
    /// Connections of the store's pool (clients and worker share it).
    #[arg(long, env = "BENCH_POOL_SIZE", default_value_t = 16)]
    pool_size: usize,
    /// Where the peers' RESULTS*.md are.
    #[arg(long, env = "PEERS_DIR", default_value = "../shared/peers")]
    peers_dir: PathBuf,
    /// Also write the figures as JSON (default path when given no value).
    #[arg(long, env = "BENCH_JSON", num_args = 0..=1, default_missing_value = "target/agentenkit-bench.json")]
    json: Option<PathBuf>,
    /// Cycles of the scaling pass (1, then 2 `agentenkit-worker` processes,
    /// at the largest concurrency); 0 skips it. RabbitMQ only.
    #[arg(long, env = "BENCH_SCALE_N", default_value_t = 1000)]
    scale_n: usize,
    /// Threads the park-many pass parks through one worker process,
    /// sampling its RSS at each quarter; 0 skips it (`make bench-park-many`
    /// runs 100,000). RabbitMQ only.
    #[arg(long, env = "BENCH_PARK_MANY", default_value_t = 0)]
    park_many: usize,
    /// Runs of the fair-shares pass's burst (one owner, 2 worker
    /// processes), under no cap and then under `max_concurrent_runs`,
    /// while a second owner starts `--shares-late` runs; 0 skips it.
    /// RabbitMQ only.
    #[arg(long, env = "BENCH_SHARES_N", default_value_t = 2000)]
    shares_n: usize,
    #[arg(long, env = "BENCH_SHARES_LATE", default_value_t = 20)]
    shares_late: usize,
    /// After each configuration's warm-up, ANALYZE the tables (as a
    /// deployment's autovacuum does once they grow), so prepared statements
    /// plan again with the tables' sizes. Off by default: the peers measure
    /// from freshly truncated, vacuumed tables, and so does the bench. With a
    /// warm-up of a few thousand cycles this measures the steady state.
    #[arg(long, env = "BENCH_ANALYZE_AFTER_WARMUP")]
    analyze_after_warmup: bool,
    /// Keep the bench schema (for inspection) instead of dropping it.
    #[arg(long)]
    keep_schema: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Its report is for a person: only warnings log (to stderr).
    let _telemetry = agentenkit::init_tracing_at(
        "warn,lapin=off",
        agentenkit::LogFormat::Text,
        "agentenkit-bench",
    )?;
    let args = Args::parse();
    if args.n == 0 || args.concurrency.is_empty() || args.concurrency.contains(&0) {
        bail!("--n and every --concurrency must be at least 1");
    }
    let started = Instant::now();
    let id = uuid::Uuid::now_v7().simple().to_string();
    let schema = format!("bench_{id}");
    let mut meter = Meter::connect(&args.database_url, &schema).await?;
    let others = meter.client_backends().await?;
    if others > 0 {
        eprintln!(
            "warning: {others} other client session(s) on database {}: their commits count in ours",
            meter.dbname()
        );
    }
    let mut config = StoreConfig::new(&args.database_url);
    config.schema = Some(schema.clone());
    config.max_connections = args.pool_size;
    let store = Store::connect(&config)?;
    store
        .migrate()
        .await
        .context("migrating the bench schema")?;

    // Ctrl-C / SIGTERM still drops the schema (the broker topology then
    // expires by itself).
    let interrupted = agentenkit::shutdown_on_signal();
    let outcome = tokio::select! {
        outcome = bench(&args, store.clone(), &mut meter, &schema, &id, started) => outcome,
        _ = interrupted.cancelled() => Err(anyhow::anyhow!("interrupted")),
    };
    if args.keep_schema {
        eprintln!("kept schema {schema}");
    } else if let Err(e) = store.drop_schema().await {
        eprintln!("could not drop schema {schema}: {e}");
    }
    outcome?;
    if args.expiry_n > 0 && args.queue == QueueKind::Rabbitmq {
        expiry::run(&args.database_url, &args.amqp_url, args.expiry_n).await?;
    }
    Ok(())
}

/// Queue, worker, the measurements, then the worker and queue are stopped
/// and the broker topology deleted.
async fn bench(
    args: &Args,
    store: Store,
    meter: &mut Meter,
    schema: &str,
    id: &str,
    started: Instant,
) -> anyhow::Result<()> {
    let hub = Arc::new(Hub::default());
    let receiver = match args.notify {
        true => Some(webhook::Receiver::start().await?),
        false => None,
    };
    let mut registry = hub::registry(hub.clone())?;
    if let Some(receiver) = &receiver {
        use agentenkit_runtime::notify::{Notifications, Target, TargetSecret};
        let target = Target::new("bench", &receiver.url)?.secret(TargetSecret::Key(
            b"bench-secret-of-at-least-32-bytes".to_vec(),
        ));
        registry = registry.with_notifications(Notifications::default().with_target(target));
    }
    let registry = Arc::new(registry);
    let topology = Topology {
        prefix: format!("bench.{id}"),
        // A safety net only (see bench/broker.rs): deleted at the end.
        queue_expires: Some(Duration::from_secs(1800)),
        // As the worker binary declares them: a lane per configured TTL.
        delay_lanes: registry.delay_lanes(),
        ..Topology::default()
    };
    let (inner, queue_label): (Arc<dyn QueueAdapter>, String) = match args.queue {
        QueueKind::Memory => (Arc::new(MemoryQueue::new()), "memory (in-process)".into()),
        QueueKind::Rabbitmq => {
            let queue = RabbitQueue::connect(&args.amqp_url, topology.clone())
                .await
                .with_context(|| format!("connecting to RabbitMQ at {}", redact(&args.amqp_url)))?;
            (
                Arc::new(queue),
                "RabbitMQ (lapin adapter, classic durable queue, publisher confirms)".into(),
            )
        }
    };
    let hooked = Arc::new(HookedQueue::new(inner, hub.clone()));
    let queue: Arc<dyn QueueAdapter> = hooked.clone();
    let max_c = args.concurrency.iter().copied().max().unwrap_or(1);
    let prefetch = u16::try_from((max_c * 2).max(16)).unwrap_or(u16::MAX);
    // Its answers write INPUT_RESOLVED, for the targets if any, and send it
    // as an API process does.
    let clients = Deployment::assemble(
        store.clone(),
        Relay::new(queue.clone()),
        registry.clone(),
        agentenkit_runtime::notify::DEFAULT_CONCURRENCY,
    );
    let ctx = Arc::new(Ctx {
        hooked,
        replies: clients.replies(),
        store: clients.store().clone(),
        deployment: clients,
        hub,
        owner: Owner("bench".into()),
        content: hub::body_text(),
    });
    let worker = start_worker(&ctx, registry.clone(), prefetch);
    let measured = run(args, &ctx, meter, schema, queue_label, prefetch).await;
    worker.stop().await;
    if let Some(receiver) = &receiver {
        eprintln!(
            "notifications received by the bench's webhook: {}",
            receiver.received()
        );
    }
    let outcome = match measured {
        Ok(measured) => {
            let mut passes = Passes::default();
            if args.round_trip_n > 0 {
                passes.round_trips = round_trip_pass(args, &ctx, registry, schema)
                    .await
                    .map_err(|e| eprintln!("round-trip pass failed: {e:#}"))
                    .ok();
            }
            if args.queue == QueueKind::Rabbitmq
                && (args.scale_n > 0 || args.park_many > 0 || args.shares_n > 0)
            {
                fleet_passes(args, &ctx, schema, id, max_c, &mut passes).await;
            }
            measured.report(args, &passes, started)
        }
        Err(e) => Err(e),
    };
    queue.close().await;
    if args.queue == QueueKind::Rabbitmq {
        match agentenkit::broker::delete_topology(&args.amqp_url, &topology).await {
            Ok(0) => {}
            Ok(failed) => {
                eprintln!("{failed} queue/exchange deletions failed (they expire within 30 min)")
            }
            Err(e) => eprintln!("could not delete the bench topology: {e:#}"),
        }
    }
    outcome
}

async fn run(
    args: &Args,
    ctx: &Arc<Ctx>,
    meter: &mut Meter,
    schema: &str,
    queue: String,
    prefetch: u16,
) -> anyhow::Result<Measured> {
    let postgres = format!(
        "{} (synchronous_commit {}, shared_buffers {}, wal_sync_method {})",
        meter.show("server_version").await?,
        meter.show("synchronous_commit").await?,
        meter.show("shared_buffers").await?,
        meter.show("wal_sync_method").await?,
    );
    eprintln!("agentenkit-bench: schema {schema}, PostgreSQL {postgres}; queue {queue}");

    // The physical baseline, outside every measured interval.
    let probe = format!("{schema}.pg_insert_probe");
    let admin = meter::connect(meter.target()).await?;
    admin.batch_execute(&format!(
        "CREATE TABLE {probe} (id bigserial PRIMARY KEY, payload text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
    )).await?;
    let mut baselines = Vec::new();
    for &c in &args.concurrency {
        admin.batch_execute(&format!("TRUNCATE {probe}")).await?;
        let b = meter::insert_baseline(meter.target(), &probe, c, args.baseline_secs).await?;
        eprintln!("baseline INSERT c={c}: {:.1} commits/s", b.commits_per_s);
        baselines.push(b);
    }
    admin.batch_execute(&format!("DROP TABLE {probe}")).await?;
    drop(admin);

    let mut results = Vec::new();
    for &c in &args.concurrency {
        results.push(run_config(args, ctx, meter, c).await?);
    }

    let params = Params {
        n: args.n,
        warmup: args.warmup,
        analyzed: args.analyze_after_warmup,
        queue,
        postgres,
        pool_size: args.pool_size,
        prefetch,
        baseline_secs: args.baseline_secs,
        stats_flush_secs: args.stats_flush_secs,
        notifications: args.notify.then(|| {
            "INPUT_REQUIRED, INPUT_RESOLVED and RUN_COMPLETED of each cycle, signed, to a webhook receiver in the bench process".to_owned()
        }),
    };
    Ok(Measured {
        params,
        results,
        baselines,
    })
}

/// The measured configurations, printed once the round-trip pass is done.
struct Measured {
    params: Params,
    results: Vec<ConfigResult>,
    baselines: Vec<meter::Baseline>,
}

impl Measured {
    fn report(&self, args: &Args, passes: &Passes, started: Instant) -> anyhow::Result<()> {
        let peers = peers::find(&args.peers_dir).and_then(|p| peers::load(&p));
        report::print_markdown(
            &self.params,
            &self.results,
            &self.baselines,
            passes,
            started.elapsed(),
        );
        against_peers::print(&self.results, &self.baselines, peers.as_ref());
        if let Some(path) = &args.json {
            let value = report::to_json(
                &self.params,
                &self.results,
                &self.baselines,
                peers.as_ref(),
                passes,
            );
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(path, serde_json::to_vec_pretty(&value)?)
                .with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        Ok(())
    }
}

/// The passes with worker processes; a failure is reported and skipped.
async fn fleet_passes(
    args: &Args,
    ctx: &Ctx,
    schema: &str,
    id: &str,
    c: usize,
    passes: &mut Passes,
) {
    let config = FleetConfig {
        database_url: args.database_url.clone(),
        amqp_url: args.amqp_url.clone(),
        schema: schema.to_owned(),
        prefix: format!("bench.{id}.fleet"),
        prefetch: u16::try_from((c * 2).max(16)).unwrap_or(u16::MAX),
    };
    let fleet = match Fleet::start(config, ctx.store.clone()).await {
        Ok(fleet) => fleet,
        Err(e) => {
            eprintln!("worker-process passes skipped: {e:#}");
            return;
        }
    };
    if args.scale_n > 0 {
        passes.scaling = fleet::scaling(&fleet, args.scale_n, c, &[1, 2])
            .await
            .map_err(|e| eprintln!("scaling pass failed: {e:#}"))
            .ok();
    }
    if args.park_many > 0 {
        passes.park_many = fleet::park_many(&fleet, args.park_many, c)
            .await
            .map_err(|e| eprintln!("park-many pass failed: {e:#}"))
            .ok();
    }
    if args.shares_n > 0 {
        passes.fair_shares = shares::fair_shares(&fleet, args.shares_n, args.shares_late)
            .await
            .map_err(|e| eprintln!("fair-shares pass failed: {e:#}"))
            .ok();
    }
    fleet.close().await;
}

/// The same cycle at c=1 with the clients' and the worker's store behind a
/// counting proxy: SQL round trips and bytes on the wire per park and per
/// resume. Warm-up cycles first, so statements are prepared.
async fn round_trip_pass(
    args: &Args,
    main: &Ctx,
    registry: Arc<agentenkit_runtime::Registry>,
    schema: &str,
) -> anyhow::Result<RoundTrips> {
    let proxy = Proxy::start(wire::upstream(&args.database_url)?).await?;
    let mut config = StoreConfig::new(proxy.database_url(&args.database_url)?);
    config.schema = Some(schema.to_owned());
    config.max_connections = 4;
    let clients = Deployment::assemble(
        Store::connect(&config)?,
        Relay::new(main.hooked.clone()),
        registry.clone(),
        agentenkit_runtime::notify::DEFAULT_CONCURRENCY,
    );
    let ctx = Arc::new(Ctx {
        hooked: main.hooked.clone(),
        replies: clients.replies(),
        store: clients.store().clone(),
        deployment: clients,
        hub: main.hub.clone(),
        owner: main.owner.clone(),
        content: main.content.clone(),
    });
    let worker = start_worker(&ctx, registry, 16);
    let outcome = async {
        let n = args.round_trip_n;
        eprintln!("round-trip pass: {n} cycles at c=1 through a counting proxy");
        let (warm, _, _) = park_phase(&ctx, 20, 1).await?;
        resume_phase(&ctx, &warm, 1).await?;
        let s0 = proxy.sample();
        let (parked, _, _) = park_phase(&ctx, n, 1).await?;
        let s1 = proxy.sample();
        resume_phase(&ctx, &parked, 1).await?;
        let s2 = proxy.sample();
        anyhow::Ok(RoundTrips {
            n,
            park: s0.per(&s1, n),
            resume: s1.per(&s2, n),
        })
    }
    .await;
    worker.stop().await;
    outcome
}

/// One configuration: fresh tables, warm-up, then phase A (park N) and
/// phase B (approve N), with a snapshot before, between and after.
async fn run_config(
    args: &Args,
    ctx: &Arc<Ctx>,
    meter: &mut Meter,
    c: usize,
) -> anyhow::Result<ConfigResult> {
    let n = args.n;
    let flush = Duration::from_secs_f64(args.stats_flush_secs);
    meter.truncate_all().await?;
    if args.warmup > 0 {
        let (warm, _, _) = park_phase(ctx, args.warmup, c).await?;
        resume_phase(ctx, &warm, c).await?;
    }
    if args.analyze_after_warmup {
        meter.analyze_all().await?;
    }
    let nacks0 = ctx.hub.nacks();
    tokio::time::sleep(flush).await;
    let a0 = meter.snapshot().await?;
    let s0 = statements::read(meter.admin(), meter.dbname()).await?;
    let q0 = ctx.hooked.publishes();
    eprintln!("c={c}: phase A (park {n})");
    let p0 = ProcSample::now();
    let cpu0 = CpuSample::now();
    let (parked, park, wall_park) = park_phase(ctx, n, c).await?;
    let p1 = ProcSample::now();
    let cpu1 = CpuSample::now();
    tokio::time::sleep(flush).await;
    let a1 = meter.snapshot().await?;
    if a1.runs("waiting") != n as i64 {
        bail!(
            "c={c}: after phase A {n} runs should wait, found {:?}",
            a1.runs_by_status
        );
    }
    eprintln!("c={c}: phase B (approve {n})");
    let p2 = ProcSample::now();
    let cpu2 = CpuSample::now();
    let (resume, wall_resume) = resume_phase(ctx, &parked, c).await?;
    let p3 = ProcSample::now();
    let cpu3 = CpuSample::now();
    let mut cpu_by_group = cpu0.ms_by_group(&cpu1);
    for (group, ms) in cpu2.ms_by_group(&cpu3) {
        *cpu_by_group.entry(group).or_default() += ms;
    }
    tokio::time::sleep(flush).await;
    let b1 = meter.snapshot().await?;
    let s1 = statements::read(meter.admin(), meter.dbname()).await?;
    let q1 = ctx.hooked.publishes();
    let done = (n + args.warmup) as i64;
    if b1.runs("completed") != done || b1.runs_by_status.len() != 1 {
        bail!(
            "c={c}: after phase B {done} runs should be completed, found {:?}",
            b1.runs_by_status
        );
    }
    let (cpu_a, busy_a) = p0.usage(&p1);
    let (cpu_b, busy_b) = p2.usage(&p3);
    let growth = |a: &std::collections::BTreeMap<String, i64>,
                  b: &std::collections::BTreeMap<String, i64>| {
        b.iter()
            .map(|(name, after)| {
                let before = a.get(name).copied().unwrap_or(0);
                (name.clone(), (after - before) as f64 / n as f64)
            })
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let bytes_per_table_parked = growth(&a0.bytes_per_table, &a1.bytes_per_table);
    let bytes_per_relation_parked = growth(&a0.bytes_per_relation, &a1.bytes_per_relation);
    Ok(ConfigResult {
        concurrency: c,
        n,
        wall_park,
        wall_resume,
        park,
        resume,
        cpu_ms: cpu_a + cpu_b,
        busy_pct: (busy_a + busy_b) / 2.0,
        cpu_by_group,
        park_delta: meter::delta(&a0, &a1, n),
        resume_delta: meter::delta(&a1, &b1, n),
        cycle_delta: meter::delta(&a0, &b1, n),
        rss_per_parked: (p1.rss - p0.rss) as f64 / n as f64,
        statement_costs: statements::per_cycle(&s0, &s1, n),
        bytes_per_table_parked,
        bytes_per_relation_parked,
        nacks: ctx.hub.nacks() - nacks0,
        publishes: Publishes {
            publishes: q1.publishes - q0.publishes,
            delayed: q1.delayed - q0.delayed,
            delay_hops: q1.delay_hops - q0.delay_hops,
        },
    })
}
