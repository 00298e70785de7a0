//! Messages to a busy thread (`onActive`), and edits of a past turn
//! (docs/conversations.md), on real Postgres and RabbitMQ.

use agentenkit_runtime::reaper::{reap_once, ReaperConfig};
use agentenkit_runtime::Registry;
use agentenkit_tests::providers::*;
use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::{json, Value};

/// An agent `agent` whose `tool` (http, at `url`) needs an approval,
/// playing `script`; `extra` goes into its table.
fn approving(script: &str, url: &str, extra: &str) -> Registry {
    Registry::from_toml(&format!(
        r#"
[agents.agent]
system = "test agent"
tools = ["tool"]
{extra}
model = {{ provider = "scripted", script = [ {script} ] }}

[tools.tool]
type = "http"
url = "{url}"
requires_confirmation = true
input_schema = {{ type = "object", properties = {{ to = {{ type = "string" }} }} }}
"#
    ))
    .expect("agent file")
}

/// An agent whose first step calls `lookup` (http, at `url`, read-only
/// when `read_only`), whose second waits for an approval of `gate`.
fn lookup_then_gate(url: &str, read_only: bool) -> Registry {
    Registry::from_toml(&format!(
        r#"
[agents.agent]
system = "test agent"
tools = ["lookup", "gate"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "lookup", arguments = {{ to = "a@b.c" }} }} ] }},
  {{ tool_calls = [ {{ id = "c2", name = "gate", arguments = {{}} }} ] }},
  {{ text = "Done." }},
] }}

[tools.lookup]
type = "http"
url = "{url}"
read_only = {read_only}

[tools.gate]
type = "echo"
requires_confirmation = true
"#
    ))
    .expect("agent file")
}

async fn post_message(env: &TestEnv, thread: &str, body: Value) -> (StatusCode, Value) {
    env.call(
        "POST",
        &format!("/threads/{thread}/messages"),
        Some(ALICE),
        Some(body),
    )
    .await
}

async fn approve_call(env: &TestEnv, run: &str, call: &str) -> Value {
    let (status, body) = env
        .call(
            "POST",
            "/agent/tool-call/approve",
            Some(ALICE),
            Some(json!({ "runId": run, "toolCallId": call })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// The user messages of the thread's conversation, in order.
async fn user_messages(env: &TestEnv, thread: &str) -> Vec<String> {
    env.get(&format!("/threads/{thread}/messages"))
        .await
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn twenty_messages_queued_at_once_behind_a_parked_run_each_run_once_in_order() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approving(CALL_THEN_DONE, &tool.url, "")).await;
    let worker = env.spawn_worker();
    let (thread, first) = env.start_turn("agent", "first").await;
    env.wait_pending(&thread, 1).await;

    let sends = (0..20).map(|i| {
        let env = &env;
        let thread = thread.clone();
        async move {
            let body = json!({ "content": format!("queued {i}"), "onActive": "enqueue" });
            post_message(env, &thread, body).await
        }
    });
    let accepted = futures::future::join_all(sends).await;
    let mut runs = Vec::new();
    for (status, body) in &accepted {
        assert_eq!(*status, StatusCode::ACCEPTED, "{body}");
        assert_eq!(body["queued"], true, "{body}");
        runs.push(body["runId"].as_str().unwrap().to_owned());
    }
    // The order the API accepted them in: the queue's.
    let view = env.get(&format!("/threads/{thread}")).await;
    let queued: Vec<String> = view["queuedMessages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["runId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(queued.len(), 20);
    let mut sorted = queued.clone();
    sorted.sort();
    runs.sort();
    assert_eq!(sorted, runs, "every accepted message is queued once");
    assert_eq!(view["status"], "WAITING_FOR_INPUT");
    assert_eq!(view["currentRunId"], first.as_str());

    // Each turn starts only when the one before it ended, in queue order.
    let mut order = vec![first.clone()];
    order.extend(queued.iter().cloned());
    for run in &order {
        let pending = env.wait_pending(&thread, 1).await;
        assert_eq!(pending[0]["runId"], run.as_str(), "turns run in order");
        approve_call(&env, run, "c1").await;
        assert_eq!(env.wait_run_finished(run).await["status"], "completed");
    }
    env.wait_status(&thread, "IDLE").await;
    assert_eq!(tool.calls(), 21, "each turn's tool ran once");
    let mut expected = vec!["first".to_owned()];
    expected.extend(queued.iter().map(|run| {
        let i = view["queuedMessages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["runId"] == run.as_str())
            .unwrap();
        i["content"].as_str().unwrap().to_owned()
    }));
    assert_eq!(user_messages(&env, &thread).await, expected);
    let started: Vec<i64> = env
        .rows(
            &format!(
                "SELECT count(*) FROM events WHERE thread_id = '{thread}' AND type = 'RUN_STARTED'"
            ),
            |r| r.get(0),
        )
        .await;
    assert_eq!(started, [21], "no turn started twice");
    let queued_events = env
        .event_types(&thread)
        .await
        .into_iter()
        .filter(|t| t == "MESSAGE_QUEUED")
        .count();
    assert_eq!(queued_events, 20, "each queued message told once");
    assert!(env.get(&format!("/threads/{thread}")).await["queuedMessages"].is_null());
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn an_agent_that_enqueues_by_default_queues_a_message_that_does_not_say() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approving(
        CALL_THEN_DONE,
        &tool.url,
        r#"on_active = "enqueue""#,
    ))
    .await;
    let worker = env.spawn_worker();
    let (thread, first) = env.start_turn("agent", "first").await;
    env.wait_pending(&thread, 1).await;
    let (status, body) = post_message(&env, &thread, json!({ "content": "next" })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["queued"], true);
    let next = body["runId"].as_str().unwrap().to_owned();
    // Saying so still refuses.
    let (status, body) = post_message(
        &env,
        &thread,
        json!({ "content": "now?", "onActive": "reject" }),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "RunActive");
    // A stop ends the run; the queued message is the person's own and
    // starts.
    env.post(&format!("/threads/{thread}/stop"), json!({}))
        .await;
    assert_eq!(env.wait_run_finished(&first).await["status"], "cancelled");
    let pending = env.wait_pending(&thread, 1).await;
    assert_eq!(pending[0]["runId"], next.as_str());
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn an_interrupt_while_an_approval_waits_moves_the_thread_on() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approving(CALL_THEN_DONE, &tool.url, "")).await;
    let worker = env.spawn_worker();
    let (thread, first) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread, 1).await;

    let (status, body) = post_message(
        &env,
        &thread,
        json!({ "content": "no, wait", "onActive": "interrupt" }),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["interrupted"], json!([first]));
    let second = body["runId"].as_str().unwrap().to_owned();
    assert!(body.get("queued").is_none());

    // The old request is no longer current: its answer changes nothing.
    let late = approve_call(&env, &first, "c1").await;
    assert_eq!(late["delivered"], false);
    assert_eq!(late["error"], "This request is no longer current");
    let pending = env.wait_pending(&thread, 1).await;
    assert_eq!(
        pending[0]["runId"],
        second.as_str(),
        "the new turn proceeds"
    );
    assert_eq!(tool.calls(), 0, "the interrupted call never ran");
    let run = env.get(&format!("/runs/{first}")).await;
    assert_eq!(run["status"], "cancelled");
    let events = env.get(&format!("/threads/{thread}/events")).await;
    let cancelled = first_event(&events, "RUN_CANCELLED");
    assert_eq!(cancelled["data"]["reason"], "interrupted");
    // What it did stays in the conversation.
    assert_eq!(user_messages(&env, &thread).await, ["send it", "no, wait"]);
    let metrics = env.metrics_text().await;
    assert!(
        metrics.contains(r#"agentenkit_turn_messages_total{outcome="interrupted"} 1"#),
        "{metrics}"
    );

    approve_call(&env, &second, "c1").await;
    assert_eq!(env.wait_run_finished(&second).await["status"], "completed");
    assert_eq!(tool.calls(), 1);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_rollback_is_refused_after_a_side_effect_and_cuts_a_run_that_only_read() {
    for read_only in [false, true] {
        let tool = ToolServer::ok().await;
        let env = TestEnv::start(lookup_then_gate(&tool.url, read_only)).await;
        let worker = env.spawn_worker();
        let (thread, first) = env.start_turn("agent", "look it up").await;
        env.wait_pending(&thread, 1).await;
        assert_eq!(tool.calls(), 1, "the lookup ran before the gate");
        let before = env.get(&format!("/threads/{thread}/messages")).await;

        let (status, body) = post_message(
            &env,
            &thread,
            json!({ "content": "start over", "onActive": "rollback" }),
        )
        .await;
        if !read_only {
            assert_eq!(status, StatusCode::CONFLICT, "{body}");
            assert_eq!(body["error"], "SideEffects");
            assert!(body["message"].as_str().unwrap().contains("lookup"));
            // Nothing changed.
            let view = env.get(&format!("/threads/{thread}")).await;
            assert_eq!(view["currentRunId"], first.as_str());
            assert_eq!(view["status"], "WAITING_FOR_INPUT");
            assert_eq!(
                env.get(&format!("/threads/{thread}/messages")).await,
                before
            );
            worker.stop().await.unwrap();
            env.finish().await;
            continue;
        }
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert_eq!(body["interrupted"], json!([first]));
        let second = body["runId"].as_str().unwrap().to_owned();
        // The rolled-back run left the conversation; its events stay.
        let messages = env.get(&format!("/threads/{thread}/messages")).await;
        assert!(messages
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["runId"] == second.as_str()));
        assert_eq!(user_messages(&env, &thread).await, ["start over"]);
        let events = env.get(&format!("/threads/{thread}/events")).await;
        assert_eq!(
            first_event(&events, "RUN_CANCELLED")["data"]["reason"],
            "rolled back"
        );
        let gate = approve_call(&env, &first, "c2").await;
        assert_eq!(gate["delivered"], false);
        worker.stop().await.unwrap();
        env.finish().await;
    }
}

#[tokio::test]
async fn an_edit_cuts_the_thread_back_and_the_model_sees_the_edited_turn() {
    let fake = FakeProvider::start(
        Wire::OpenAi,
        vec![
            openai_text("Hello."),
            openai_calls(&[("c1", "tool", r#"{"to":"wrong@b.c"}"#)]),
            openai_calls(&[("c1", "tool", r#"{"to":"right@b.c"}"#)]),
            openai_text("Sent."),
        ],
    )
    .await;
    let tool = ToolServer::ok().await;
    let registry = Registry::from_toml(&format!(
        r#"
[agents.agent]
tools = ["tool"]
model = {{ provider = "openai", model = "m", base_url = "{}", api_key_env = "AGENTENKIT_TEST_KEY_NOBODY_SETS" }}

[tools.tool]
type = "http"
url = "{}"
requires_confirmation = true
input_schema = {{ type = "object", properties = {{ to = {{ type = "string" }} }} }}
"#,
        fake.url, tool.url
    ))
    .unwrap();
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (thread, first) = env.start_turn("agent", "hi").await;
    assert_eq!(env.wait_run_finished(&first).await["status"], "completed");
    let (status, body) = post_message(&env, &thread, json!({ "content": "mail wrong@b.c" })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let second = body["runId"].as_str().unwrap().to_owned();
    env.wait_pending(&thread, 1).await;

    let messages = env.get(&format!("/threads/{thread}/messages")).await;
    let edited = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"] == "mail wrong@b.c")
        .unwrap()["id"]
        .clone();
    let hello = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap()["id"]
        .clone();

    // Only a turn's user message can be edited.
    let path = |id: &Value| format!("/threads/{thread}/messages/{id}/edit");
    let edit = json!({ "content": "mail right@b.c" });
    let (status, body) = env
        .call("POST", &path(&hello), Some(ALICE), Some(edit.clone()))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "NotAUserMessage");
    let (status, _) = env
        .call(
            "POST",
            &path(&json!(999_999)),
            Some(ALICE),
            Some(edit.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = env
        .call("POST", &path(&edited), Some(BOB), Some(edit.clone()))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another owner's thread");

    let (status, body) = env
        .call("POST", &path(&edited), Some(ALICE), Some(edit.clone()))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["interrupted"], json!([second]));
    let third = body["runId"].as_str().unwrap().to_owned();
    // The request the edit cut away is no longer current.
    let late = approve_call(&env, &second, "c1").await;
    assert_eq!(late["delivered"], false);
    assert_eq!(late["error"], "This request is no longer current");
    let pending = env.wait_pending(&thread, 1).await;
    assert_eq!(pending[0]["runId"], third.as_str());
    assert_eq!(pending[0]["arguments"], json!({ "to": "right@b.c" }));
    // The model saw the conversation up to the edit, then the edited text.
    let sent = fake.accepted();
    let seen: Vec<(String, Value)> = sent[2].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap().to_owned(), m["content"].clone()))
        .collect();
    assert_eq!(
        seen,
        [
            ("user".to_owned(), json!("hi")),
            ("assistant".to_owned(), json!("Hello.")),
            ("user".to_owned(), json!("mail right@b.c")),
        ]
    );
    assert_eq!(user_messages(&env, &thread).await, ["hi", "mail right@b.c"]);
    // An edited (cut) message cannot be edited again.
    let (status, _) = env
        .call("POST", &path(&edited), Some(ALICE), Some(edit))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    approve_call(&env, &third, "c1").await;
    assert_eq!(env.wait_run_finished(&third).await["status"], "completed");
    assert_eq!(tool.bodies().len(), 1);
    assert_eq!(tool.bodies()[0]["arguments"], json!({ "to": "right@b.c" }));
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_queued_turn_left_by_a_process_that_died_is_started_by_the_reaper() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approving(CALL_THEN_DONE, &tool.url, "")).await;
    let (thread, first) = env.start_turn("agent", "first").await;
    let worker = env.spawn_worker();
    env.wait_pending(&thread, 1).await;
    let (_, body) = post_message(
        &env,
        &thread,
        json!({ "content": "next", "onActive": "enqueue" }),
    )
    .await;
    let next = body["runId"].as_str().unwrap().to_owned();
    worker.stop().await.unwrap();
    // The run ends as if its process died right after the commit that
    // ended it, before it could start the queued turn.
    env.sql(&format!(
        "UPDATE runs SET status = 'failed', error = 'test', finished_at = now() WHERE id = '{first}'"
    ))
    .await;
    assert_eq!(
        env.get(&format!("/threads/{thread}")).await["queuedMessages"][0]["runId"],
        next.as_str()
    );
    // A message that waits for nothing does not jump the queue.
    let (status, body) = post_message(&env, &thread, json!({ "content": "me first" })).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["message"].as_str().unwrap().contains(&next), "{body}");
    // The reaper gives whoever ended the run a moment to start the queue.
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let report = reap_once(&env.reaper(), &ReaperConfig::default())
        .await
        .unwrap();
    assert_eq!(report.queued_turns_started, 1);
    // Once only.
    let again = reap_once(&env.reaper(), &ReaperConfig::default())
        .await
        .unwrap();
    assert_eq!(again.queued_turns_started, 0);
    let worker = env.spawn_worker();
    let pending = env.wait_pending(&thread, 1).await;
    assert_eq!(pending[0]["runId"], next.as_str());
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_rollback_is_refused_while_a_tool_with_side_effects_runs() {
    let tool = ToolServer::start_with_delay(std::time::Duration::from_millis(1500), |_, _| {
        (StatusCode::OK, json!({ "sent": true }))
    })
    .await;
    let env = TestEnv::start(registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread, first) = env.start_turn("agent", "send it").await;
    eventually("the tool runs", || async {
        (tool.calls() == 1).then_some(())
    })
    .await;
    let (status, body) = post_message(
        &env,
        &thread,
        json!({ "content": "never mind", "onActive": "rollback" }),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "SideEffects");
    assert_eq!(env.wait_run_finished(&first).await["status"], "completed");
    assert_eq!(tool.calls(), 1);
    worker.stop().await.unwrap();
    env.finish().await;
}

mod forks;
mod keys;
mod steering;
