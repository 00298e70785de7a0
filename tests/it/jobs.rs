//! Tools that park themselves: a job on another system, resumed by a
//! webhook's respond.

use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::{json, Value};

/// An http tool that starts a "job" and parks on its first call, and
/// returns what respond delivered on its second.
async fn job_tool(ttl_ms: Option<u64>) -> ToolServer {
    ToolServer::start(move |n, body| {
        if body["approval"].is_null() {
            let mut park = json!({ "reason": "job", "payload": { "jobId": format!("job-{n}") } });
            if let Some(ttl) = ttl_ms {
                park["ttlMs"] = json!(ttl);
            }
            (StatusCode::OK, json!({ "park": park }))
        } else {
            (
                StatusCode::OK,
                json!({ "rendered": body["approval"]["payload"] }),
            )
        }
    })
    .await
}

fn pending(thread: &Value) -> &Value {
    &thread["pendingInputs"][0]
}

#[tokio::test]
async fn a_job_parks_and_a_webhook_respond_resumes_the_same_call_with_its_result() {
    let tool = job_tool(Some(600_000)).await;
    let env = TestEnv::start(registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "render it").await;
    env.wait_pending(&thread_id, 1).await;
    let thread = env.get(&format!("/threads/{thread_id}")).await;
    let input = pending(&thread);
    assert_eq!(input["reason"], "job");
    assert_eq!(input["kind"], "park");
    assert_eq!(
        input["arguments"],
        json!({ "jobId": "job-1" }),
        "the payload is the request's arguments"
    );
    let expires_in = chrono::DateTime::parse_from_rfc3339(input["expiresAt"].as_str().unwrap())
        .unwrap()
        .to_utc()
        - chrono::Utc::now();
    assert!(
        expires_in.num_seconds() > 500,
        "the park's own ttlMs: {expires_in}"
    );
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let required = first_event(&events, "INPUT_REQUIRED");
    assert_eq!(required["data"]["reason"], "job");
    assert_eq!(required["data"]["arguments"], json!({ "jobId": "job-1" }));

    // The job finishes elsewhere; its webhook handler calls respond.
    let (_, answer) = env
        .reply(
            "/agent/hitl/respond",
            ALICE,
            json!({ "threadId": thread_id, "toolCallId": "c1", "approved": true, "payload": { "url": "s3://frame.png" } }),
        )
        .await;
    assert_eq!(answer, json!({ "delivered": true }));
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 2, "first call parked, second call finished");
    assert_eq!(
        tool.bodies()[1]["approval"],
        json!({ "approved": true, "payload": { "url": "s3://frame.png" } })
    );
    assert_eq!(
        tool.bodies()[0]["idempotencyKey"],
        tool.bodies()[1]["idempotencyKey"]
    );
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    assert_eq!(
        messages[2]["content"],
        json!({ "rendered": { "url": "s3://frame.png" } })
    );
    let tool_entry = format!("tool:{run_id}:c1");
    assert_eq!(
        env.journal_names(&run_id).await,
        [
            "model:0",
            "persist:toolcall:c1",
            tool_entry.as_str(),
            "exec:c1",
            "model:1"
        ]
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_job_that_outlives_its_ttl_resumes_as_expired() {
    let tool = job_tool(Some(800)).await;
    let env = TestEnv::start(registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "render it").await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(
        tool.calls(),
        1,
        "the expired job's tool is not called again"
    );
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    assert_eq!(
        messages[2]["content"],
        json!({ "denied": true, "reason": "user had no response, action cancelled" })
    );
    let (_, late) = env
        .reply(
            "/agent/hitl/respond",
            ALICE,
            json!({ "threadId": thread_id, "toolCallId": "c1", "approved": true }),
        )
        .await;
    assert_eq!(late["error"], "This request has expired");
    worker.stop().await.unwrap();
    env.finish().await;
}

/// A tool's park with a NUL in its reason and payload parks with the NUL
/// replaced (Postgres cannot store it; the step would fail each retry).
#[tokio::test]
async fn a_park_with_a_nul_in_its_words_parks_cleaned() {
    let tool = ToolServer::start(|_, _| {
        (
            StatusCode::OK,
            json!({ "park": { "reason": "job\u{0}", "payload": { "id\u{0}": ["a\u{0}"] } } }),
        )
    })
    .await;
    let env = TestEnv::start(registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, _) = env.start_turn("agent", "render it").await;
    let input = env.wait_pending(&thread_id, 1).await.remove(0);
    assert_eq!(input["reason"], "job\u{FFFD}");
    assert_eq!(input["arguments"], json!({ "id\u{FFFD}": ["a\u{FFFD}"] }));
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_resumed_call_that_parks_again_is_a_tool_error_the_model_sees() {
    let tool = ToolServer::start(|n, _| {
        (
            StatusCode::OK,
            json!({ "park": { "reason": "job", "payload": { "n": n } } }),
        )
    })
    .await;
    let env = TestEnv::start(registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "render it").await;
    env.wait_pending(&thread_id, 1).await;
    env.reply(
        "/agent/hitl/respond",
        ALICE,
        json!({ "threadId": thread_id, "toolCallId": "c1", "approved": true }),
    )
    .await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 2);
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    assert!(
        messages[2]["content"]["error"]
            .as_str()
            .unwrap()
            .contains("parked again"),
        "{}",
        messages[2]
    );
    let thread = env.wait_status(&thread_id, "IDLE").await;
    assert_eq!(thread["pendingInputs"], json!([]), "no second park");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn rejecting_a_job_is_a_denial_and_the_tool_does_not_run_again() {
    let tool = job_tool(None).await;
    let env = TestEnv::start(registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "render it").await;
    env.wait_pending(&thread_id, 1).await;
    let (_, answer) = env
        .reply(
            "/agent/hitl/respond",
            ALICE,
            json!({ "threadId": thread_id, "toolCallId": "c1", "approved": false, "payload": { "reason": "render farm down" } }),
        )
        .await;
    assert_eq!(answer["delivered"], true);
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 1);
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    assert_eq!(
        messages[2]["content"],
        json!({ "denied": true, "reason": "render farm down" })
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

/// A job tool, a plain tool and a marked tool, for replay across steps.
fn mixed(job: &str, plain: &str, marked: &str, script: &str) -> agentenkit_runtime::Registry {
    agentenkit_runtime::Registry::from_toml(&format!(
        r#"
[agents.agent]
tools = ["job", "plain", "marked"]
model = {{ provider = "scripted", script = [ {script} ] }}
[tools.job]
type = "http"
url = "{job}"
[tools.plain]
type = "http"
url = "{plain}"
[tools.marked]
type = "http"
url = "{marked}"
requires_confirmation = true
"#
    ))
    .unwrap()
}

#[tokio::test]
async fn a_job_beside_another_call_in_its_step_replays_deterministically() {
    let job = job_tool(None).await;
    let plain = ToolServer::ok().await;
    let script = r#"
      { tool_calls = [ { id = "c1", name = "job", arguments = {} }, { id = "c2", name = "plain", arguments = {} } ] },
      { text = "Done." },
    "#;
    let env = TestEnv::start(mixed(&job.url, &plain.url, &plain.url, script)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;
    assert_eq!(
        plain.calls(),
        1,
        "the plain call of the step ran before the park"
    );
    env.reply(
        "/agent/hitl/respond",
        ALICE,
        json!({ "threadId": thread_id, "toolCallId": "c1", "approved": true, "payload": 7 }),
    )
    .await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let tool_entry = format!("tool:{run_id}:c1");
    assert_eq!(
        env.journal_names(&run_id).await,
        [
            "model:0",
            "persist:toolcall:c1",
            "persist:toolcall:c2",
            "exec:c2",
            tool_entry.as_str(),
            "exec:c1",
            "model:1"
        ]
    );
    assert_eq!((job.calls(), plain.calls()), (2, 1), "nothing ran twice");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_run_that_parked_on_a_job_replays_through_it_when_it_parks_again_later() {
    let job = job_tool(None).await;
    let marked = ToolServer::ok().await;
    let script = r#"
      { tool_calls = [ { id = "c1", name = "job", arguments = {} } ] },
      { tool_calls = [ { id = "c2", name = "marked", arguments = {} } ] },
      { text = "Done." },
    "#;
    let env = TestEnv::start(mixed(&job.url, &marked.url, &marked.url, script)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;
    env.reply(
        "/agent/hitl/respond",
        ALICE,
        json!({ "threadId": thread_id, "toolCallId": "c1", "approved": true }),
    )
    .await;
    let pending = env.wait_pending(&thread_id, 1).await;
    assert_eq!(pending[0]["toolCallId"], "c2");
    env.reply(
        "/agent/tool-call/approve",
        ALICE,
        json!({ "runId": run_id, "toolCallId": "c2" }),
    )
    .await;
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!((job.calls(), marked.calls()), (2, 1));
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_model_that_reuses_a_call_id_fails_the_run_with_a_clear_error() {
    let plain = ToolServer::ok().await;
    // The last entry repeats past the end: c1 again at model:1.
    let script = r#"{ tool_calls = [ { id = "c1", name = "plain", arguments = {} } ] }"#;
    let env = TestEnv::start(mixed(&plain.url, &plain.url, &plain.url, script)).await;
    let worker = env.spawn_worker();
    let (_, run_id) = env.start_turn("agent", "go").await;
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "failed");
    assert!(
        run["error"]
            .as_str()
            .unwrap()
            .contains("reused tool call id \"c1\""),
        "{run}"
    );
    assert_eq!(plain.calls(), 1);
    worker.stop().await.unwrap();
    env.finish().await;
}
