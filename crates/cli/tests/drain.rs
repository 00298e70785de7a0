//! A worker process told to stop (SIGTERM) mid-segment finishes what it
//! holds within its grace period and exits 0: nothing lost, nothing run
//! twice.

use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentenkit_core::{Owner, RunId, RunStatus};
use agentenkit_queue::rabbit::RabbitQueue;
use agentenkit_queue::{QueueAdapter, Topology};
use agentenkit_runtime::Relay;
use agentenkit_store::{Store, StoreConfig};
use serde_json::json;

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/agentenkit_test".into())
}

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

#[tokio::test]
async fn sigterm_mid_segment_finishes_it_and_exits_0() {
    // A tool that takes a while: the SIGTERM lands while it runs.
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let app = axum::Router::new().route(
        "/send",
        axum::routing::post(move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1500)).await;
                axum::Json(json!({ "sent": true }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tool_url = format!("http://{}/send", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let id = uuid::Uuid::now_v7().simple().to_string();
    let dir = std::env::temp_dir().join(format!("agentenkit-drain-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let agent_file = dir.join("agentenkit.toml");
    std::fs::write(
        &agent_file,
        format!(
            r#"
[agents.mailer]
tools = ["send_email"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "send_email", arguments = {{ to = "a@b.c" }} }} ] }},
  {{ text = "Done." }},
] }}
[tools.send_email]
type = "http"
url = "{tool_url}"
"#
        ),
    )
    .unwrap();
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

    // A free port for the worker's own /metrics.
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut worker = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentenkit-worker"))
        .env(
            "AGENTENKIT_METRICS_LISTEN",
            format!("127.0.0.1:{metrics_port}"),
        )
        .env("DATABASE_URL", database_url())
        .env("AGENTENKIT_SCHEMA", &schema)
        .env("AMQP_URL", amqp_url())
        .env("AGENTENKIT_QUEUE_PREFIX", &prefix)
        .env("AGENTENKIT_CONFIG", &agent_file)
        .env("AGENTENKIT_SHUTDOWN_GRACE", "20s")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    let owner = Owner("alice".into());
    let thread = store
        .create_thread(&owner, "mailer", &json!({}))
        .await
        .unwrap();
    let started = store
        .start_run(thread.id, &owner, "go", None)
        .await
        .unwrap();
    relay.publish(&started.outbox).await;
    let run: RunId = started.run_id;

    // The tool is running: stop the worker now.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while calls.load(Ordering::SeqCst) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the tool never ran");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The worker process serves its own metrics.
    let metrics = agentenkit_runtime::tls::http_client()
        .build()
        .unwrap()
        .get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("agentenkit_model_calls_total"),
        "{metrics}"
    );
    let pid = worker.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let exited = tokio::time::timeout(Duration::from_secs(20), worker.wait())
        .await
        .expect("the worker exits within its grace period")
        .unwrap();
    assert!(exited.success(), "exit status {exited}");

    // What it held was finished, once.
    assert_eq!(store.count_runs(RunStatus::Completed).await.unwrap(), 1);
    let view = store.get_run(run, &owner).await.unwrap();
    assert_eq!(view.status, RunStatus::Completed);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the tool ran once");

    queue.close().await;
    let (connection, channel) = {
        let connection =
            lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
                .await
                .unwrap();
        let channel = connection.create_channel().await.unwrap();
        (connection, channel)
    };
    let mut queues = vec![topology.segments_queue(), topology.dead_queue()];
    queues.extend(
        agentenkit_queue::ladder::plan(&topology)
            .delay_queues
            .into_iter()
            .map(|q| q.name),
    );
    for name in queues {
        let _ = channel
            .queue_delete(
                name.as_str().into(),
                lapin::options::QueueDeleteOptions::default(),
            )
            .await;
    }
    for exchange in agentenkit_queue::ladder::plan(&topology).exchanges {
        let _ = channel
            .exchange_delete(
                exchange.as_str().into(),
                lapin::options::ExchangeDeleteOptions::default(),
            )
            .await;
    }
    drop(connection);
    store.drop_schema().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
