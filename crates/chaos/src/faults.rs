//! The faults: a worker SIGKILLed every 0.5–2 s (and restarted), and in
//! turn the API killed and restarted, RabbitMQ's app stopped and started,
//! Postgres restarted. Around each it measures what a user would wait:
//! how long the killed worker's runs took to move again, how long the
//! messages that fell due during a broker outage took to be handled.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_postgres::NoTls;
use tokio_util::sync::CancellationToken;

use super::client::Rng;
use super::fleet::Supervised;

/// The longest a measurement waits before it reports "never".
const MEASURE_LIMIT: Duration = Duration::from_secs(120);
const MEASURE_POLL: Duration = Duration::from_millis(50);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    WorkerKill,
    ApiRestart,
    BrokerRestart,
    PostgresRestart,
}

impl FaultKind {
    pub fn label(self) -> &'static str {
        match self {
            FaultKind::WorkerKill => "worker SIGKILL",
            FaultKind::ApiRestart => "API SIGKILL + restart",
            FaultKind::BrokerRestart => "RabbitMQ stop_app/start_app",
            FaultKind::PostgresRestart => "Postgres restart",
        }
    }

    /// The faults other than worker kills, in the order they take turns.
    pub const OUTAGES: [FaultKind; 3] = [
        FaultKind::ApiRestart,
        FaultKind::BrokerRestart,
        FaultKind::PostgresRestart,
    ];
}

/// What the faults did and what they cost.
#[derive(Debug, Default)]
pub struct FaultLog {
    pub counts: BTreeMap<FaultKind, u64>,
    /// Per worker kill that caught runs `running`: how long until every
    /// one of them had moved on (`None`: not within the limit), and whether
    /// no outage overlapped the measurement.
    pub takeovers: Vec<(Option<Duration>, bool)>,
    /// Runs caught `running` by a kill, over all kills.
    pub runs_caught: usize,
    /// Per broker restart: how many outbox messages fell due while it was
    /// stopped, and from its return until every one was handled.
    pub broker_returns: Vec<(usize, Option<Duration>)>,
    /// How long each outage lasted, by kind.
    pub outages: Vec<(FaultKind, Duration)>,
    /// Outage windows (start, end) for the overlap test.
    windows: Vec<(Instant, Option<Instant>)>,
}

impl FaultLog {
    fn overlaps(&self, start: Instant, end: Instant) -> bool {
        self.windows
            .iter()
            .any(|&(s, e)| s <= end && e.is_none_or(|e| e >= start))
    }
}

/// SQL reads of the run's schema, reconnecting after a Postgres restart.
pub struct Probe {
    url: String,
    schema: String,
    client: tokio::sync::Mutex<Option<tokio_postgres::Client>>,
}

impl Probe {
    pub fn new(url: &str, schema: &str) -> Probe {
        Probe {
            url: url.to_owned(),
            schema: schema.to_owned(),
            client: tokio::sync::Mutex::new(None),
        }
    }

    pub async fn query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> anyhow::Result<Vec<tokio_postgres::Row>> {
        let mut guard = self.client.lock().await;
        if guard.as_ref().is_none_or(|c| c.is_closed()) {
            let (client, connection) = tokio_postgres::connect(&self.url, NoTls)
                .await
                .context("probe: connecting to Postgres")?;
            tokio::spawn(connection);
            client
                .batch_execute(&format!("SET search_path TO \"{}\"", self.schema))
                .await?;
            *guard = Some(client);
        }
        let client = guard.as_ref().expect("just connected");
        match client.query(sql, params).await {
            Ok(rows) => Ok(rows),
            Err(e) => {
                *guard = None;
                Err(e.into())
            }
        }
    }
}

/// How the faults are run.
pub struct FaultPlan {
    pub seed: u64,
    pub kill_workers: bool,
    /// Outage kinds to take turns (empty: none).
    pub outages: Vec<FaultKind>,
    /// Pause between outages.
    pub outage_every: Duration,
    /// How long the broker stays stopped.
    pub broker_down: Duration,
    /// The shell command that restarts Postgres.
    pub postgres_restart: Option<String>,
}

pub struct Faults {
    pub plan: FaultPlan,
    pub workers: Vec<Arc<Supervised>>,
    pub api: Arc<Supervised>,
    pub api_url: String,
    pub probe: Arc<Probe>,
    pub log: Arc<Mutex<FaultLog>>,
    /// Measurements still running after their fault ended.
    pub measuring: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Faults {
    /// Kills a random worker every 0.5–2 s until `stop`.
    pub async fn kill_workers(self: Arc<Self>, stop: CancellationToken) {
        if !self.plan.kill_workers || self.workers.is_empty() {
            return;
        }
        let mut rng = Rng::new(self.plan.seed ^ 0x6B11);
        let mut measures = tokio::task::JoinSet::new();
        loop {
            let pause = rng.between(Duration::from_millis(500), Duration::from_secs(2));
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.cancelled() => break,
            }
            let worker = &self.workers[rng.below(self.workers.len() as u64) as usize];
            let running = self.running_runs().await.ok();
            if worker.kill().await {
                self.count(FaultKind::WorkerKill);
                if let Some(running) = running.filter(|r| !r.is_empty()) {
                    measures.spawn(self.clone().measure_takeover(running));
                }
            }
        }
        while measures.join_next().await.is_some() {}
    }

    /// Runs the outages in turn until `stop`; then any kind that has not
    /// happened yet, once, so a short run still sees every kind.
    pub async fn outages(
        self: Arc<Self>,
        load_started: CancellationToken,
        stop: CancellationToken,
    ) {
        let kinds = self.plan.outages.clone();
        if kinds.is_empty() {
            return;
        }
        let mut turn = 0;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.plan.outage_every) => {}
                _ = load_started.cancelled() => break,
                _ = stop.cancelled() => return,
            }
            let kind = kinds[turn % kinds.len()];
            turn += 1;
            self.outage(kind).await;
        }
        for kind in kinds {
            if stop.is_cancelled() {
                return;
            }
            let happened = self
                .log
                .lock()
                .expect("not poisoned")
                .counts
                .contains_key(&kind);
            if !happened {
                self.outage(kind).await;
            }
        }
    }

    async fn outage(self: &Arc<Self>, kind: FaultKind) {
        let start = Instant::now();
        let index = {
            let mut log = self.log.lock().expect("not poisoned");
            log.windows.push((start, None));
            log.windows.len() - 1
        };
        let outcome = match kind {
            FaultKind::ApiRestart => self.restart_api().await,
            FaultKind::BrokerRestart => self.restart_broker().await,
            FaultKind::PostgresRestart => self.restart_postgres().await,
            FaultKind::WorkerKill => Ok(()),
        };
        let end = Instant::now();
        let mut log = self.log.lock().expect("not poisoned");
        log.windows[index].1 = Some(end);
        match outcome {
            Ok(()) => {
                *log.counts.entry(kind).or_default() += 1;
                log.outages.push((kind, end - start));
            }
            Err(e) => {
                tracing::error!(fault = kind.label(), error = %format!("{e:#}"), "fault failed")
            }
        }
    }

    /// Waits for the measurements still running.
    pub async fn measured(&self) {
        let measuring = std::mem::take(&mut *self.measuring.lock().expect("not poisoned"));
        for measure in measuring {
            let _ = measure.await;
        }
    }

    fn count(&self, kind: FaultKind) {
        *self
            .log
            .lock()
            .expect("not poisoned")
            .counts
            .entry(kind)
            .or_default() += 1;
    }

    async fn restart_api(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.api.kill().await, "the API was not running");
        let http = agentenkit_runtime::tls::http_client()
            .timeout(Duration::from_secs(2))
            .build()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let healthy = http
                .get(format!("{}/healthz", self.api_url))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if healthy {
                return Ok(());
            }
        }
        anyhow::bail!("the API did not come back within 60 s")
    }

    async fn restart_broker(self: &Arc<Self>) -> anyhow::Result<()> {
        let stopping = Instant::now();
        rabbitmqctl(&["stop_app"]).await?;
        tracing::info!(took = ?stopping.elapsed(), "RabbitMQ stopped");
        tokio::time::sleep(self.plan.broker_down).await;
        // What fell due while the broker was away (and so could not be
        // published or handled) must be handled soon after it returns.
        let due = self
            .probe
            .query("SELECT key FROM outbox WHERE due_at < now()", &[])
            .await
            .map(|rows| {
                rows.iter()
                    .map(|r| r.get::<_, String>(0))
                    .collect::<Vec<_>>()
            });
        let starting = Instant::now();
        rabbitmqctl(&["start_app"]).await?;
        let returned = Instant::now();
        tracing::info!(took = ?starting.elapsed(), "RabbitMQ started");
        if let Ok(keys) = due {
            let faults = self.clone();
            let measure = tokio::spawn(async move {
                let waited = faults.until_gone(&keys, returned).await;
                faults
                    .log
                    .lock()
                    .expect("not poisoned")
                    .broker_returns
                    .push((keys.len(), waited));
            });
            self.measuring.lock().expect("not poisoned").push(measure);
        }
        rabbitmqctl(&["await_startup", "--timeout", "60"]).await?;
        let alive = tokio::process::Command::new("rabbitmqctl")
            .args(["eval", "rabbit_vhost_sup_sup:is_vhost_alive(<<\"/\">>)."])
            .output()
            .await?;
        anyhow::ensure!(
            String::from_utf8_lossy(&alive.stdout).trim() == "true",
            "RabbitMQ restarted but could not recover vhost '/' (rabbitmq-server#9770, fixed in \
             3.12); repair it with `rabbitmqctl stop_app && rabbitmqctl reset && rabbitmqctl start_app`"
        );
        Ok(())
    }

    async fn restart_postgres(&self) -> anyhow::Result<()> {
        let command = self
            .plan
            .postgres_restart
            .as_deref()
            .context("no command to restart Postgres (--postgres-restart)")?;
        let status = tokio::process::Command::new("sh")
            .args(["-c", command])
            .status()
            .await
            .with_context(|| format!("running `{command}`"))?;
        anyhow::ensure!(status.success(), "`{command}` failed: {status}");
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.probe.query("SELECT 1", &[]).await.is_err() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "Postgres did not come back within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// The runs being advanced right now, with their fencing tokens.
    async fn running_runs(&self) -> anyhow::Result<Vec<(uuid::Uuid, i64)>> {
        let rows = self
            .probe
            .query(
                "SELECT id, lease_token FROM runs WHERE status = 'running'",
                &[],
            )
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Waits until every run of `running` has a new lease or a new status.
    async fn measure_takeover(self: Arc<Self>, running: Vec<(uuid::Uuid, i64)>) {
        let start = Instant::now();
        let caught = running.len();
        let mut left: BTreeMap<uuid::Uuid, i64> = running.into_iter().collect();
        let mut waited = None;
        while start.elapsed() < MEASURE_LIMIT {
            if left.is_empty() {
                waited = Some(start.elapsed());
                break;
            }
            let ids: Vec<uuid::Uuid> = left.keys().copied().collect();
            if let Ok(rows) = self
                .probe
                .query(
                    "SELECT id, lease_token, status FROM runs WHERE id = ANY($1)",
                    &[&ids],
                )
                .await
            {
                for row in rows {
                    let (id, token, status): (uuid::Uuid, i64, String) =
                        (row.get(0), row.get(1), row.get(2));
                    if status != "running" || left.get(&id) != Some(&token) {
                        left.remove(&id);
                    }
                }
            }
            tokio::time::sleep(MEASURE_POLL).await;
        }
        let end = Instant::now();
        let mut log = self.log.lock().expect("not poisoned");
        let clean = !log.overlaps(start, end);
        log.takeovers.push((waited, clean));
        log.runs_caught += caught;
    }

    /// Waits until no outbox row of `keys` is left, from `since`; logs when
    /// each went (a slow one names what waited).
    async fn until_gone(&self, keys: &[String], since: Instant) -> Option<Duration> {
        let mut left = keys.to_vec();
        while since.elapsed() < MEASURE_LIMIT {
            if let Ok(rows) = self
                .probe
                .query("SELECT key FROM outbox WHERE key = ANY($1)", &[&left])
                .await
            {
                let still: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
                for gone in left.iter().filter(|k| !still.contains(k)) {
                    tracing::info!(key = %gone, after = ?since.elapsed(), "handled after the broker returned");
                }
                left = still;
                if left.is_empty() {
                    return Some(since.elapsed());
                }
            }
            tokio::time::sleep(MEASURE_POLL).await;
        }
        tracing::warn!(
            ?left,
            "not handled within the limit after the broker returned"
        );
        None
    }
}

async fn rabbitmqctl(args: &[&str]) -> anyhow::Result<()> {
    let output = tokio::process::Command::new("rabbitmqctl")
        .args(args)
        .output()
        .await
        .with_context(|| format!("running rabbitmqctl {args:?} (is it on PATH?)"))?;
    anyhow::ensure!(
        output.status.success(),
        "rabbitmqctl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(())
}

/// The command that restarts the local Postgres, when this machine has a
/// single Debian cluster (`pg_lsclusters`); otherwise `None`.
pub fn local_postgres_restart() -> Option<String> {
    let output = std::process::Command::new("pg_lsclusters")
        .arg("--no-header")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let clusters: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() >= 2)
        .collect();
    match clusters.as_slice() {
        [only] => Some(format!("pg_ctlcluster {} {} restart", only[0], only[1])),
        _ => None,
    }
}
