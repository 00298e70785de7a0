//! `agentenkit-bench`: N runs parked for approval, then approved, at each
//! concurrency; prints cycles/s, latencies, Postgres commits per cycle and
//! bytes per parked thread, beside a raw INSERT baseline measured in the same
//! run and the peers' figures (LangGraph, DBOS) when their results exist.
//!
//! Everything is real: Postgres (a fresh `bench_<uuid>` schema, dropped at
//! the end), RabbitMQ (a unique `bench.<uuid>` prefix, deleted at the end),
//! one in-process worker. The approved tool is an in-process function.

#[path = "../bench/mod.rs"]
mod bench;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentenkit::{redact, QueueKind, DEFAULT_AMQP_URL, DEFAULT_DATABASE_URL};
use agentenkit_core::reply::Verdict;
use agentenkit_core::{Owner, QueueMessage, RunId, ToolCallId};
use agentenkit_queue::memory::MemoryQueue;
use agentenkit_queue::rabbit::RabbitQueue;
use agentenkit_queue::{QueueAdapter, Topology};
use agentenkit_runtime::{Relay, Worker, WorkerConfig};
use agentenkit_store::{AnswerTarget, OutboxRow, Store, StoreConfig};
use anyhow::{bail, Context};
use bench::hub::{self, HookedQueue, Hub, Key, Publishes};
use bench::meter::{self, Meter, ProcSample};
use bench::report::{self, ConfigResult, Params, RoundTrips};
use bench::wire::{self, Proxy};
use clap::Parser;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// How long a client waits for a run to park, resume or complete.
const WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Parser)]
#[command(
    name = "agentenkit-bench",
    about = "Benchmark: runs parked for approval, approved, resumed, completed"
)]
struct Args {
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
    #[arg(long, env = "DATABASE_URL", default_value = DEFAULT_DATABASE_URL)]
    database_url: String,
    #[arg(long, env = "AMQP_URL", default_value = DEFAULT_AMQP_URL)]
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
    /// Keep the bench schema (for inspection) instead of dropping it.
    #[arg(long)]
    keep_schema: bool,
}

/// What the client tasks share.
struct Ctx {
    /// The queue as the worker and clients use it, counting publishes.
    hooked: Arc<HookedQueue>,
    store: Store,
    relay: Relay,
    hub: Arc<Hub>,
    owner: Owner,
    content: String,
}

#[derive(Clone, Copy)]
struct Parked {
    run: RunId,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,lapin=off"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
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
        bench::expiry::run(&args.database_url, &args.amqp_url, args.expiry_n).await?;
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
    let registry = Arc::new(hub::registry(hub.clone())?);
    let topology = Topology {
        prefix: format!("bench.{id}"),
        // A safety net only (see bench/broker.rs): deleted at the end.
        queue_expires: Some(Duration::from_secs(1800)),
        // As the worker binary declares them: a lane per configured TTL.
        delay_lanes: registry.delay_lanes(),
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
    let ctx = Arc::new(Ctx {
        hooked,
        relay: Relay::new(queue.clone()),
        store: store.clone(),
        hub,
        owner: Owner("bench".into()),
        content: hub::body_text(),
    });
    let worker = start_worker(&ctx, registry.clone(), prefetch);
    let measured = run(args, &ctx, meter, schema, queue_label, prefetch).await;
    worker.stop().await;
    let outcome = match measured {
        Ok(measured) => {
            let round_trips = if args.round_trip_n > 0 {
                round_trip_pass(args, &ctx, registry, schema)
                    .await
                    .map_err(|e| eprintln!("round-trip pass failed: {e:#}"))
                    .ok()
            } else {
                None
            };
            measured.report(args, round_trips.as_ref(), started)
        }
        Err(e) => Err(e),
    };
    queue.close().await;
    if args.queue == QueueKind::Rabbitmq {
        match bench::broker::delete_topology(&args.amqp_url, &topology).await {
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
        queue,
        postgres,
        pool_size: args.pool_size,
        prefetch,
        baseline_secs: args.baseline_secs,
        stats_flush_secs: args.stats_flush_secs,
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
    fn report(
        &self,
        args: &Args,
        round_trips: Option<&RoundTrips>,
        started: Instant,
    ) -> anyhow::Result<()> {
        let peers = bench::peers::find(&args.peers_dir).and_then(|p| bench::peers::load(&p));
        report::print_markdown(
            &self.params,
            &self.results,
            &self.baselines,
            peers.as_ref(),
            round_trips,
            started.elapsed(),
        );
        if let Some(path) = &args.json {
            let value = report::to_json(
                &self.params,
                &self.results,
                &self.baselines,
                peers.as_ref(),
                round_trips,
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

/// A worker of the bench, running until stopped.
struct RunningWorker {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), agentenkit_runtime::worker::WorkerError>>,
}

impl RunningWorker {
    async fn stop(self) {
        self.shutdown.cancel();
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("worker: {e}"),
            Err(e) => eprintln!("worker task: {e}"),
        }
    }
}

fn start_worker(
    ctx: &Ctx,
    registry: Arc<agentenkit_runtime::Registry>,
    prefetch: u16,
) -> RunningWorker {
    let queue: Arc<dyn QueueAdapter> = ctx.hooked.clone();
    let worker = Worker::new(
        ctx.store.clone(),
        queue,
        registry,
        WorkerConfig {
            prefetch,
            shutdown_grace: Duration::from_secs(5),
            ..WorkerConfig::default()
        },
    );
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    RunningWorker {
        shutdown,
        task: tokio::spawn(async move { worker.run(token).await }),
    }
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
    let ctx = Arc::new(Ctx {
        hooked: main.hooked.clone(),
        relay: Relay::new(main.hooked.clone()),
        store: Store::connect(&config)?,
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
    let nacks0 = ctx.hub.nacks();
    tokio::time::sleep(flush).await;
    let a0 = meter.snapshot().await?;
    let q0 = ctx.hooked.publishes();
    eprintln!("c={c}: phase A (park {n})");
    let p0 = ProcSample::now();
    let (parked, park, wall_park) = park_phase(ctx, n, c).await?;
    let p1 = ProcSample::now();
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
    let (resume, wall_resume) = resume_phase(ctx, &parked, c).await?;
    let p3 = ProcSample::now();
    tokio::time::sleep(flush).await;
    let b1 = meter.snapshot().await?;
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
    let mut bytes_per_table_parked = std::collections::BTreeMap::new();
    for (table, after) in &a1.bytes_per_table {
        let before = a0.bytes_per_table.get(table).copied().unwrap_or(0);
        bytes_per_table_parked.insert(table.clone(), (after - before) as f64 / n as f64);
    }
    Ok(ConfigResult {
        concurrency: c,
        n,
        wall_park,
        wall_resume,
        park,
        resume,
        cpu_ms: cpu_a + cpu_b,
        busy_pct: (busy_a + busy_b) / 2.0,
        park_delta: meter::delta(&a0, &a1, n),
        resume_delta: meter::delta(&a1, &b1, n),
        cycle_delta: meter::delta(&a0, &b1, n),
        rss_per_parked: (p1.rss - p0.rss) as f64 / n as f64,
        bytes_per_table_parked,
        nacks: ctx.hub.nacks() - nacks0,
        publishes: Publishes {
            publishes: q1.publishes - q0.publishes,
            delayed: q1.delayed - q0.delayed,
            delay_hops: q1.delay_hops - q0.delay_hops,
        },
    })
}

/// The segment a commit wrote to the outbox.
fn segment_seq(outbox: &[OutboxRow], run: RunId) -> anyhow::Result<i64> {
    outbox
        .iter()
        .find_map(|row| match row.message {
            QueueMessage::Segment { run_id, seq } if run_id == run => Some(seq),
            _ => None,
        })
        .with_context(|| format!("no segment of run {run} in the outbox"))
}

/// Runs `per_item(i)` for i in 0..n on `c` tasks (task w takes w, w+c, …);
/// returns the results in item order and the wall time.
async fn fan_out<T, F, Fut>(n: usize, c: usize, per_item: F) -> anyhow::Result<(Vec<T>, Duration)>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<T>> + Send,
{
    let per_item = Arc::new(per_item);
    let start = Instant::now();
    let tasks: Vec<_> = (0..c)
        .map(|w| {
            let per_item = per_item.clone();
            tokio::spawn(async move {
                let mut out = Vec::new();
                for i in (w..n).step_by(c) {
                    out.push((i, per_item(i).await?));
                }
                anyhow::Ok(out)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(n);
    for task in tasks {
        all.extend(task.await.context("client task")??);
    }
    let wall = start.elapsed();
    all.sort_by_key(|(i, _)| *i);
    Ok((all.into_iter().map(|(_, t)| t).collect(), wall))
}

/// Per-item durations as sorted columns (column j = item[j] of every row).
fn columns(rows: Vec<Vec<Duration>>) -> Vec<Vec<Duration>> {
    let width = rows.first().map_or(0, Vec::len);
    (0..width)
        .map(|j| {
            let mut column: Vec<Duration> = rows.iter().filter_map(|r| r.get(j).copied()).collect();
            column.sort();
            column
        })
        .collect()
}

/// Phase A: create a thread, start a turn, publish; parked when the worker
/// acks the first segment. Columns: create_thread call → that ack; store
/// calls (create_thread, start_run); publish until confirmed; publish call →
/// the worker got the segment; worker got it → acked.
async fn park_phase(
    ctx: &Arc<Ctx>,
    n: usize,
    c: usize,
) -> anyhow::Result<(Vec<Parked>, Vec<Vec<Duration>>, Duration)> {
    let ctx = ctx.clone();
    let (items, wall) = fan_out(n, c, move |_| {
        let ctx = ctx.clone();
        async move {
            let t0 = Instant::now();
            let thread = ctx
                .store
                .create_thread(&ctx.owner, "mailer", &json!({}))
                .await?;
            let started = ctx
                .store
                .start_run(thread.id, &ctx.owner, &ctx.content)
                .await?;
            let publishing = Instant::now();
            ctx.relay.publish(&started.outbox).await;
            let published = Instant::now();
            let run = started.run_id;
            let seq = segment_seq(&started.outbox, run)?;
            let parked = ctx.hub.wait(Key::Acked(run, seq), WAIT).await?;
            let delivered = ctx.hub.wait(Key::Delivered(run, seq), WAIT).await?;
            anyhow::Ok((
                Parked { run },
                vec![
                    parked.saturating_duration_since(t0),
                    publishing - t0,
                    published - publishing,
                    delivered.saturating_duration_since(publishing),
                    parked.saturating_duration_since(delivered),
                ],
            ))
        }
    })
    .await?;
    let (parked, rows): (Vec<_>, Vec<_>) = items.into_iter().unzip();
    Ok((parked, columns(rows), wall))
}

/// Phase B: approve each parked call and publish the resume segment.
/// Columns: answer call → tool ran; answer call → last segment acked;
/// the answer call; publish until confirmed; publish call → the worker got
/// the segment; worker got it → the tool ran; tool ran → acked.
async fn resume_phase(
    ctx: &Arc<Ctx>,
    parked: &[Parked],
    c: usize,
) -> anyhow::Result<(Vec<Vec<Duration>>, Duration)> {
    let ctx = ctx.clone();
    let parked: Arc<Vec<Parked>> = Arc::new(parked.to_vec());
    let (rows, wall) = fan_out(parked.len(), c, move |i| {
        let ctx = ctx.clone();
        let run = parked[i].run;
        async move {
            let t0 = Instant::now();
            let answered = ctx
                .store
                .answer(
                    &ctx.owner,
                    AnswerTarget::Run(run),
                    &ToolCallId::from("c1"),
                    &Verdict::Approve { payload: None },
                )
                .await?;
            if !answered.delivered {
                bail!("answer to run {run} refused: {:?}", answered.error);
            }
            let publishing = Instant::now();
            ctx.relay.publish(&answered.outbox).await;
            let published = Instant::now();
            let seq = segment_seq(&answered.outbox, run)?;
            let executed = ctx.hub.wait(Key::Executed(run), WAIT).await?;
            let completed = ctx.hub.wait(Key::Acked(run, seq), WAIT).await?;
            let delivered = ctx.hub.wait(Key::Delivered(run, seq), WAIT).await?;
            anyhow::Ok(vec![
                executed.saturating_duration_since(t0),
                completed.saturating_duration_since(t0),
                publishing - t0,
                published - publishing,
                delivered.saturating_duration_since(publishing),
                executed.saturating_duration_since(delivered),
                completed.saturating_duration_since(executed),
            ])
        }
    })
    .await?;
    Ok((columns(rows), wall))
}
