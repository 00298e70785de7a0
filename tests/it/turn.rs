use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::{json, Value};

#[tokio::test]
async fn a_turn_runs_end_to_end_through_the_queue() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();

    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    let thread = env.wait_status(&thread_id, "IDLE").await;
    assert_eq!(thread["currentRunId"], run_id.as_str());
    assert_eq!(thread["pendingInputs"], json!([]));

    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed");
    assert_eq!(run["output"], "Done.");
    assert_eq!(
        run["usage"].as_array().unwrap().len(),
        2,
        "one usage row per model call"
    );
    // Read from what each model call reported (the journal's model:<n>).
    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    assert_eq!(run["usage"][1]["modelCall"], 1);
    assert_eq!(
        run["usage"][0]["inputTokens"],
        journal[0]["value"]["usage"]["inputTokens"]
    );
    assert_eq!(
        run["usage"][1]["outputTokens"],
        journal[3]["value"]["usage"]["outputTokens"]
    );
    assert!(run["usage"][0]["inputTokens"].as_i64().unwrap() > 0);

    assert_eq!(
        env.journal_names(&run_id).await,
        ["model:0", "persist:toolcall:c1", "exec:c1", "model:1"]
    );
    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    assert_eq!(journal[1]["value"]["kind"], "function");
    assert_eq!(journal[2]["value"], json!({ "ok": true, "n": 1 }));

    assert_eq!(tool.calls(), 1);
    let body = &tool.bodies()[0];
    assert_eq!(body["arguments"], json!({ "to": "a@b.c" }));
    assert_eq!(body["approval"], json!(null));
    assert_eq!(body["idempotencyKey"], format!("{run_id}:c1"));

    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    let roles: Vec<_> = messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert_eq!(messages[0]["content"], "send it");
    assert_eq!(messages[1]["toolCalls"][0]["id"], "c1");
    assert_eq!(messages[2]["toolCallId"], "c1");
    assert_eq!(messages[2]["content"], json!({ "ok": true, "n": 1 }));
    assert_eq!(messages[3]["content"], "Done.");

    assert_eq!(
        env.event_types(&thread_id).await,
        [
            "RUN_STARTED",
            "MESSAGE",
            "TOOL_CALL",
            "TOOL_RESULT",
            "MESSAGE",
            "RUN_COMPLETED"
        ]
    );
    let all = env.get(&format!("/threads/{thread_id}/events")).await;
    let third = all[2]["id"].as_i64().unwrap();
    let events = env
        .get(&format!("/threads/{thread_id}/events?after={third}"))
        .await;
    assert_eq!(
        events.as_array().unwrap(),
        &all.as_array().unwrap()[3..],
        "after=N pages by event id"
    );

    // The thread is idle again: a second turn starts, sees the first in its
    // history, and runs the script from model:0 again for its own run.
    let (status, second) = env
        .call(
            "POST",
            &format!("/threads/{thread_id}/messages"),
            Some(ALICE),
            Some(json!({"content": "again"})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let second = second["runId"].as_str().unwrap().to_owned();
    assert_eq!(env.wait_run_finished(&second).await["status"], "completed");
    assert_eq!(tool.calls(), 2);

    // The process's metrics saw the segments and the model calls.
    let metrics = env
        .http
        .get(env.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "agentenkit_segments_total",
        "agentenkit_model_calls_total",
        "agentenkit_segment_duration_seconds",
    ] {
        assert!(
            metrics.contains(name),
            "{name} missing from /metrics:\n{metrics}"
        );
    }
    let (status, ready) = env.call("GET", "/readyz", None, None).await;
    assert_eq!(
        (status, ready),
        (StatusCode::OK, json!({ "status": "ready", "broker": "up" }))
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn arguments_that_fail_the_schema_are_a_tool_failure_the_model_sees() {
    let tool = ToolServer::ok().await;
    let script = r#"
      { tool_calls = [ { id = "c1", name = "tool", arguments = { to = 5 } } ] },
      { text = "I could not." },
    "#;
    let env = TestEnv::start(registry(script, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 0, "nothing runs with invalid arguments");
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    let result = &messages[2]["content"];
    assert_eq!(result["error"], "invalid arguments");
    assert_eq!(result["issues"][0]["path"], "/to");
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let tool_result = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "TOOL_RESULT")
        .unwrap();
    assert_eq!(tool_result["data"]["status"], "failed");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn an_unknown_tool_is_a_failure_the_model_sees() {
    let tool = ToolServer::ok().await;
    let script = r#"
      { tool_calls = [ { id = "c1", name = "rm_rf", arguments = {} } ] },
      { text = "ok" },
    "#;
    let env = TestEnv::start(registry(script, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    assert_eq!(messages[2]["content"]["error"], "unknown tool \"rm_rf\"");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_failing_model_is_retried_then_the_run_fails_with_its_error() {
    let env = TestEnv::start(registry(
        r#"{ error = "the model is down" }"#,
        "http://127.0.0.1:9/",
    ))
    .await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "failed");
    assert_eq!(run["attempts"], 3);
    assert!(
        run["error"].as_str().unwrap().contains("the model is down"),
        "{run}"
    );
    assert_eq!(
        env.event_types(&thread_id).await,
        ["RUN_STARTED", "RUN_FAILED"]
    );
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    assert!(events[1]["data"]["error"]
        .as_str()
        .unwrap()
        .contains("the model is down"));
    assert_eq!(env.journal_names(&run_id).await, Vec::<String>::new());
    // A failed run frees the thread.
    env.wait_status(&thread_id, "IDLE").await;
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn an_unavailable_tool_is_retried_and_its_output_journaled_once() {
    let tool = ToolServer::start(|n, _| {
        if n == 1 {
            (StatusCode::SERVICE_UNAVAILABLE, json!({ "error": "busy" }))
        } else {
            (StatusCode::OK, json!({ "sent": n }))
        }
    })
    .await;
    let env = TestEnv::start(registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (_, run_id) = env.start_turn("agent", "go").await;
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed");
    assert_eq!(
        run["attempts"], 0,
        "the failed attempt was counted, then progress reset the count"
    );
    assert_eq!(tool.calls(), 2);
    assert_eq!(
        env.journal_names(&run_id).await,
        ["model:0", "persist:toolcall:c1", "exec:c1", "model:1"]
    );
    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    assert_eq!(journal[2]["value"], json!({ "sent": 2 }));
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn the_shipped_agent_file_completes_a_turn_as_it_is() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agentenkit.toml");
    let env = TestEnv::start(agentenkit_runtime::Registry::from_file(&file).unwrap()).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("mailer", "Send it").await;
    // Its intake asks first; then send_email waits for approval.
    let intake = env.wait_pending(&thread_id, 1).await.remove(0);
    assert_eq!(intake["kind"], "ask");
    env.reply(
        "/agent/tool-call/skip",
        ALICE,
        json!({ "runId": run_id, "toolCallId": intake["toolCallId"] }),
    )
    .await;
    let approval = eventually("send_email waits for approval", || async {
        let pending = env.get(&format!("/threads/{thread_id}")).await["pendingInputs"].clone();
        (pending[0]["toolName"] == "send_email").then_some(pending[0].clone())
    })
    .await;
    let (_, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": approval["toolCallId"] }),
        )
        .await;
    assert_eq!(answer["delivered"], true);
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    let exec = journal
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "exec:c1")
        .unwrap();
    assert_eq!(exec["value"]["echo"]["to"], "a@b.c");
    worker.stop().await.unwrap();
    env.finish().await;
}

/// The conversation and the journal come a page at a time: `limit` items
/// at most, from after `after` (the last one seen), in order; a bad
/// `after` or `limit` is a 400.
#[tokio::test]
async fn messages_and_the_journal_are_read_a_page_at_a_time() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    let (_, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1" }),
        )
        .await;
    assert_eq!(answer["delivered"], true);
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");

    let all = env.get(&format!("/threads/{thread_id}/messages")).await;
    let all = all.as_array().unwrap().clone();
    assert!(all.len() >= 4, "{all:?}");
    let pages = env
        .get_pages(&format!("/threads/{thread_id}/messages"), 2)
        .await;
    assert_eq!(
        pages.len(),
        all.len().div_ceil(2) + usize::from(all.len() % 2 == 0)
    );
    let paged: Vec<Value> = pages.concat();
    assert_eq!(paged, all, "the pages are the conversation, in order");

    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    let journal = journal.as_array().unwrap().clone();
    let first_two = env.get(&format!("/runs/{run_id}/journal?limit=2")).await;
    assert_eq!(first_two.as_array().unwrap()[..], journal[..2]);
    let rest = env
        .get(&format!("/runs/{run_id}/journal?after=1&limit=1000"))
        .await;
    assert_eq!(rest.as_array().unwrap()[..], journal[2..]);
    let pages = env.get_pages(&format!("/runs/{run_id}/journal"), 3).await;
    assert_eq!(pages.concat(), journal);
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    assert_eq!(
        env.get_pages(&format!("/threads/{thread_id}/events"), 1000)
            .await
            .concat(),
        *events.as_array().unwrap()
    );

    for query in ["limit=0", "limit=1001", "limit=x", "after=-1", "after=x"] {
        for path in [
            format!("/threads/{thread_id}/messages?{query}"),
            format!("/runs/{run_id}/journal?{query}"),
        ] {
            let (status, body) = env.call("GET", &path, Some(ALICE), None).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        }
    }
    worker.stop().await.unwrap();
    env.finish().await;
}
