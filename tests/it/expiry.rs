use std::time::Duration;

use agentenkit_core::{Owner, ThreadId};
use agentenkit_runtime::reaper::{reap_once, ReaperConfig};
use agentenkit_tests::*;
use serde_json::{json, Value};

const TIMEOUT_DENIAL: &str = "user had no response, action cancelled";

/// Starts a turn the way a client would, but through the store: no API
/// call is made, so nothing depends on an API process.
async fn start_turn_without_api(env: &TestEnv) -> (ThreadId, String) {
    let (thread, started) = env.start_run_unpublished("agent").await;
    env.relay.publish(&started.outbox).await;
    (thread, started.run_id.to_string())
}

fn event<'a>(events: &'a Value, event_type: &str, call: &str) -> &'a Value {
    events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == event_type && e["data"]["toolCallId"] == call)
        .unwrap_or_else(|| panic!("no {event_type} for {call} in {events}"))
}

fn millis_between(from: &Value, to: &Value) -> i64 {
    let parse = |v: &Value| chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap()).unwrap();
    (parse(to) - parse(from)).num_milliseconds()
}

#[tokio::test]
async fn an_unanswered_approval_expires_on_time_with_no_api_and_the_run_goes_on() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry_ttl(CALL_THEN_DONE, &tool.url, 1500)).await;
    let worker = env.spawn_worker();
    let (thread, run_id) = start_turn_without_api(&env).await;
    let owner = Owner("alice".into());
    let run = eventually("the run expires and completes", || async {
        let run = env
            .store
            .get_run(run_id.parse().unwrap(), &owner)
            .await
            .unwrap();
        (run.status.as_str() == "completed").then_some(run)
    })
    .await;
    assert_eq!(run.output.as_deref(), Some("Done."));
    assert_eq!(tool.calls(), 0, "an expired approval never runs the tool");

    let events = env.get(&format!("/threads/{thread}/events")).await;
    let required = event(&events, "INPUT_REQUIRED", "c1");
    let resolved = event(&events, "INPUT_RESOLVED", "c1");
    assert_eq!(resolved["data"]["status"], "expired");
    assert_eq!(resolved["data"]["approved"], false);
    let late_by = millis_between(&required["data"]["expiresAt"], &resolved["createdAt"]);
    assert!(
        (0..1000).contains(&late_by),
        "fired {late_by} ms after expiresAt"
    );
    let messages = env.get(&format!("/threads/{thread}/messages")).await;
    assert_eq!(
        messages[2]["content"],
        json!({ "denied": true, "reason": TIMEOUT_DENIAL })
    );
    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    assert_eq!(journal[2]["value"]["status"], "expired");

    let (_, late) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1" }),
        )
        .await;
    assert_eq!(
        late,
        json!({ "delivered": false, "error": "This request has expired" })
    );
    let metrics = env.metrics_text().await;
    assert!(
        metrics.contains("agentenkit_expiry_lateness_seconds_bucket{by=\"worker\",le=\"1\"}"),
        "{metrics}"
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn one_sibling_expiring_leaves_the_other_open_and_the_run_parked() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry_ttl(TWO_CALLS, &tool.url, 1500)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "both").await;
    env.wait_pending(&thread_id, 2).await;
    // c2 gets a longer window (as a park with its own ttl would).
    env.sql("UPDATE tool_calls SET expires_at = now() + interval '1 hour' WHERE id = 'c2'")
        .await;
    let pending = eventually("c1 expires", || async {
        let thread = env.get(&format!("/threads/{thread_id}")).await;
        let pending = thread["pendingInputs"].as_array().unwrap().clone();
        (pending.len() == 1).then_some(pending)
    })
    .await;
    assert_eq!(pending[0]["toolCallId"], "c2");
    assert_eq!(
        env.get(&format!("/runs/{run_id}")).await["status"],
        "waiting"
    );
    assert_eq!(env.journal_names(&run_id).await.len(), 3, "nothing resumed");

    let (_, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c2" }),
        )
        .await;
    assert_eq!(answer["delivered"], true);
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 1, "only c2 ran");
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    let results: Vec<_> = messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(results[0]["content"]["reason"], TIMEOUT_DENIAL);
    assert_eq!(results[1]["content"]["ok"], true);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn an_expiry_delivered_early_is_rescheduled_never_applied_early() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry_ttl(CALL_THEN_DONE, &tool.url, 3_600_000)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;
    env.sql("UPDATE tool_calls SET expires_at = now() + interval '2 seconds' WHERE id = 'c1'")
        .await;
    let expires_at =
        env.get(&format!("/threads/{thread_id}")).await["pendingInputs"][0]["expiresAt"].clone();
    // An adapter that ignored the delay: the expiry arrives at once.
    let early = agentenkit_core::QueueMessage::Expiry {
        run_id: run_id.parse().unwrap(),
        tool_call_id: "c1".into(),
    };
    env.queue.publish(&early).await.unwrap();
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let resolved = event(&events, "INPUT_RESOLVED", "c1");
    assert_eq!(resolved["data"]["status"], "expired");
    let late_by = millis_between(&expires_at, &resolved["createdAt"]);
    assert!(late_by >= 0, "applied {} ms before expiresAt", -late_by);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn when_the_expiry_message_is_lost_one_reaper_pass_expires_the_request() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry_ttl(CALL_THEN_DONE, &tool.url, 1000)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;
    env.purge_delayed_messages().await;
    // Well past expiresAt, the request is still open: nothing is coming.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    env.wait_pending(&thread_id, 1).await;
    let report = reap_once(&env.reaper(), &ReaperConfig::default())
        .await
        .unwrap();
    assert_eq!(report.expired_requests, 1);
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let again = reap_once(&env.reaper(), &ReaperConfig::default())
        .await
        .unwrap();
    assert_eq!(again.expired_requests, 0, "idempotent");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_request_parked_without_an_expiry_is_given_one_by_the_reaper() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry_ttl(CALL_THEN_DONE, &tool.url, 3_600_000)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;
    // A row from before the expiry timer existed.
    env.sql("UPDATE tool_calls SET expires_at = NULL WHERE id = 'c1'")
        .await;
    let config = ReaperConfig {
        default_ttl: Duration::from_millis(500),
        ..ReaperConfig::default()
    };
    let report = reap_once(&env.reaper(), &config).await.unwrap();
    assert_eq!(report.scheduled_expiries, 1);
    let thread = env.get(&format!("/threads/{thread_id}")).await;
    assert!(thread["pendingInputs"][0]["expiresAt"].is_string());
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    assert_eq!(messages[2]["content"]["reason"], TIMEOUT_DENIAL);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn two_reapers_racing_expire_each_request_once() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry_ttl(CALL_THEN_DONE, &tool.url, 3_600_000)).await;
    let worker = env.spawn_worker();
    let mut threads = Vec::new();
    for i in 0..6 {
        threads.push(env.start_turn("agent", &format!("go {i}")).await);
    }
    for (thread_id, _) in &threads {
        env.wait_pending(thread_id, 1).await;
    }
    env.sql("UPDATE tool_calls SET expires_at = now() - interval '1 second'")
        .await;
    let config = ReaperConfig {
        batch: 2,
        ..ReaperConfig::default()
    };
    // Two reaper processes.
    let (one, two) = (env.reaper(), env.reaper());
    let (a, b) = tokio::join!(reap_once(&one, &config), reap_once(&two, &config));
    assert_eq!(a.unwrap().expired_requests + b.unwrap().expired_requests, 6);
    for (thread_id, run_id) in &threads {
        assert_eq!(env.wait_run_finished(run_id).await["status"], "completed");
        let resolved = env
            .event_types(thread_id)
            .await
            .into_iter()
            .filter(|t| t == "INPUT_RESOLVED")
            .count();
        assert_eq!(resolved, 1, "{thread_id}");
    }
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn opening_the_inbox_expires_an_overdue_request_at_once() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry_ttl(CALL_THEN_DONE, &tool.url, 3_600_000)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;
    env.sql("UPDATE tool_calls SET expires_at = now() - interval '1 second'")
        .await;
    assert_eq!(
        env.get("/agent/inbox").await,
        json!([]),
        "reclaimed on connect"
    );
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    worker.stop().await.unwrap();
    env.finish().await;
}
