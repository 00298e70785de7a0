//! A worker process told to stop (SIGTERM) mid-segment finishes what it
//! holds within its grace period and exits 0: nothing lost, nothing run
//! twice.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentenkit_core::{Owner, RunStatus};
use serde_json::json;

mod support;

use support::Fleet;

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

    let fleet = Fleet::new("drain").await;
    let agent_file = fleet.agent_file(&format!(
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
    ));
    // A free port for the worker's own /metrics.
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut worker = fleet.spawn_worker(
        &agent_file,
        &[
            (
                "AGENTENKIT_METRICS_LISTEN",
                format!("127.0.0.1:{metrics_port}"),
            ),
            ("AGENTENKIT_SHUTDOWN_GRACE", "20s".into()),
        ],
    );

    let owner = Owner("alice".into());
    let (_, run) = fleet.start_turn(&owner, "mailer", "go").await;
    let store = &fleet.store;

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

    fleet.clean_up().await;
}
