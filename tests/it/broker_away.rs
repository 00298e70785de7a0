//! The API serves while the broker is away: reads, answers and new turns
//! commit, their messages wait in the outbox, readiness depends on Postgres
//! alone and says the broker is away; once the broker is back, the API's
//! own relay publishes what waited and the runs go on.

use std::sync::Arc;

use agentenkit_queue::lazy::LazyQueue;
use agentenkit_queue::QueueAdapter;
use agentenkit_runtime::Relay;
use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::json;

#[tokio::test]
async fn the_api_serves_while_the_broker_is_away_and_publishes_when_it_returns() {
    let tool = ToolServer::ok().await;
    // The API's broker has not arrived; the worker's (the same RabbitMQ
    // queues) is there all along.
    let away = LazyQueue::new();
    let api_queue = away.clone();
    let env = TestEnv::start_with(
        approval_registry(CALL_THEN_DONE, &tool.url),
        |_| {},
        move |mut state| {
            let queue: Arc<dyn QueueAdapter> = Arc::new(api_queue);
            state.queue = queue.clone();
            state.with_relay(Relay::new(queue).with_timeout(std::time::Duration::from_millis(200)))
        },
    )
    .await;
    let worker = env.spawn_worker();

    let (status, ready) = env.call("GET", "/readyz", None, None).await;
    assert_eq!(
        (status, ready),
        (
            StatusCode::OK,
            json!({ "status": "ready", "broker": "away" })
        )
    );
    let metrics = env
        .http
        .get(env.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("agentenkit_broker_up 0"), "{metrics}");
    // A new turn commits; its segment waits in the outbox.
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    let keys: Vec<String> = env.rows("SELECT key FROM outbox", |r| r.get(0)).await;
    assert_eq!(keys, [format!("segment:{run_id}:1")]);
    let thread = env.get(&format!("/threads/{thread_id}")).await;
    assert_eq!(thread["status"], "RUNNING", "{thread}");

    // The broker is back: the API's relay publishes what waited (its own
    // retry, not the reaper), and the run parks, then completes once
    // answered, all through the API.
    away.connected(env.queue.clone());
    env.wait_pending(&thread_id, 1).await;
    let (status, ready) = env.call("GET", "/readyz", None, None).await;
    assert_eq!(
        (status, ready),
        (StatusCode::OK, json!({ "status": "ready", "broker": "up" }))
    );
    let (status, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1" }),
        )
        .await;
    assert_eq!(status.as_u16(), 200, "{answer}");
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    worker.stop().await.unwrap();
    env.finish().await;
}
