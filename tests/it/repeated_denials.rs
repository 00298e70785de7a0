//! A call a person denied, proposed again with the same arguments in the
//! same run, is refused without asking them again (unless the tool says to
//! ask every time); the refusal is journaled, so replay agrees with it.

use std::sync::Arc;

use agentenkit_runtime::Registry;
use agentenkit_tests::*;
use serde_json::{json, Value};

/// Proposes c1, then the same call again as c2 (its keys in another order),
/// then another call c3, then finishes.
const ASKS_AGAIN: &str = r#"
  { tool_calls = [ { id = "c1", name = "tool", arguments = { to = "a@b.c", subject = "hi" } } ] },
  { tool_calls = [ { id = "c2", name = "tool", arguments = { subject = "hi", to = "a@b.c" } } ] },
  { tool_calls = [ { id = "c3", name = "tool", arguments = { to = "other@b.c" } } ] },
  { text = "Done." },
"#;

fn registry(script: &str, url: &str, refuse_repeated_denials: bool) -> Registry {
    Registry::from_toml(&format!(
        r#"
[agents.agent]
system = "test agent"
tools = ["tool"]
model = {{ provider = "scripted", script = [ {script} ] }}

[tools.tool]
type = "http"
url = "{url}"
requires_confirmation = true
refuse_repeated_denials = {refuse_repeated_denials}
"#
    ))
    .expect("test registry")
}

/// What the model read for call `id`.
async fn tool_content(env: &TestEnv, thread_id: &str, id: &str) -> Value {
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["toolCallId"] == id)
        .unwrap_or_else(|| panic!("no tool message for {id} in {messages}"))["content"]
        .clone()
}

async fn deny_c1(env: &TestEnv, run_id: &str) {
    let (_, answer) = env
        .reply(
            "/agent/tool-call/reject",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1", "reason": "not to a@b.c" }),
        )
        .await;
    assert_eq!(answer["delivered"], true, "{answer}");
}

#[tokio::test]
async fn a_denied_call_proposed_again_is_refused_without_asking_and_replay_agrees() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(registry(ASKS_AGAIN, &tool.url, true)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    deny_c1(&env, &run_id).await;

    // c2 is never asked: the next request is c3.
    let pending = env.wait_pending(&thread_id, 1).await;
    assert_eq!(pending[0]["toolCallId"], "c3");
    assert_eq!(
        tool_content(&env, &thread_id, "c2").await,
        json!({
            "denied": true,
            "reason": "not to a@b.c",
            "repeated": true,
            "deniedCallId": "c1",
            "note": "the user already denied this exact call in this run; it was not asked again",
        })
    );
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let asked: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "INPUT_REQUIRED")
        .map(|e| &e["data"]["toolCallId"])
        .collect();
    assert_eq!(asked, [&json!("c1"), &json!("c3")]);
    assert!(
        env.metrics_text()
            .await
            .contains("agentenkit_repeated_denials_total 1"),
        "the refusal is counted"
    );

    // A new deploy that would ask again resumes the run: the journaled
    // refusal stands (no journal mismatch, c2 not asked).
    worker.stop().await.unwrap();
    let new = env.spawn_worker_of(Arc::new(registry(ASKS_AGAIN, &tool.url, false)));
    let (_, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c3" }),
        )
        .await;
    assert_eq!(answer["delivered"], true);
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(tool.calls(), 1, "only c3 ran");
    assert_eq!(tool.bodies()[0]["arguments"]["to"], "other@b.c");
    let journal = env.journal_names(&run_id).await;
    assert!(journal.contains(&"exec:c2".to_owned()), "{journal:?}");
    assert!(!journal
        .iter()
        .any(|n| n.ends_with(":c2") && n.starts_with("tool:")));
    new.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_worker_dying_around_the_refusal_refuses_the_same_call_once() {
    for point in ["before:exec:c2", "exec:c2"] {
        let tool = ToolServer::ok().await;
        let env = TestEnv::start(registry(ASKS_AGAIN, &tool.url, true)).await;
        let parker = env.spawn_worker();
        let (thread_id, run_id) = env.start_turn("agent", "send it").await;
        env.wait_pending(&thread_id, 1).await;
        parker.stop().await.unwrap();
        deny_c1(&env, &run_id).await;

        let crashing = env.spawn_crashing_worker(point);
        assert!(
            crashing.died().await.is_err(),
            "{point}: the crash point fired"
        );
        let worker = env.spawn_worker();
        let pending = env.wait_pending(&thread_id, 1).await;
        assert_eq!(pending[0]["toolCallId"], "c3", "{point}");
        assert_eq!(
            tool_content(&env, &thread_id, "c2").await["repeated"],
            true,
            "{point}"
        );
        let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
        let c2_results = messages
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool" && m["toolCallId"] == "c2")
            .count();
        assert_eq!(c2_results, 1, "{point}: one result for c2");
        worker.stop().await.unwrap();
        env.finish().await;
    }
}

#[tokio::test]
async fn a_tool_set_to_ask_every_time_asks_again() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(registry(ASKS_AGAIN, &tool.url, false)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    deny_c1(&env, &run_id).await;

    let pending = env.wait_pending(&thread_id, 1).await;
    assert_eq!(pending[0]["toolCallId"], "c2", "asked again");
    let (_, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c2" }),
        )
        .await;
    assert_eq!(answer["delivered"], true);
    let pending = env.wait_pending(&thread_id, 1).await;
    assert_eq!(pending[0]["toolCallId"], "c3");
    assert_eq!(tool.calls(), 1, "c2 ran once approved");
    worker.stop().await.unwrap();
    env.finish().await;
}
