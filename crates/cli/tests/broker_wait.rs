//! A worker started while RabbitMQ is unreachable waits for it instead of
//! exiting (under a supervisor's crash-loop backoff an exited worker stays
//! down for minutes after the broker is back). Found by `make chaos`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use lapin::options::QueueDeclareOptions;

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/agentenkit_test".into())
}

const BROKER: &str = "127.0.0.1:5672";

/// A port nobody listens on yet.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A queue prefix of its own, and an agent file in a folder of its own.
fn prefix_and_agents() -> (String, std::path::PathBuf, std::path::PathBuf) {
    let prefix = format!("wait.{}", uuid::Uuid::now_v7().simple());
    let dir = std::env::temp_dir().join(format!("agentenkit-{prefix}"));
    std::fs::create_dir_all(&dir).unwrap();
    let agents = dir.join("agentenkit.toml");
    std::fs::write(
        &agents,
        "[agents.a]\nmodel = { provider = \"scripted\", script = [ { text = \"hi\" } ] }\n",
    )
    .unwrap();
    (prefix, dir, agents)
}

/// The broker "comes back": `port` now relays to RabbitMQ.
async fn open_relay_to_the_broker(port: u16) {
    let relay = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = relay.accept().await {
            tokio::spawn(async move {
                if let Ok(mut broker) = tokio::net::TcpStream::connect(BROKER).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut broker).await;
                }
            });
        }
    });
}

#[tokio::test]
async fn a_worker_started_before_the_broker_is_reachable_waits_and_then_consumes() {
    // A port nobody listens on yet: the worker's broker, until the test
    // opens it as a relay to the real one.
    let port = free_port();
    let (prefix, dir, agents) = prefix_and_agents();
    let mut worker = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentenkit-worker"))
        .env("DATABASE_URL", database_url())
        .env(
            "AMQP_URL",
            format!("amqp://guest:guest@127.0.0.1:{port}/%2f"),
        )
        .env("AGENTENKIT_QUEUE_PREFIX", &prefix)
        .env("AGENTENKIT_CONFIG", &agents)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        worker.try_wait().unwrap().is_none(),
        "the worker exited while the broker was unreachable"
    );

    // The broker "comes back": the port now relays to RabbitMQ.
    open_relay_to_the_broker(port).await;

    // Connected: it declared its topology (its segment queue exists).
    let connection = lapin::Connection::connect(
        &format!("amqp://guest:guest@{BROKER}/%2f"),
        lapin::ConnectionProperties::default(),
    )
    .await
    .unwrap();
    let queue = format!("{prefix}.segments");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let channel = connection.create_channel().await.unwrap();
        let declared = channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                Default::default(),
            )
            .await;
        if declared.is_ok_and(|q| q.consumer_count() >= 1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the worker did not connect within 20 s of the broker being reachable"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(worker.try_wait().unwrap().is_none(), "still running");
    let _ = worker.kill().await;
    let registry = agentenkit_runtime::Registry::from_file(&agents).unwrap();
    let topology = agentenkit_queue::Topology {
        prefix,
        delay_lanes: registry.delay_lanes(),
        ..agentenkit_queue::Topology::default()
    };
    agentenkit::broker::delete_topology(&format!("amqp://guest:guest@{BROKER}/%2f"), &topology)
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The API does not wait for the broker: it listens at once, ready on
/// Postgres alone and saying the broker is away, and connects in the
/// background once the broker is reachable.
#[tokio::test]
async fn the_api_serves_before_the_broker_is_reachable_and_connects_when_it_is() {
    let (broker_port, api_port) = (free_port(), free_port());
    let schema = format!("t_{}", uuid::Uuid::now_v7().simple());
    let mut config = agentenkit_store::StoreConfig::new(database_url());
    config.schema = Some(schema.clone());
    let store = agentenkit_store::Store::connect(&config).unwrap();
    store.migrate().await.unwrap();
    let (prefix, dir, agents) = prefix_and_agents();
    let mut api = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentenkit-api"))
        .env("DATABASE_URL", database_url())
        .env("AGENTENKIT_SCHEMA", &schema)
        .env(
            "AMQP_URL",
            format!("amqp://guest:guest@127.0.0.1:{broker_port}/%2f"),
        )
        .env("AGENTENKIT_QUEUE_PREFIX", &prefix)
        .env("AGENTENKIT_CONFIG", &agents)
        .env("AGENTENKIT_API_KEYS", "alice:key-a")
        .env("AGENTENKIT_LISTEN", format!("127.0.0.1:{api_port}"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let http = agentenkit_runtime::tls::http_client().build().unwrap();
    let ready = format!("http://127.0.0.1:{api_port}/readyz");
    let broker_is = |want: &'static str| {
        let (http, ready) = (http.clone(), ready.clone());
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Ok(answer) = http.get(&ready).send().await {
                    let body: serde_json::Value = answer.json().await.unwrap_or_default();
                    if body["broker"] == want {
                        assert_eq!(body["status"], "ready", "{body}");
                        return;
                    }
                }
                assert!(Instant::now() < deadline, "the broker never read {want}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    broker_is("away").await;
    // A read needs no broker.
    let threads = http
        .post(format!("http://127.0.0.1:{api_port}/threads"))
        .bearer_auth("key-a")
        .json(&serde_json::json!({ "agent": "a" }))
        .send()
        .await
        .unwrap();
    assert_eq!(threads.status().as_u16(), 201);

    // The broker "comes back": the port now relays to RabbitMQ.
    open_relay_to_the_broker(broker_port).await;
    broker_is("up").await;
    assert!(api.try_wait().unwrap().is_none(), "still running");
    let _ = api.kill().await;
    let topology = agentenkit_queue::Topology {
        prefix,
        ..agentenkit_queue::Topology::default()
    };
    agentenkit::broker::delete_topology(&format!("amqp://guest:guest@{BROKER}/%2f"), &topology)
        .await
        .unwrap();
    store.drop_schema().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
