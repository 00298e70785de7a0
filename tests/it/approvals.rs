use std::time::Duration;

use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::{json, Value};

fn approve(run_id: &str, call: &str) -> Value {
    json!({ "runId": run_id, "toolCallId": call, "payload": { "note": "go" } })
}

#[tokio::test]
async fn approve_runs_the_tool_once_with_the_approval_and_the_run_completes() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;

    let pending = env.wait_pending(&thread_id, 1).await;
    let input = &pending[0];
    assert_eq!(input["toolCallId"], "c1");
    assert_eq!(input["runId"], run_id.as_str());
    assert_eq!(input["threadId"], thread_id.as_str());
    assert_eq!(input["toolName"], "tool");
    assert_eq!(input["arguments"], json!({ "to": "a@b.c" }));
    assert_eq!(input["kind"], "approval");
    assert_eq!(input["reason"], "approval");
    assert_eq!(input["runName"], "agent");
    assert_eq!(input["depth"], 0);
    assert!(input["expiresAt"].is_string());
    assert_eq!(tool.calls(), 0, "nothing runs before the approval");
    assert!(!env
        .metrics_text()
        .await
        .contains("agentenkit_answer_wait_seconds_count"));
    assert_eq!(
        env.get(&format!("/runs/{run_id}")).await["status"],
        "waiting"
    );
    assert_eq!(env.get("/agent/inbox").await.as_array().unwrap().len(), 1);
    let (_, bobs) = env.call("GET", "/agent/inbox", Some(BOB), None).await;
    assert_eq!(bobs, json!([]), "the inbox is per owner");

    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let required = first_event(&events, "INPUT_REQUIRED");
    for field in [
        "toolCallId",
        "runId",
        "toolName",
        "arguments",
        "reason",
        "runName",
        "depth",
        "expiresAt",
    ] {
        assert_eq!(
            required["data"][field], input[field],
            "INPUT_REQUIRED.{field}"
        );
    }

    let (status, answer) = env
        .reply("/agent/tool-call/approve", ALICE, approve(&run_id, "c1"))
        .await;
    assert_eq!(
        (status, answer),
        (StatusCode::OK, json!({ "delivered": true }))
    );
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 1);
    assert_eq!(
        tool.bodies()[0]["approval"],
        json!({ "approved": true, "payload": { "note": "go" } })
    );
    // The wait from park to answer is measured, once.
    let metrics = env.metrics_text().await;
    assert!(
        metrics.contains("agentenkit_answer_wait_seconds_count 1"),
        "{metrics}"
    );

    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    let names: Vec<_> = journal
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    let tool_entry = format!("tool:{run_id}:c1");
    assert_eq!(
        names,
        [
            "model:0",
            "persist:toolcall:c1",
            tool_entry.as_str(),
            "exec:c1",
            "model:1"
        ]
    );
    assert_eq!(journal[1]["value"]["kind"], "approval");
    assert_eq!(journal[2]["value"]["status"], "executed");
    assert_eq!(journal[2]["value"]["approved"], true);
    assert_eq!(journal[2]["value"]["answeredBy"], "alice");
    assert!(journal[2]["value"]["answeredAt"].is_string());

    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let resolved = first_event(&events, "INPUT_RESOLVED");
    assert_eq!(resolved["data"]["answeredBy"], "alice");
    assert_eq!(resolved["data"]["status"], "executed");
    assert_eq!(resolved["data"]["toolCallId"], "c1");
    assert_eq!(env.get("/agent/inbox").await, json!([]));
    let thread = env.wait_status(&thread_id, "IDLE").await;
    assert_eq!(thread["pendingInputs"], json!([]));

    // Answering again is too late, not an error.
    let (status, again) = env
        .reply("/agent/tool-call/approve", ALICE, approve(&run_id, "c1"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        again,
        json!({ "delivered": false, "error": "This request was already answered" })
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn reject_never_runs_the_tool_and_the_model_sees_the_denial() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    let (status, answer) = env
        .reply(
            "/agent/tool-call/reject",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1", "reason": "not to them" }),
        )
        .await;
    assert_eq!(
        (status, answer),
        (StatusCode::OK, json!({ "delivered": true }))
    );
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 0);
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(
        messages[2]["content"],
        json!({ "denied": true, "reason": "not to them" })
    );
    let names = env.journal_names(&run_id).await;
    assert_eq!(names.len(), 4, "no exec for a rejected call: {names:?}");
    assert!(!names.iter().any(|n| n.starts_with("exec:")));
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn two_approvals_park_together_and_resume_only_when_both_are_answered_in_either_order() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(TWO_CALLS, &tool.url)).await;
    let worker = env.spawn_worker();
    for order in [["c1", "c2"], ["c2", "c1"]] {
        let (thread_id, run_id) = env.start_turn("agent", "both").await;
        env.wait_pending(&thread_id, 2).await;
        let journal_before = env.journal_names(&run_id).await;
        let (_, first) = env
            .reply(
                "/agent/tool-call/approve",
                ALICE,
                approve(&run_id, order[0]),
            )
            .await;
        assert_eq!(first["delivered"], true);
        // One answered, one open: still waiting, nothing resumed.
        let pending = env.wait_pending(&thread_id, 1).await;
        assert_eq!(pending[0]["toolCallId"], order[1]);
        assert_eq!(
            env.get(&format!("/runs/{run_id}")).await["status"],
            "waiting"
        );
        assert_eq!(env.journal_names(&run_id).await, journal_before);
        let (_, second) = env
            .reply(
                "/agent/hitl/respond",
                ALICE,
                json!({ "threadId": thread_id, "toolCallId": order[1], "approved": true }),
            )
            .await;
        assert_eq!(second["delivered"], true);
        assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
        let names = env.journal_names(&run_id).await;
        assert_eq!(
            names,
            [
                "model:0".to_owned(),
                "persist:toolcall:c1".into(),
                "persist:toolcall:c2".into(),
                format!("tool:{run_id}:c1"),
                "exec:c1".into(),
                format!("tool:{run_id}:c2"),
                "exec:c2".into(),
                "model:1".into(),
            ],
            "replies are journaled in call order whatever the answer order"
        );
    }
    assert_eq!(tool.calls(), 4);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn fifty_concurrent_responds_deliver_exactly_once() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    let body = json!({ "threadId": thread_id, "toolCallId": "c1", "approved": true, "payload": 1 });
    let replies = futures::future::join_all(
        (0..50).map(|_| env.reply("/agent/hitl/respond", ALICE, body.clone())),
    )
    .await;
    let delivered = replies
        .iter()
        .filter(|(s, b)| *s == StatusCode::OK && b["delivered"] == true)
        .count();
    let refused = replies
        .iter()
        .filter(|(s, b)| *s == StatusCode::OK && b["error"] == "This request was already answered")
        .count();
    assert_eq!((delivered, refused), (1, 49), "{replies:?}");
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 1);
    let resolved = env
        .event_types(&thread_id)
        .await
        .into_iter()
        .filter(|t| t == "INPUT_RESOLVED")
        .count();
    assert_eq!(resolved, 1);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn replies_from_another_owner_or_to_unknown_calls_are_404_and_change_nothing() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    let attempts = [
        ("/agent/tool-call/approve", BOB, approve(&run_id, "c1")),
        (
            "/agent/tool-call/reject",
            BOB,
            json!({ "runId": run_id, "toolCallId": "c1" }),
        ),
        (
            "/agent/hitl/respond",
            BOB,
            json!({ "threadId": thread_id, "toolCallId": "c1", "approved": true }),
        ),
        ("/agent/tool-call/approve", ALICE, approve(&run_id, "c9")),
        (
            "/agent/tool-call/approve",
            ALICE,
            approve("not-a-run", "c1"),
        ),
        (
            "/agent/hitl/respond",
            ALICE,
            json!({ "threadId": uuid::Uuid::now_v7(), "toolCallId": "c1", "approved": true }),
        ),
    ];
    for (path, key, body) in attempts {
        let (status, answer) = env.reply(path, key, body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path} {answer}");
        assert_eq!(answer["error"], "NotFound");
    }
    for (path, body) in [
        ("/agent/tool-call/approve", json!({ "runId": run_id })),
        (
            "/agent/hitl/respond",
            json!({ "threadId": thread_id, "toolCallId": "c1", "approved": "yes" }),
        ),
        (
            "/agent/tool-call/approve",
            json!({ "runId": run_id, "toolCallId": "c1", "answeredBy": "mallory" }),
        ),
    ] {
        let (status, answer) = env.reply(path, ALICE, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {answer}");
    }
    let (status, _) = env
        .call(
            "POST",
            "/agent/tool-call/approve",
            None,
            Some(approve(&run_id, "c1")),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let pending = env.wait_pending(&thread_id, 1).await;
    assert_eq!(pending[0]["toolCallId"], "c1");
    assert_eq!(tool.calls(), 0);
    assert!(!env
        .event_types(&thread_id)
        .await
        .contains(&"INPUT_RESOLVED".to_owned()));
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_call_that_has_not_parked_cannot_be_answered() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    // Dies right before the step's commit: nothing of the step (the model's
    // answer, the proposed row, the park) is durable.
    let doomed = env.spawn_crashing_worker("before:park");
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    doomed.died().await.unwrap_err();
    let (status, _) = env
        .reply("/agent/tool-call/approve", ALICE, approve(&run_id, "c1"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let worker = env.spawn_worker();
    env.wait_pending(&thread_id, 1).await;
    let (_, answer) = env
        .reply("/agent/tool-call/approve", ALICE, approve(&run_id, "c1"))
        .await;
    assert_eq!(answer["delivered"], true);
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_worker_killed_between_the_approval_and_exec_runs_the_tool_once() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    // Dies after the resumed segment read the approval, right before the
    // tool would run.
    let doomed = env.spawn_crashing_worker("invoke:c1");
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    env.reply("/agent/tool-call/approve", ALICE, approve(&run_id, "c1"))
        .await;
    doomed.died().await.unwrap_err();
    assert_eq!(tool.calls(), 0);
    let rescuer = env.spawn_worker();
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(
        tool.calls(),
        1,
        "the approval was not lost and the tool ran once"
    );
    assert_eq!(tool.bodies()[0]["approval"]["approved"], true);
    rescuer.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_stop_that_commits_first_wins_over_the_park() {
    // The step calls a marked tool and a slow function tool; the stop lands
    // while the slow one runs, before the step can park.
    let marked = ToolServer::ok().await;
    let slow = ToolServer::start_with_delay(Duration::from_millis(800), |_, _| {
        (StatusCode::OK, json!("slow"))
    })
    .await;
    let registry = agentenkit_runtime::Registry::from_toml(&format!(
        r#"
[agents.agent]
tools = ["marked", "slow"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "marked", arguments = {{}} }}, {{ id = "c2", name = "slow", arguments = {{}} }} ] }},
  {{ text = "Done." }},
] }}
[tools.marked]
type = "http"
url = "{}"
requires_confirmation = true
[tools.slow]
type = "http"
url = "{}"
"#,
        marked.url, slow.url
    ))
    .unwrap();
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    eventually("the slow tool is called", || async {
        (slow.calls() == 1).then_some(())
    })
    .await;
    let (status, stopped) = env
        .call(
            "POST",
            &format!("/threads/{thread_id}/stop"),
            Some(ALICE),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(stopped["stopped"], json!([run_id]));
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "cancelled");
    // Give the worker its chance to (fail to) park, then look.
    let (_, late) = env.start_turn("agent", "next").await;
    let _ = late;
    let types = env.event_types(&thread_id).await;
    assert!(!types.contains(&"INPUT_REQUIRED".to_owned()), "{types:?}");
    assert!(types.contains(&"RUN_CANCELLED".to_owned()));
    assert!(env
        .get("/agent/inbox")
        .await
        .as_array()
        .unwrap()
        .iter()
        .all(|i| i["runId"] != run_id.as_str()));
    let (_, answer) = env
        .reply("/agent/tool-call/approve", ALICE, approve(&run_id, "c1"))
        .await;
    assert_ne!(
        answer["delivered"], true,
        "a stopped run's call cannot be approved"
    );
    assert_eq!(marked.calls(), 0);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_rust_caller_approves_through_the_runtime_without_http() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;
    let replies = env.deployment_of(env.registry.clone(), 1).replies();
    let alice = agentenkit_core::Owner("alice".into());
    let run: agentenkit_core::RunId = run_id.parse().unwrap();
    let thread: agentenkit_core::ThreadId = thread_id.parse().unwrap();
    // Bad input changes nothing.
    assert!(matches!(
        replies
            .reject(
                &alice,
                run,
                "c1",
                agentenkit_runtime::replies::Reject {
                    reason: Some("no\0".into()),
                    arguments_hash: None,
                }
            )
            .await,
        Err(agentenkit_runtime::Error::InvalidInput(_))
    ));
    // Another owner's call is not found.
    let bob = agentenkit_core::Owner("bob".into());
    assert!(replies
        .approve(&bob, run, "c1", Default::default())
        .await
        .is_err());
    assert_eq!(
        replies
            .reclaim_if_orphaned(thread)
            .await
            .unwrap()
            .expired_requests,
        0,
        "nothing is overdue"
    );
    let answered = replies
        .respond(&alice, thread, "c1", true, Some(json!({ "note": "ok" })))
        .await
        .unwrap();
    assert!(answered.delivered);
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 1);
    let again = replies
        .approve(&alice, run, "c1", Default::default())
        .await
        .unwrap();
    assert!(!again.delivered);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_stop_aborted_by_a_deadlock_is_retried_not_a_500() {
    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    // No worker: the run stays queued.
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    let thread: uuid::Uuid = thread_id.parse().unwrap();
    let run: uuid::Uuid = run_id.parse().unwrap();
    // Another session holds the run's row and will ask for the thread's,
    // which the stop takes first: a deadlock. Its own deadlock timer is
    // long, so Postgres aborts the stop's transaction.
    let other = env.pg_client().await;
    other
        .batch_execute("BEGIN; SET LOCAL deadlock_timeout = '10s'")
        .await
        .unwrap();
    other
        .execute("SELECT 1 FROM runs WHERE id = $1 FOR UPDATE", &[&run])
        .await
        .unwrap();
    let stop = tokio::spawn({
        let http = env.http.clone();
        let url = env.url(&format!("/threads/{thread_id}/stop"));
        async move {
            let response = http.post(url).bearer_auth(ALICE).send().await.unwrap();
            (response.status(), response.json::<Value>().await.unwrap())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Waits until Postgres breaks the deadlock by aborting the stop.
    other
        .execute("SELECT 1 FROM threads WHERE id = $1 FOR UPDATE", &[&thread])
        .await
        .unwrap();
    other.batch_execute("ROLLBACK").await.unwrap();
    let (status, body) = tokio::time::timeout(Duration::from_secs(10), stop)
        .await
        .expect("the stop ends")
        .unwrap();
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["stopped"], json!([run_id]));
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "cancelled");
    env.finish().await;
}
