//! `agentenkit-chaos`: faults on purpose. The API, the workers and the
//! reaper run as separate processes on a fresh schema and queue prefix;
//! clients drive a mix of runs through the HTTP API while workers are
//! SIGKILLed and the API, RabbitMQ and Postgres are restarted; then a
//! checker reads every thread from the outside and says whether anything
//! was lost, doubled, early or stuck.

pub mod check;
pub mod client;
pub mod faults;
pub mod fleet;
pub mod load;
pub mod report;
pub mod tools;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentenkit_queue::{QueueType, Topology};
use agentenkit_store::{Store, StoreConfig};
use anyhow::Context;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use check::ThreadEvents;
use client::Api;
use faults::{FaultKind, FaultLog, FaultPlan, Faults, Probe};
use fleet::Launch;
use report::{Report, Sampled};
use tools::{Endpoint, ToolLog};

/// How a chaos run is set up.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    pub database_url: String,
    pub amqp_url: String,
    pub runs: usize,
    /// Runs in flight at once.
    pub concurrency: usize,
    pub workers: usize,
    pub seed: u64,
    pub queue_type: QueueType,
    pub kill_workers: bool,
    pub outages: Vec<FaultKind>,
    pub outage_every: Duration,
    pub broker_down: Duration,
    pub postgres_restart: Option<String>,
    /// How long the approved action takes.
    pub tool_latency: Duration,
    /// The TTL of the requests nobody answers.
    pub expiry_ttl: Duration,
    /// How long one run may take before it counts as stuck.
    pub run_timeout: Duration,
    /// Where the processes' logs go (a directory per run, removed when the
    /// run passes unless `keep`).
    pub log_dir: PathBuf,
    /// Keep the schema, the queues and the logs even when the run passes.
    pub keep: bool,
}

/// Runs the chaos test and checks it; the report says whether it passed.
pub async fn run(config: &ChaosConfig) -> anyhow::Result<Report> {
    anyhow::ensure!(
        config.runs > 0 && config.concurrency > 0 && config.workers > 0,
        "--runs, --concurrency and --workers must be at least 1"
    );
    let id = uuid::Uuid::now_v7().simple().to_string();
    let schema = format!("chaos_{id}");
    let prefix = format!("chaos.{id}");
    let dir = config.log_dir.join(&id);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut store_config = StoreConfig::new(&config.database_url);
    store_config.schema = Some(schema.clone());
    let store = Store::connect(&store_config)?;
    store
        .migrate()
        .await
        .context("migrating the chaos schema")?;

    let tool_log = Arc::new(ToolLog::default());
    let tool_base = tools::serve(tool_log.clone(), config.tool_latency).await?;
    let agents = dir.join("agents.toml");
    std::fs::write(&agents, load::agent_file(&tool_base, config.expiry_ttl))?;
    let registry = agentenkit_runtime::Registry::from_file(&agents)?;
    let key = uuid::Uuid::new_v4().simple().to_string();
    let listen = free_port()?;
    let api_url = format!("http://{listen}");
    let launch = Launch {
        bin_dir: fleet::bin_dir()?,
        log_dir: dir.clone(),
        env: vec![
            ("DATABASE_URL".into(), config.database_url.clone()),
            ("AGENTENKIT_SCHEMA".into(), schema.clone()),
            ("AMQP_URL".into(), config.amqp_url.clone()),
            ("AGENTENKIT_QUEUE_PREFIX".into(), prefix.clone()),
            (
                "AGENTENKIT_QUEUE_TYPE".into(),
                config.queue_type.to_string(),
            ),
            ("AGENTENKIT_CONFIG".into(), agents.display().to_string()),
            ("AGENTENKIT_API_KEYS".into(), format!("chaos:{key}")),
            ("AGENTENKIT_LISTEN".into(), listen.to_string()),
            ("RUST_LOG".into(), "info,lapin=warn".into()),
        ],
    };
    let processes = CancellationToken::new();
    let api = launch.supervise("api", "agentenkit-api", &[], processes.child_token())?;
    let workers = (0..config.workers)
        .map(|i| {
            launch.supervise(
                &format!("worker-{i}"),
                "agentenkit-worker",
                &[],
                processes.child_token(),
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let reaper = launch.supervise(
        "reaper",
        "agentenkit-reaper",
        &["--every", "2s"],
        processes.child_token(),
    )?;
    let outcome = exercise(
        config,
        &api_url,
        key,
        &workers,
        api.clone(),
        &schema,
        tool_log,
    )
    .await;
    processes.cancel();
    // Let the supervisors kill their children before the topology goes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut report = outcome?;
    report.seed = config.seed;
    report.own_exits = workers
        .iter()
        .chain([&api, &reaper])
        .map(|p| {
            (
                p.name.clone(),
                p.own_exits.load(std::sync::atomic::Ordering::Relaxed),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    let topology = Topology {
        prefix,
        delay_lanes: registry.delay_lanes(),
        queue_type: config.queue_type,
        ..Topology::default()
    };
    report.dead_letters = dead_letters(&config.amqp_url, &topology).await.ok();
    if report.passed() && !config.keep {
        if let Err(e) = store.drop_schema().await {
            eprintln!("could not drop schema {schema}: {e}");
        }
        if let Err(e) = agentenkit::broker::delete_topology(&config.amqp_url, &topology).await {
            eprintln!("could not delete the chaos topology: {e:#}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        report.kept = Some(format!(
            "schema {schema}, queues {}.*, logs in {}",
            topology.prefix,
            dir.display()
        ));
    }
    Ok(report)
}

/// The load and the faults, then the check.
async fn exercise(
    config: &ChaosConfig,
    api_url: &str,
    key: String,
    workers: &[Arc<fleet::Supervised>],
    api_process: Arc<fleet::Supervised>,
    schema: &str,
    tool_log: Arc<ToolLog>,
) -> anyhow::Result<Report> {
    let api = Arc::new(Api::new(api_url.to_owned(), key, Duration::from_secs(120))?);
    wait_ready(api_url).await?;
    let probe = Arc::new(Probe::new(&config.database_url, schema));
    let faults = Arc::new(Faults {
        plan: FaultPlan {
            seed: config.seed,
            kill_workers: config.kill_workers,
            outages: config.outages.clone(),
            outage_every: config.outage_every,
            broker_down: config.broker_down,
            postgres_restart: config.postgres_restart.clone(),
        },
        workers: workers.to_vec(),
        api: api_process,
        api_url: api_url.to_owned(),
        probe: probe.clone(),
        log: Arc::new(Mutex::new(FaultLog::default())),
        measuring: Mutex::default(),
    });
    let all_started = CancellationToken::new();
    let load_done = CancellationToken::new();
    let killer = tokio::spawn(faults.clone().kill_workers(load_done.clone()));
    let outages = tokio::spawn(
        faults
            .clone()
            .outages(all_started.clone(), load_done.clone()),
    );
    let sampler = tokio::spawn(sample(probe.clone(), load_done.clone()));

    let started = Instant::now();
    let slots = Arc::new(Semaphore::new(config.concurrency));
    let mut drivers = JoinSet::new();
    for index in 0..config.runs {
        let permit = slots.clone().acquire_owned().await?;
        let api = api.clone();
        let deadline = Instant::now() + config.run_timeout;
        let seed = config.seed;
        drivers.spawn(async move {
            let record = load::drive(api, index, seed, deadline).await;
            drop(permit);
            record
        });
    }
    all_started.cancel();
    let mut records = Vec::with_capacity(config.runs);
    while let Some(record) = drivers.join_next().await {
        records.push(record?);
    }
    // The outages owed to a short run fire while the last runs settle; the
    // kills stop with them.
    let _ = outages.await;
    load_done.cancel();
    let _ = killer.await;
    faults.measured().await;
    let sampled = sampler.await.unwrap_or_default();
    let load_time = started.elapsed();
    records.sort_by_key(|r| r.index);

    let mut events = BTreeMap::new();
    for thread in records.iter().filter_map(|r| r.thread_id.clone()) {
        events.insert(thread.clone(), thread_events(&api, &thread).await?);
    }
    let effects: BTreeMap<Endpoint, _> = [Endpoint::Send, Endpoint::Job]
        .into_iter()
        .map(|e| (e, tool_log.effects(e)))
        .collect();
    let findings = check::check(&records, &events, &effects, &tool_log.unapproved());
    let left = leftovers(&probe).await?;
    let fault_log = std::mem::take(&mut *faults.log.lock().expect("not poisoned"));
    Ok(Report::new(
        config,
        findings,
        fault_log,
        &api.stats,
        sampled,
        left,
        load_time,
        tool_log.hits().len(),
    ))
}

/// Reads a thread's events, every page.
async fn thread_events(api: &Api, thread: &str) -> anyhow::Result<ThreadEvents> {
    let mut events = Vec::new();
    let mut after = 0i64;
    loop {
        let (status, page) = api
            .get(&format!("/threads/{thread}/events?after={after}"))
            .await?;
        anyhow::ensure!(status == 200, "GET events of {thread}: {status} {page}");
        let page = page.as_array().cloned().unwrap_or_default();
        let Some(last) = page.last().and_then(|e| e["id"].as_i64()) else {
            break;
        };
        after = last;
        events.extend(page);
    }
    Ok(ThreadEvents { events })
}

/// Every second until `stop`: the most requests open without a timer, and
/// the oldest open request past its `expiresAt`.
async fn sample(probe: Arc<Probe>, stop: CancellationToken) -> Sampled {
    let mut sampled = Sampled::default();
    let sql = "SELECT count(*) FILTER (WHERE expires_at IS NULL AND kind <> 'ask'),
                      coalesce(extract(epoch FROM max(now() - expires_at)), 0)::float8
               FROM tool_calls WHERE status = 'pending_approval'";
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.cancelled() => return sampled,
        }
        if let Ok(rows) = probe.query(sql, &[]).await {
            let without_timer: i64 = rows[0].get(0);
            let past_due: f64 = rows[0].get(1);
            sampled.most_without_timer = sampled.most_without_timer.max(without_timer as u64);
            sampled.oldest_past_due = sampled
                .oldest_past_due
                .max(Duration::from_secs_f64(past_due.max(0.0)));
        }
    }
}

/// What is left in the database when every client is done.
#[derive(Debug, Default, Clone)]
pub struct Leftovers {
    pub open_requests: i64,
    pub open_without_timer: i64,
    pub unfinished_runs: i64,
}

async fn leftovers(probe: &Probe) -> anyhow::Result<Leftovers> {
    let rows = probe
        .query(
            "SELECT (SELECT count(*) FROM tool_calls WHERE status = 'pending_approval'),
                    (SELECT count(*) FROM tool_calls WHERE status = 'pending_approval'
                       AND expires_at IS NULL AND kind <> 'ask'),
                    (SELECT count(*) FROM runs
                       WHERE status NOT IN ('completed', 'failed', 'cancelled'))",
            &[],
        )
        .await?;
    Ok(Leftovers {
        open_requests: rows[0].get(0),
        open_without_timer: rows[0].get(1),
        unfinished_runs: rows[0].get(2),
    })
}

/// Messages in the dead-letter queue.
async fn dead_letters(amqp_url: &str, topology: &Topology) -> anyhow::Result<u32> {
    use lapin::options::QueueDeclareOptions;
    let connection =
        lapin::Connection::connect(amqp_url, lapin::ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    let queue = channel
        .queue_declare(
            topology.dead_queue().as_str().into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            Default::default(),
        )
        .await?;
    let _ = connection.close(200, "counted".into()).await;
    Ok(queue.message_count())
}

async fn wait_ready(api_url: &str) -> anyhow::Result<()> {
    let http = agentenkit_runtime::tls::http_client()
        .timeout(Duration::from_secs(2))
        .build()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = http
            .get(format!("{api_url}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ready {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the API at {api_url} was not ready within 60 s (see its log)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn free_port() -> anyhow::Result<std::net::SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?)
}
