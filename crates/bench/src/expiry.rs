//! Expiry accuracy: how long after its `expires_at` an unanswered request
//! is expired, through the real delay ladder. N requests with TTLs spread
//! over 2–20 s; the figure is (INPUT_RESOLVED time − expires_at).

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentenkit_core::Owner;
use agentenkit_queue::rabbit::RabbitQueue;
use agentenkit_queue::{QueueAdapter, Topology};
use agentenkit_runtime::{Registry, Relay, Worker, WorkerConfig};
use agentenkit_store::{Store, StoreConfig};
use anyhow::{bail, Context};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

/// TTLs of the agents, in seconds: one agent per whole second of 2–20.
const TTL_SECONDS: std::ops::RangeInclusive<u64> = 2..=20;

fn registry() -> anyhow::Result<Registry> {
    let mut toml = String::from(
        "[tools.wait]\ntype = \"http\"\nurl = \"http://127.0.0.1:9/never-called\"\nrequires_confirmation = true\n",
    );
    for s in TTL_SECONDS {
        toml.push_str(&format!(
            "[agents.ttl{s}]\nhitl_ttl_ms = {}\ntools = [\"wait\"]\nmodel = {{ provider = \"scripted\", script = [ \
             {{ tool_calls = [ {{ id = \"c1\", name = \"wait\", arguments = {{}} }} ] }}, {{ text = \"ok\" }} ] }}\n",
            s * 1000
        ));
    }
    Ok(Registry::from_toml(&toml)?)
}

/// Runs the measurement and prints its table.
pub async fn run(database_url: &str, amqp_url: &str, n: usize) -> anyhow::Result<()> {
    let id = uuid::Uuid::now_v7().simple().to_string();
    let mut config = StoreConfig::new(database_url);
    config.schema = Some(format!("bench_exp_{id}"));
    let store = Store::connect(&config)?;
    store.migrate().await?;
    let topology = Topology {
        prefix: format!("bench.exp.{id}"),
        queue_expires: Some(Duration::from_secs(1800)),
        // TTLs drawn at random: no lane fits; this measures the ladder.
        delay_lanes: vec![],
        ..Topology::default()
    };
    let queue: Arc<dyn QueueAdapter> =
        Arc::new(RabbitQueue::connect(amqp_url, topology.clone()).await?);
    let outcome = measure(&store, queue.clone(), n).await;
    queue.close().await;
    let _ = agentenkit::broker::delete_topology(amqp_url, &topology).await;
    store.drop_schema().await?;
    let lateness = outcome?;
    let ms = |p: f64| lateness[((lateness.len() - 1) as f64 * p).round() as usize];
    println!("\n## Expiry accuracy (fired − expires_at)\n");
    println!("| requests | TTLs | delay path | p50 ms | p99 ms | max ms | min ms |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {n} | 2–20 s (19 agents) | RabbitMQ delay ladder, expiry handler in the worker | {:.1} | {:.1} | {:.1} | {:.1} |",
        ms(0.5),
        ms(0.99),
        lateness.last().copied().unwrap_or_default(),
        lateness.first().copied().unwrap_or_default()
    );
    Ok(())
}

async fn measure(
    store: &Store,
    queue: Arc<dyn QueueAdapter>,
    n: usize,
) -> anyhow::Result<Vec<f64>> {
    // The clients and the worker share a deployment: what either writes
    // is published.
    let config = WorkerConfig {
        prefetch: 64,
        ..WorkerConfig::default()
    };
    let deployment = agentenkit_runtime::Deployment::assemble(
        store.clone(),
        Relay::new(queue),
        Arc::new(registry()?),
        usize::from(config.notify_prefetch),
    );
    let clients = deployment.store().clone();
    let worker = Worker::new(&deployment, config);
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let worker_task = tokio::spawn(async move { worker.run(token).await });
    let owner = Owner("bench".into());
    let agents: Vec<u64> = TTL_SECONDS.collect();
    let started = Instant::now();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..n)
        .map(|i| {
            let (store, owner) = (clients.clone(), owner.clone());
            let agent = format!("ttl{}", agents[i % agents.len()]);
            async move {
                let thread = store
                    .create_thread(&owner, &agent, &serde_json::json!({}))
                    .await?;
                store.start_run(thread.id, &owner, "wait", None).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for r in results {
        r?;
    }
    // Every request expires within the longest TTL plus a margin.
    let deadline = started + Duration::from_secs(*TTL_SECONDS.end() + 40);
    let lateness = loop {
        let rows = store
            .expiry_lateness_ms()
            .await
            .context("reading expiry times")?;
        if rows.len() >= n {
            break rows;
        }
        if Instant::now() > deadline {
            bail!("only {} of {n} requests expired in time", rows.len());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    shutdown.cancel();
    let _ = worker_task.await;
    let mut lateness = lateness;
    lateness.sort_by(|a, b| a.total_cmp(b));
    Ok(lateness)
}
