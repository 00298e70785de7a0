//! The integration-test harness: each test gets its own Postgres schema and
//! its own RabbitMQ names, an API on 127.0.0.1:0, workers it can start and
//! kill, and HTTP tool endpoints that count their calls.

mod answers;
mod processes;
pub mod providers;
mod registries;
mod servers;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentenkit_api::{ApiKeys, AppState};
use agentenkit_queue::rabbit::RabbitQueue;
use agentenkit_queue::{QueueAdapter, Topology};
use agentenkit_runtime::agent_loop::CrashPoint;
use agentenkit_runtime::worker::WorkerError;
use agentenkit_runtime::{Deployment, Registry, Relay, Worker, WorkerConfig};
use agentenkit_store::{Store, StoreConfig};
use axum::http::StatusCode;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use answers::*;
pub use registries::*;
pub use servers::*;

pub const ALICE: &str = "alice-key";
pub const BOB: &str = "bob-key";

pub fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/agentenkit_test".into())
}

pub fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// Worker settings for tests: short leases so a dead worker's run comes
/// back quickly, short backoff.
pub fn test_worker_config() -> WorkerConfig {
    WorkerConfig {
        lease_ttl: Duration::from_secs(2),
        max_attempts: 3,
        max_takeovers: 10,
        retry_backoff: Duration::from_millis(50),
        prefetch: 8,
        notify_prefetch: 4,
        shutdown_grace: Duration::from_secs(5),
        max_deliveries: 10,
        hand_back_delay: Duration::from_millis(50),
        unserved_timeout: Duration::from_secs(600),
        statistics_every: Some(Duration::from_secs(10)),
        settle_timeout: Duration::from_secs(10),
    }
}

pub struct TestEnv {
    pub store: Store,
    pub queue: Arc<dyn QueueAdapter>,
    pub registry: Arc<Registry>,
    pub relay: Relay,
    pub api: SocketAddr,
    pub http: reqwest::Client,
    pub worker_config: WorkerConfig,
    pub topology: Topology,
    /// The store as connected: each worker and API process of the test
    /// assembles its own deployment on it.
    connected: Store,
    shutdown: CancellationToken,
}

impl TestEnv {
    pub async fn start(registry: Registry) -> TestEnv {
        Self::start_with(registry, |_| {}, |state| state).await
    }

    /// A turn of agent `agent` for alice, started through the store as an
    /// API process would, and not published: as if that process died right
    /// after its commit, the first segment is only in the outbox.
    pub async fn start_run_unpublished(
        &self,
        agent: &str,
    ) -> (agentenkit_core::ThreadId, agentenkit_store::StartedRun) {
        let owner = agentenkit_core::Owner("alice".into());
        let thread = self
            .store
            .create_thread(&owner, agent, &serde_json::json!({}))
            .await
            .expect("create thread");
        let started = self
            .store
            .start_run(thread.id, &owner, "go", None)
            .await
            .expect("start run");
        (thread.id, started)
    }

    /// Like `start`, with the store's configuration and the API's state
    /// adjusted first (smaller pools, shorter timeouts, other limits).
    pub async fn start_with(
        registry: Registry,
        store_config: impl FnOnce(&mut StoreConfig),
        api_state: impl FnOnce(AppState) -> AppState,
    ) -> TestEnv {
        let id = uuid::Uuid::now_v7().simple().to_string();
        let mut config = StoreConfig::new(database_url());
        config.schema = Some(format!("t_{id}"));
        config.max_connections = 8;
        store_config(&mut config);
        let store = Store::connect(&config).expect("store config");
        store
            .migrate()
            .await
            .expect("migrate (is Postgres up? `make services`)");
        // The agents' TTLs get delay lanes, as the worker binary gives them.
        let topology = Topology {
            prefix: format!("test.{id}"),
            // Longer than any delay a test waits out (a provider limit's
            // minute): an idle delay queue expires with its messages.
            queue_expires: Some(Duration::from_secs(180)),
            delay_lanes: registry.delay_lanes(),
            ..Topology::default()
        };
        let queue: Arc<dyn QueueAdapter> = Arc::new(
            RabbitQueue::connect(&amqp_url(), topology.clone())
                .await
                .expect("RabbitMQ (is it up? `make services`)"),
        );
        let connected = store.clone();
        // As every process of a deployment: the events its targets want
        // are written to the outbox with them (the test's own writes are
        // published by nobody, as if their process died at once).
        let store = registry.prepare(store);
        registry
            .record_versions(&store)
            .await
            .expect("record the agent versions");
        let registry = Arc::new(registry);
        let keys = ApiKeys::parse(&format!("alice:{ALICE},bob:{BOB}")).expect("keys");
        let mut state = AppState::new(
            Deployment::assemble(
                connected.clone(),
                Relay::new(queue.clone()),
                registry.clone(),
                agentenkit_runtime::notify::DEFAULT_CONCURRENCY,
            ),
            keys,
        );
        // Streams must be woken by the event watch: the re-read safety net is
        // pushed out of any test's reach.
        state.stream_reread = Duration::from_secs(3600);
        let state = api_state(state);
        let shutdown = CancellationToken::new();
        let (api, _) = agentenkit::serve_api(
            state,
            "127.0.0.1:0".parse().expect("addr"),
            shutdown.clone(),
        )
        .await
        .expect("serve api");
        TestEnv {
            relay: Relay::new(queue.clone()),
            store,
            queue,
            registry,
            api,
            http: agentenkit_runtime::tls::http_client()
                .build()
                .expect("http client"),
            worker_config: test_worker_config(),
            topology,
            connected,
            shutdown,
        }
    }

    /// A worker process of this test's agent file.
    pub fn worker(&self) -> Worker {
        self.worker_of(self.registry.clone())
    }

    /// Starts a worker; it stops when the env finishes or its handle is
    /// stopped.
    pub fn spawn_worker(&self) -> WorkerHandle {
        self.spawn(self.worker())
    }

    /// Starts a worker that dies right after the checkpoint `name`.
    pub fn spawn_crashing_worker(&self, name: &'static str) -> WorkerHandle {
        self.spawn_crashing_worker_when(move |checkpoint| checkpoint == name)
    }

    /// Starts a worker that dies right after the first checkpoint for
    /// which `when` is true.
    pub fn spawn_crashing_worker_when(
        &self,
        when: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> WorkerHandle {
        let crash: CrashPoint = Arc::new(when);
        self.spawn(self.worker().with_crash_point(crash))
    }

    /// Starts a worker of another agent file (a new deploy's).
    pub fn spawn_worker_of(&self, registry: Arc<Registry>) -> WorkerHandle {
        self.spawn(self.worker_of(registry))
    }

    /// Another API process on this store and broker, of `registry`'s agent
    /// file (a new deploy's), keyed as this one: its address, and what
    /// stops it.
    pub async fn serve_api_of(&self, registry: Arc<Registry>) -> OtherApi {
        let keys = ApiKeys::parse(&format!("alice:{ALICE},bob:{BOB}")).expect("keys");
        let deployment =
            self.deployment_of(registry, agentenkit_runtime::notify::DEFAULT_CONCURRENCY);
        let state = AppState::new(deployment, keys);
        let shutdown = CancellationToken::new();
        let (addr, served) =
            agentenkit::serve_api(state, "127.0.0.1:0".parse().unwrap(), shutdown.clone())
                .await
                .expect("another API");
        OtherApi {
            addr,
            shutdown,
            served,
        }
    }

    /// Starts `worker` (built with another registry, say: a new deploy).
    pub fn spawn(&self, worker: Worker) -> WorkerHandle {
        let stop = self.shutdown.child_token();
        let token = stop.clone();
        let task = tokio::spawn(async move { worker.run(token).await });
        WorkerHandle { stop, task }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.api, path)
    }

    /// A request with `key` (None: no Authorization header); returns the
    /// status and the JSON body (Null when the body is not JSON).
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = self.http.request(method, self.url(path));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        self.send(request).await
    }

    pub async fn send(&self, request: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let response = request.send().await.expect("request");
        let status = StatusCode::from_u16(response.status().as_u16()).expect("status");
        let text = response.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> Value {
        let (status, body) = self.call("GET", path, Some(ALICE), None).await;
        assert!(status.is_success(), "GET {path}: {status} {body}");
        body
    }

    /// The pages of a list, from `path` on, following each page's `Link`
    /// header (`rel="next"`) as the CLI does; `path` has no query.
    pub async fn get_pages(&self, path: &str, limit: usize) -> Vec<Vec<Value>> {
        let mut pages = Vec::new();
        let mut url = format!("{path}?limit={limit}");
        loop {
            let response = self
                .http
                .get(self.url(&url))
                .bearer_auth(ALICE)
                .send()
                .await
                .expect("request");
            assert!(
                response.status().is_success(),
                "GET {url}: {}",
                response.status()
            );
            let next = response
                .headers()
                .get("link")
                .map(|link| link.to_str().expect("a Link header is text").to_owned());
            let page: Vec<Value> = response.json().await.expect("a JSON list");
            assert!(page.len() <= limit, "GET {url}: {} items", page.len());
            pages.push(page);
            match next.as_deref().and_then(agentenkit::paging::next_page) {
                Some((after, given_limit)) => {
                    assert_eq!(given_limit, Some(limit.to_string()), "{next:?}");
                    url = format!("{path}?after={after}&limit={limit}");
                }
                None => {
                    assert!(next.is_none(), "a Link without a next page: {next:?}");
                    return pages;
                }
            }
            assert!(pages.len() < 10_000, "the Links go round");
        }
    }

    pub async fn post(&self, path: &str, body: Value) -> Value {
        let (status, answer) = self.call("POST", path, Some(ALICE), Some(body)).await;
        assert!(status.is_success(), "POST {path}: {status} {answer}");
        answer
    }

    /// Creates a thread of `agent` for alice and starts a turn; returns
    /// (thread id, run id).
    pub async fn start_turn(&self, agent: &str, content: &str) -> (String, String) {
        let thread = self
            .post("/threads", serde_json::json!({ "agent": agent }))
            .await;
        let thread_id = thread["id"].as_str().expect("thread id").to_owned();
        let run = self
            .post(
                &format!("/threads/{thread_id}/messages"),
                serde_json::json!({ "content": content }),
            )
            .await;
        (thread_id, run["runId"].as_str().expect("run id").to_owned())
    }

    /// Waits until the thread has the status (bounded).
    pub async fn wait_status(&self, thread_id: &str, status: &str) -> Value {
        let path = format!("/threads/{thread_id}");
        eventually(&format!("thread {thread_id} becomes {status}"), || async {
            let thread = self.get(&path).await;
            (thread["status"] == status).then_some(thread)
        })
        .await
    }

    /// Waits until the run is in a terminal state and returns it.
    pub async fn wait_run_finished(&self, run_id: &str) -> Value {
        let path = format!("/runs/{run_id}");
        eventually(&format!("run {run_id} finishes"), || async {
            let run = self.get(&path).await;
            matches!(
                run["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            )
            .then_some(run)
        })
        .await
    }

    pub async fn journal_names(&self, run_id: &str) -> Vec<String> {
        self.get(&format!("/runs/{run_id}/journal"))
            .await
            .as_array()
            .expect("journal")
            .iter()
            .map(|e| e["name"].as_str().expect("name").to_owned())
            .collect()
    }

    /// Waits until the thread waits for exactly `count` inputs; returns them.
    pub async fn wait_pending(&self, thread_id: &str, count: usize) -> Vec<Value> {
        let path = format!("/threads/{thread_id}");
        eventually(
            &format!("thread {thread_id} waits for {count} inputs"),
            || async {
                let thread = self.get(&path).await;
                let pending = thread["pendingInputs"]
                    .as_array()
                    .expect("pendingInputs")
                    .clone();
                (thread["status"] == "WAITING_FOR_INPUT" && pending.len() == count)
                    .then_some(pending)
            },
        )
        .await
    }

    /// POSTs a reply as `key`; returns the status and body.
    pub async fn reply(&self, path: &str, key: &str, body: Value) -> (StatusCode, Value) {
        self.call("POST", path, Some(key), Some(body)).await
    }

    pub async fn event_types(&self, thread_id: &str) -> Vec<String> {
        self.get(&format!("/threads/{thread_id}/events"))
            .await
            .as_array()
            .expect("events")
            .iter()
            .map(|e| e["type"].as_str().expect("type").to_owned())
            .collect()
    }

    /// Runs SQL in the test's schema (to stage what production code would
    /// not do: rows from before a feature, clocks moved).
    pub async fn sql(&self, statements: &str) {
        self.pg_client()
            .await
            .batch_execute(statements)
            .await
            .expect("sql");
    }

    /// A connection of its own in the test's schema.
    pub async fn pg_client(&self) -> tokio_postgres::Client {
        let schema = self.store.schema().expect("test schema");
        let (client, connection) = tokio_postgres::connect(
            &format!(
                "{} options='-c search_path={schema}'",
                pg_conninfo(&database_url())
            ),
            tokio_postgres::NoTls,
        )
        .await
        .expect("connect");
        tokio::spawn(connection);
        client
    }

    /// Every row `sql` returns in the test's schema, each made into a `T`
    /// by `row` (a tuple of its columns, say).
    pub async fn rows<T>(&self, sql: &str, row: impl FnMut(&tokio_postgres::Row) -> T) -> Vec<T> {
        self.pg_client()
            .await
            .query(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .iter()
            .map(row)
            .collect()
    }

    /// Empties every delay queue (ladder levels and lanes), as if the
    /// broker lost the delayed messages.
    /// The process's `/metrics` text.
    pub async fn metrics_text(&self) -> String {
        self.http
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics text")
    }

    /// A channel on its own connection, for tests that talk to the broker
    /// directly (publish raw bytes, read the dead-letter queue).
    pub async fn amqp_channel(&self) -> (lapin::Connection, lapin::Channel) {
        let connection =
            lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
                .await
                .expect("amqp");
        let channel = connection.create_channel().await.expect("channel");
        (connection, channel)
    }

    /// The bodies in the dead-letter queue, taken off it.
    pub async fn take_dead_letters(&self) -> Vec<Vec<u8>> {
        let (_connection, channel) = self.amqp_channel().await;
        let mut bodies = Vec::new();
        while let Some(message) = channel
            .basic_get(
                self.topology.dead_queue().as_str().into(),
                lapin::options::BasicGetOptions { no_ack: true },
            )
            .await
            .expect("basic_get")
        {
            bodies.push(message.delivery.data.clone());
        }
        bodies
    }

    pub async fn purge_delayed_messages(&self) {
        let connection =
            lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
                .await
                .expect("amqp");
        let channel = connection.create_channel().await.expect("channel");
        for queue in agentenkit_queue::ladder::plan(&self.topology).delay_queues {
            let queue = queue.name;
            channel
                .queue_purge(
                    queue.as_str().into(),
                    lapin::options::QueuePurgeOptions::default(),
                )
                .await
                .expect("purge");
        }
    }

    /// Stops everything and drops the test's schema.
    pub async fn finish(self) {
        self.shutdown.cancel();
        self.queue.close().await;
        self.store.drop_schema().await.expect("drop schema");
    }
}

/// An API process beside the env's own (see [`TestEnv::serve_api_of`]).
pub struct OtherApi {
    pub addr: SocketAddr,
    shutdown: CancellationToken,
    served: tokio::task::JoinHandle<()>,
}

impl OtherApi {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        self.served.await.expect("the API stops");
    }
}

pub struct WorkerHandle {
    stop: CancellationToken,
    task: JoinHandle<Result<(), WorkerError>>,
}

impl WorkerHandle {
    pub async fn stop(self) -> Result<(), WorkerError> {
        self.stop.cancel();
        self.task.await.expect("worker task")
    }

    /// Waits for the worker to end by itself (a crash point fired).
    pub async fn died(self) -> Result<(), WorkerError> {
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("the worker should have died")
            .expect("worker task")
    }
}

/// Polls `check` every 25 ms until it returns Some, for at most 20 s.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Resident memory of this process, in bytes (Linux).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

/// A `postgres://` URL as a key=value conninfo (so options can be added).
fn pg_conninfo(url: &str) -> String {
    let rest = url
        .trim_start_matches("postgres://")
        .trim_start_matches("postgresql://");
    let (auth, hostpart) = rest.rsplit_once('@').unwrap_or(("postgres", rest));
    let (user, password) = auth.split_once(':').unwrap_or((auth, ""));
    let (hostport, db) = hostpart.split_once('/').unwrap_or((hostpart, "postgres"));
    let (host, port) = hostport.split_once(':').unwrap_or((hostport, "5432"));
    let mut info = format!("host={host} port={port} user={user} dbname={db}");
    if !password.is_empty() {
        info.push_str(&format!(" password={password}"));
    }
    info
}
