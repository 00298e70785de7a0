//! A fleet of real processes for the tests that stop or kill them: a
//! schema of its own, the broker's queues under a prefix of its own, and
//! worker processes (the `agentenkit-worker` binary) of an agent file
//! written for the test.

#![allow(dead_code)] // each test binary uses its own part

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use agentenkit_core::{Owner, RunId, RunStatus, ThreadId};
use agentenkit_queue::rabbit::RabbitQueue;
use agentenkit_queue::{QueueAdapter, Topology};
use agentenkit_runtime::Relay;
use agentenkit_store::{Store, StoreConfig};
use serde_json::json;

pub fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/agentenkit_test".into())
}

pub fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

pub struct Fleet {
    pub store: Store,
    pub queue: Arc<RabbitQueue>,
    pub relay: Relay,
    topology: Topology,
    pub schema: String,
    pub prefix: String,
    /// Where the test's files go (its agent file, logs).
    pub dir: PathBuf,
}

impl Fleet {
    /// A new schema (migrated) and queue prefix for test `name`.
    pub async fn new(name: &str) -> Fleet {
        let id = uuid::Uuid::now_v7().simple().to_string();
        let dir = std::env::temp_dir().join(format!("agentenkit-{name}-{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        let schema = format!("t_{id}");
        let prefix = format!("test.{id}");
        let mut config = StoreConfig::new(database_url());
        config.schema = Some(schema.clone());
        let store = Store::connect(&config).unwrap();
        store.migrate().await.unwrap();
        // Declared as the worker declares it (no expiry); deleted at the end.
        let topology = Topology {
            prefix: prefix.clone(),
            queue_expires: None,
            delay_lanes: vec![900_000],
            ..Topology::default()
        };
        let queue = Arc::new(
            RabbitQueue::connect(&amqp_url(), topology.clone())
                .await
                .unwrap(),
        );
        let relay = Relay::new(queue.clone() as Arc<dyn QueueAdapter>);
        Fleet {
            store,
            queue,
            relay,
            topology,
            schema,
            prefix,
            dir,
        }
    }

    /// Writes the agent file `text` in the test's directory.
    pub fn agent_file(&self, text: &str) -> PathBuf {
        let path = self.dir.join("agentenkit.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A worker process of `agent_file`, with `env` besides the fleet's
    /// own; killed if the test drops it.
    pub fn spawn_worker(&self, agent_file: &Path, env: &[(&str, String)]) -> tokio::process::Child {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentenkit-worker"));
        command
            .env("DATABASE_URL", database_url())
            .env("AGENTENKIT_SCHEMA", &self.schema)
            .env("AMQP_URL", amqp_url())
            .env("AGENTENKIT_QUEUE_PREFIX", &self.prefix)
            .env("AGENTENKIT_CONFIG", agent_file)
            .env("AGENTENKIT_METRICS_LISTEN", "127.0.0.1:0")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .kill_on_drop(true);
        for (name, value) in env {
            command.env(name, value);
        }
        command.spawn().unwrap()
    }

    /// A turn of `owner` on a new thread of `agent`, published.
    pub async fn start_turn(&self, owner: &Owner, agent: &str, content: &str) -> (ThreadId, RunId) {
        let thread = self
            .store
            .create_thread(owner, agent, &json!({}))
            .await
            .unwrap();
        let started = self
            .store
            .start_run(thread.id, owner, content, None)
            .await
            .unwrap();
        self.relay.publish(&started.outbox).await;
        (thread.id, started.run_id)
    }

    /// Waits (up to 60 s) until `run` has finished; its status.
    pub async fn finished(&self, owner: &Owner, run: RunId) -> RunStatus {
        self.until("the run finishes", || async {
            let view = self.store.get_run(run, owner).await.unwrap();
            matches!(
                view.status,
                RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
            )
            .then_some(view.status)
        })
        .await
    }

    /// Waits (up to 60 s) until `check` says something.
    pub async fn until<T, F, Fut>(&self, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(found) = check().await {
                return found;
            }
            assert!(tokio::time::Instant::now() < deadline, "{what}: timed out");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Drops the fleet's queues, exchanges, schema and files.
    pub async fn clean_up(self) {
        self.queue.close().await;
        let connection =
            lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
                .await
                .unwrap();
        let channel = connection.create_channel().await.unwrap();
        let plan = agentenkit_queue::ladder::plan(&self.topology);
        let mut queues = vec![
            self.topology.segments_queue(),
            self.topology.dead_queue(),
            self.topology.notifications_queue(),
        ];
        queues.extend(plan.delay_queues.into_iter().map(|q| q.name));
        for name in queues {
            let _ = channel
                .queue_delete(
                    name.as_str().into(),
                    lapin::options::QueueDeleteOptions::default(),
                )
                .await;
        }
        for exchange in plan.exchanges {
            let _ = channel
                .exchange_delete(
                    exchange.as_str().into(),
                    lapin::options::ExchangeDeleteOptions::default(),
                )
                .await;
        }
        drop(connection);
        self.store.drop_schema().await.unwrap();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Kills `child` with SIGKILL: no drain, no ack, no lease given back.
pub async fn sigkill(child: &mut tokio::process::Child) {
    let pid = child.id().expect("running").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let _ = child.wait().await;
}
