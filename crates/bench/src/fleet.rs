//! Worker *processes* for two passes the in-process worker cannot measure:
//! scaling (the cycle with 1, then 2 `agentenkit-worker` processes) and
//! park-many (a worker process's RSS as parked threads grow to 100,000).
//!
//! The workers are the release binary beside the bench's own, on the bench's
//! schema and their own queue prefix, with an agent file like the in-process
//! `mailer`; its tool is an HTTP endpoint served here. The bench's clients
//! drive the cycle; completion is read from the `runs` table.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentenkit_core::{Owner, RunId, RunStatus};
use agentenkit_queue::rabbit::RabbitQueue;
use agentenkit_queue::{QueueAdapter, Topology};
use agentenkit_runtime::Relay;
use agentenkit_store::Store;
use anyhow::{bail, Context};
use serde_json::json;

use super::hub::body_text;

/// The cap of the agent file's `burst` agent (`burst_fifo` has none): the
/// fair-shares pass (`shares.rs`).
pub const BURST_CAP: i64 = 4;

/// How long a pass waits for the workers to catch up before giving up.
const SETTLE: Duration = Duration::from_secs(600);

/// What a worker process needs to reach the bench's services.
pub struct FleetConfig {
    pub database_url: String,
    pub amqp_url: String,
    pub schema: String,
    /// Queue prefix of the workers (not the in-process worker's).
    pub prefix: String,
    pub prefetch: u16,
}

/// Clients, a tool endpoint and the agent file of worker processes.
pub struct Fleet {
    config: FleetConfig,
    store: Store,
    /// How the clients answer (the product's answer path).
    replies: agentenkit_runtime::replies::Replies,
    queue: Arc<dyn QueueAdapter>,
    owner: Owner,
    dir: PathBuf,
    topology: Topology,
    tool_calls: Arc<AtomicU64>,
    /// Pids of the worker processes started and not yet stopped, so that a
    /// pass whose worker died fails at once instead of waiting out `SETTLE`.
    workers: Arc<Mutex<Vec<u32>>>,
}

/// One running `agentenkit-worker`.
pub struct WorkerProcess {
    child: tokio::process::Child,
    workers: Arc<Mutex<Vec<u32>>>,
}

impl Fleet {
    pub async fn start(config: FleetConfig, store: Store) -> anyhow::Result<Fleet> {
        let tool_calls = Arc::new(AtomicU64::new(0));
        let counted = tool_calls.clone();
        let app = axum::Router::new().route(
            "/send",
            axum::routing::post(move || {
                let counted = counted.clone();
                async move {
                    counted.fetch_add(1, Ordering::Relaxed);
                    axum::Json(json!({ "sent": true }))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let tool_url = format!("http://{}/send", listener.local_addr()?);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let dir = std::env::temp_dir().join(format!("agentenkit-bench-{}", config.prefix));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("agents.toml"), agent_file(&tool_url))?;
        let registry = agentenkit_runtime::Registry::from_file(&dir.join("agents.toml"))?;
        let topology = Topology {
            prefix: config.prefix.clone(),
            // As a production worker declares it (the worker processes
            // declare it too, and RabbitMQ refuses unequal arguments);
            // `close` deletes it.
            queue_expires: None,
            delay_lanes: registry.delay_lanes(),
            ..Topology::default()
        };
        let queue: Arc<dyn QueueAdapter> = Arc::new(
            RabbitQueue::connect(&config.amqp_url, topology.clone())
                .await
                .context("connecting the fleet's clients to RabbitMQ")?,
        );
        // The clients' store publishes what they write through the fleet's
        // own connection, and pins the runs it starts to the fleet's agent
        // file (its workers' version), not to the in-process bench's.
        let clients = agentenkit_runtime::Deployment::assemble(
            store,
            Relay::new(queue.clone()),
            Arc::new(registry),
            agentenkit_runtime::notify::DEFAULT_CONCURRENCY,
        );
        Ok(Fleet {
            queue,
            replies: clients.replies(),
            store: clients.store().clone(),
            owner: Owner("bench-fleet".into()),
            dir,
            topology,
            tool_calls,
            config,
            workers: Arc::default(),
        })
    }

    /// Starts a worker process and waits until it consumes.
    pub async fn spawn_worker(&self) -> anyhow::Result<WorkerProcess> {
        let bin = worker_binary()?;
        let child = tokio::process::Command::new(&bin)
            .env("DATABASE_URL", &self.config.database_url)
            .env("AGENTENKIT_SCHEMA", &self.config.schema)
            .env("AMQP_URL", &self.config.amqp_url)
            .env("AGENTENKIT_QUEUE_PREFIX", &self.config.prefix)
            .env("AGENTENKIT_CONFIG", self.dir.join("agents.toml"))
            .env("AGENTENKIT_PREFETCH", self.config.prefetch.to_string())
            .env("RUST_LOG", "warn,lapin=off")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("the worker exited at once")?;
        self.workers.lock().expect("not poisoned").push(pid);
        Ok(WorkerProcess {
            child,
            workers: self.workers.clone(),
        })
    }

    /// Parks `n` runs with `c` clients; returns them and the time until the
    /// last one waits.
    pub async fn park(&self, n: usize, c: usize) -> anyhow::Result<(Vec<RunId>, Duration)> {
        let start = Instant::now();
        let runs = self.start_runs(&self.owner, "mailer", n, c).await?;
        self.settle(&runs, RunStatus::Waiting).await?;
        Ok((runs, start.elapsed()))
    }

    /// Approves the runs with `c` clients; returns the time until every one
    /// completed.
    pub async fn approve(&self, runs: Vec<RunId>, c: usize) -> anyhow::Result<Duration> {
        let runs = Arc::new(runs);
        let n = runs.len();
        let start = Instant::now();
        let answering = runs.clone();
        self.fan_out(n, c, move |fleet, i| {
            let run = answering[i];
            async move {
                crate::cycle::approve_c1(&fleet.replies, &fleet.owner, run).await?;
                anyhow::Ok(())
            }
        })
        .await?;
        self.settle(&runs, RunStatus::Completed).await?;
        Ok(start.elapsed())
    }

    /// Starts `n` turns of `agent` for `owner`, each on a thread of its
    /// own, with `c` clients; returns their runs.
    pub async fn start_runs(
        &self,
        owner: &Owner,
        agent: &str,
        n: usize,
        c: usize,
    ) -> anyhow::Result<Vec<RunId>> {
        let (owner, agent) = (owner.clone(), agent.to_owned());
        self.fan_out(n, c, move |fleet, _| {
            let (owner, agent) = (owner.clone(), agent.clone());
            async move {
                let thread = fleet
                    .store
                    .create_thread(&owner, &agent, &json!({}))
                    .await?;
                let started = fleet
                    .store
                    .start_run(thread.id, &owner, &body_text(), None)
                    .await?;
                anyhow::Ok(started.run_id)
            }
        })
        .await
    }

    /// The clients' store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The bench's schema.
    pub fn schema(&self) -> &str {
        &self.config.schema
    }

    /// A connection of its own to the bench's database.
    pub async fn sql_client(&self) -> anyhow::Result<tokio_postgres::Client> {
        let config: tokio_postgres::Config = self
            .config
            .database_url
            .parse()
            .context("invalid database url")?;
        crate::meter::connect(&config).await
    }

    /// Tool calls the endpoint has served.
    pub fn tool_calls(&self) -> u64 {
        self.tool_calls.load(Ordering::Relaxed)
    }

    pub async fn close(self) {
        self.queue.close().await;
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Err(e) =
            agentenkit::broker::delete_topology(&self.config.amqp_url, &self.topology).await
        {
            eprintln!("could not delete the fleet's topology: {e:#}");
        }
    }

    async fn fan_out<T, F, Fut>(&self, n: usize, c: usize, per_item: F) -> anyhow::Result<Vec<T>>
    where
        T: Send + 'static,
        F: Fn(Arc<Clients>, usize) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = anyhow::Result<T>> + Send,
    {
        let clients = Arc::new(Clients {
            store: self.store.clone(),
            replies: self.replies.clone(),
            owner: self.owner.clone(),
        });
        let per_item = Arc::new(per_item);
        let tasks: Vec<_> = (0..c)
            .map(|w| {
                let per_item = per_item.clone();
                let clients = clients.clone();
                tokio::spawn(async move {
                    let mut out = Vec::new();
                    for i in (w..n).step_by(c) {
                        out.push((i, per_item(clients.clone(), i).await?));
                    }
                    anyhow::Ok(out)
                })
            })
            .collect();
        let mut all = Vec::with_capacity(n);
        for task in tasks {
            all.extend(task.await.context("client task")??);
        }
        all.sort_by_key(|(i, _)| *i);
        Ok(all.into_iter().map(|(_, t)| t).collect())
    }

    /// Waits until every one of `runs` has the status. Only the runs not
    /// yet seen there are asked for again, so the check costs less as the
    /// batch settles (a count over every run with the status grew with the
    /// 100,000 parked by park-many).
    pub async fn settle(&self, runs: &[RunId], status: RunStatus) -> anyhow::Result<()> {
        let deadline = Instant::now() + SETTLE;
        let mut left: std::collections::HashSet<RunId> = runs.iter().copied().collect();
        loop {
            let pending: Vec<RunId> = left.iter().copied().collect();
            for chunk in pending.chunks(10_000) {
                for run in self.store.runs_with_status(chunk, status).await? {
                    left.remove(&run);
                }
            }
            if left.is_empty() {
                return Ok(());
            }
            let have = runs.len() - left.len();
            if Instant::now() > deadline {
                bail!(
                    "only {have} of {} runs became {status} within {SETTLE:?}",
                    runs.len()
                );
            }
            let workers = self.workers.lock().expect("not poisoned").clone();
            if let Some(pid) = workers.into_iter().find(|pid| !alive(*pid)) {
                bail!(
                    "worker process {pid} exited while {have} of {} runs were {status} (its stderr is above)",
                    runs.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// What a client task holds.
pub struct Clients {
    store: Store,
    replies: agentenkit_runtime::replies::Replies,
    owner: Owner,
}

impl WorkerProcess {
    /// Resident set size of the process, in bytes.
    pub fn rss(&self) -> anyhow::Result<u64> {
        let pid = self.child.id().context("the worker exited")?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .context("no VmRSS in /proc/<pid>/status")
    }

    /// SIGTERM, then waits for the graceful shutdown.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            self.workers
                .lock()
                .expect("not poisoned")
                .retain(|p| *p != pid);
            let _ = tokio::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// Whether the process runs (a zombie, exited but not yet reaped, does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("State:"))
            .is_some_and(|state| !state.trim_start().starts_with('Z'))
    })
}

/// `agentenkit-worker` beside this binary (`make bench` builds both).
fn worker_binary() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    let bin = me
        .parent()
        .map(|d| d.join("agentenkit-worker"))
        .filter(|p| p.exists())
        .with_context(|| {
            format!(
                "no agentenkit-worker beside {} (build it: cargo build --release --bin agentenkit-worker)",
                me.display()
            )
        })?;
    Ok(bin)
}

/// The in-process `mailer` as an agent file: the same script and arguments,
/// its tool an HTTP endpoint that needs confirmation.
fn agent_file(tool_url: &str) -> String {
    let body = serde_json::to_string(&body_text()).expect("a string serializes");
    format!(
        r#"[agents.mailer]
system = "You send email."
tools = ["send_email"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "send_email", arguments = {{ to = "ops@example.com", subject = "Quarterly report", body = {body} }} }} ] }},
  {{ text = "Done." }},
] }}

[tools.send_email]
type = "http"
url = "{tool_url}"
requires_confirmation = true

# The fair-shares pass: the same notice under a cap, and under none.
[agents.burst]
system = "You send notices."
tools = ["notice"]
max_concurrent_runs = {cap}
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "notice", arguments = {{ to = "ops@example.com" }} }} ] }},
  {{ text = "Done." }},
] }}

[agents.burst_fifo]
system = "You send notices."
tools = ["notice"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "notice", arguments = {{ to = "ops@example.com" }} }} ] }},
  {{ text = "Done." }},
] }}

[tools.notice]
type = "http"
url = "{tool_url}"
"#,
        cap = BURST_CAP
    )
}

/// Cycles/s with 1, then 2 worker processes, on the same clients.
pub struct Scaling {
    pub n: usize,
    pub c: usize,
    /// `(processes, full cycles/s)`.
    pub cycles_per_s: Vec<(usize, f64)>,
}

impl Scaling {
    /// Cycles/s of the largest fleet over the smallest.
    pub fn ratio(&self) -> Option<f64> {
        let first = self.cycles_per_s.first()?.1;
        let last = self.cycles_per_s.last()?.1;
        (first > 0.0).then(|| last / first)
    }
}

/// Runs the scaling pass: for each fleet size, warm-up, then N cycles.
pub async fn scaling(
    fleet: &Fleet,
    n: usize,
    c: usize,
    sizes: &[usize],
) -> anyhow::Result<Scaling> {
    let mut cycles_per_s = Vec::new();
    for &size in sizes {
        let mut workers = Vec::new();
        for _ in 0..size {
            workers.push(fleet.spawn_worker().await?);
        }
        let outcome = async {
            let (warm, _) = fleet.park(20.min(n), c).await?;
            fleet.approve(warm, c).await?;
            eprintln!("scaling: {size} worker process(es), {n} cycles at c={c}");
            let calls = fleet.tool_calls();
            let (runs, park) = fleet.park(n, c).await?;
            let approve = fleet.approve(runs, c).await?;
            let ran = fleet.tool_calls() - calls;
            if ran != n as u64 {
                bail!("{n} approved calls ran {ran} times");
            }
            anyhow::Ok(n as f64 / (park + approve).as_secs_f64())
        }
        .await;
        for worker in workers {
            worker.stop().await;
        }
        cycles_per_s.push((size, outcome?));
    }
    Ok(Scaling { n, c, cycles_per_s })
}

/// A worker process's RSS as parked threads accumulate.
pub struct ParkMany {
    pub total: usize,
    pub c: usize,
    /// `(threads parked so far, worker RSS bytes)`.
    pub samples: Vec<(usize, u64)>,
    pub wall: Duration,
}

impl ParkMany {
    /// Largest relative deviation of a later sample from the first taken
    /// with threads parked (the first, at 0, still warms up).
    pub fn drift(&self) -> Option<f64> {
        let base = self.samples.get(1)?.1 as f64;
        self.samples
            .iter()
            .skip(1)
            .map(|(_, rss)| (*rss as f64 - base).abs() / base)
            .reduce(f64::max)
    }
}

/// Parks `total` threads in quarters through one worker process, sampling
/// its RSS before and after each quarter (once every park has settled).
pub async fn park_many(fleet: &Fleet, total: usize, c: usize) -> anyhow::Result<ParkMany> {
    let worker = fleet.spawn_worker().await?;
    let outcome = async {
        // Warm up connections and prepared statements first.
        let (warm, _) = fleet.park(100.min(total), c).await?;
        fleet.approve(warm, c).await?;
        let mut samples = vec![(0, worker.rss()?)];
        let start = Instant::now();
        let quarter = total.div_ceil(4);
        let mut parked = 0;
        while parked < total {
            let step = quarter.min(total - parked);
            // The run ids are dropped at once: the bench holds nothing per thread.
            fleet.park(step, c).await?;
            parked += step;
            samples.push((parked, worker.rss()?));
            eprintln!(
                "park-many: {parked} parked, worker RSS {} bytes",
                samples.last().map_or(0, |s| s.1)
            );
        }
        anyhow::Ok(ParkMany {
            total,
            c,
            samples,
            wall: start.elapsed(),
        })
    }
    .await;
    worker.stop().await;
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleet_agent_file_is_a_valid_agent_file_whose_tool_needs_confirmation() {
        let registry =
            agentenkit_runtime::Registry::from_toml(&agent_file("http://127.0.0.1:1/send"))
                .expect("the agent file parses");
        let agent = registry.agent("mailer").expect("the mailer is defined");
        assert_eq!(agent.tools, vec!["send_email".to_string()]);
        let tool = registry.tool("send_email").expect("the tool is defined");
        assert!(tool.tool.requires_confirmation());
    }

    #[test]
    fn drift_ignores_the_warm_up_sample_and_takes_the_largest_deviation() {
        let park_many = ParkMany {
            total: 300,
            c: 1,
            samples: vec![(0, 10), (100, 100), (200, 104), (300, 97)],
            wall: Duration::ZERO,
        };
        assert_eq!(park_many.drift(), Some(0.04));
        let too_few = ParkMany {
            samples: vec![(0, 10)],
            ..park_many
        };
        assert_eq!(too_few.drift(), None);
    }

    #[test]
    fn the_scaling_ratio_is_the_largest_fleet_over_the_smallest() {
        let scaling = Scaling {
            n: 10,
            c: 1,
            cycles_per_s: vec![(1, 100.0), (2, 170.0)],
        };
        assert_eq!(scaling.ratio(), Some(1.7));
        let empty = Scaling {
            cycles_per_s: vec![],
            ..scaling
        };
        assert_eq!(empty.ratio(), None);
    }

    #[test]
    fn this_process_is_alive_and_a_pid_that_does_not_exist_is_not() {
        assert!(alive(std::process::id()));
        // Above the kernel's pid_max ceiling (2^22), so never a process.
        assert!(!alive(u32::MAX));
    }
}
