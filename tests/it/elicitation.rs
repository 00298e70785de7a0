//! Asking the user through the model's ask tool: every row of the
//! reduction table and every answer rule (the intake is in `intake.rs`).

use agentenkit_runtime::Registry;
use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::{json, Value};

/// An agent offered the ask tool, whose model asks `set` (TOML) first.
fn ask_agent(set: &str) -> Registry {
    Registry::from_toml(&format!(
        r#"
[agents.agent]
ask = true
tools = ["tool"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "q1", name = "ask", arguments = {set} }} ] }},
  {{ text = "Done." }},
] }}
[tools.tool]
type = "http"
url = "http://127.0.0.1:9/"
requires_confirmation = true
"#
    ))
    .unwrap()
}

const VALID_SET: &str = r#"{ preamble = "Before I start", questions = [
  { id = "scope", prompt = "How wide?", options = [ { value = "module", label = "Module" }, { value = "repo", label = "Repo" } ], defaults = ["module"] },
  { id = "langs", prompt = "Languages?", multiple = true, options = [ { value = "rust", label = "Rust" }, { value = "go", label = "Go" } ], defaults = ["rust", "go"] },
] }"#;

pub(crate) fn target(input: &Value) -> Value {
    json!({ "runId": input["runId"], "toolCallId": input["toolCallId"] })
}

pub(crate) fn with(mut body: Value, key: &str, value: Value) -> Value {
    body[key] = value;
    body
}

/// The value journaled for the reply, and the model's view of it.
pub(crate) async fn settled(
    env: &TestEnv,
    thread_id: &str,
    run_id: &str,
    name: &str,
) -> (Value, Value) {
    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    let entry = journal
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {journal}"))
        .clone();
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    let tool = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    (entry["value"].clone(), tool["content"].clone())
}

#[tokio::test]
async fn the_ask_tool_parks_with_the_whole_request_and_answers_resolve_on_the_server() {
    let env = TestEnv::start(ask_agent(VALID_SET)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    let input = env.wait_pending(&thread_id, 1).await.remove(0);
    assert_eq!(input["kind"], "ask");
    assert_eq!(input["toolName"], "ask");
    assert_eq!(input["expiresAt"], Value::Null, "questions never expire");
    assert_eq!(
        input["request"]["questions"].as_array().unwrap().len(),
        2,
        "known before the form renders"
    );
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let frame = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "ELICITATION")
        .unwrap();
    assert_eq!(frame["data"]["runId"], run_id.as_str());
    assert_eq!(frame["data"]["request"], input["request"]);
    assert!(!events
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["type"] == "INPUT_REQUIRED"));
    let inbox = env.get("/agent/inbox").await;
    assert_eq!(
        inbox[0]["toolCallId"], "q1",
        "the inbox a deployment already has"
    );

    // Omitted `langs` takes its defaults and is recorded as defaulted.
    let (status, answer) = env
        .reply(
            "/agent/tool-call/answer",
            ALICE,
            with(target(&input), "answers", json!({ "scope": ["repo"] })),
        )
        .await;
    assert_eq!(
        (status, answer),
        (StatusCode::OK, json!({ "delivered": true }))
    );
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let tool_name = format!("tool:{run_id}:q1");
    assert_eq!(
        env.journal_names(&run_id).await,
        [
            "model:0",
            "persist:toolcall:q1",
            "stream:elicitation:q1",
            tool_name.as_str(),
            "model:1"
        ]
    );
    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    assert_eq!(journal[1]["value"]["kind"], "ask");
    let (reply, seen) = settled(&env, &thread_id, &run_id, &tool_name).await;
    assert_eq!(reply["status"], "executed");
    assert_eq!(
        reply["answers"],
        json!({ "scope": ["repo"], "langs": ["rust", "go"] })
    );
    assert_eq!(reply["defaulted"], json!(["langs"]));
    assert_eq!(reply["answeredBy"], "alice");
    assert_eq!(
        seen,
        json!({ "answers": { "scope": ["repo"], "langs": ["rust", "go"] }, "defaulted": ["langs"], "skipped": false })
    );
    let resolved = env.get(&format!("/threads/{thread_id}/events")).await;
    let resolved = resolved
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "INPUT_RESOLVED")
        .unwrap()
        .clone();
    assert_eq!(resolved["data"]["defaulted"], json!(["langs"]));
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn every_row_of_the_reduction_table_on_a_question_set() {
    let env = TestEnv::start(ask_agent(VALID_SET)).await;
    let worker = env.spawn_worker();
    let defaults = json!({ "scope": ["module"], "langs": ["rust", "go"] });
    let all = json!(["scope", "langs"]);
    // (reply path, body extra, expected status, answers, defaulted)
    let rows = [
        (
            "/agent/tool-call/approve",
            json!({}),
            "executed",
            defaults.clone(),
            all.clone(),
        ),
        (
            "/agent/tool-call/reject",
            json!({}),
            "rejected",
            defaults.clone(),
            all.clone(),
        ),
        (
            "/agent/tool-call/answer",
            json!({ "answers": { "scope": [], "langs": ["go"] } }),
            "executed",
            json!({ "scope": [], "langs": ["go"] }),
            json!([]),
        ),
        (
            "/agent/tool-call/skip",
            json!({}),
            "rejected",
            defaults.clone(),
            all.clone(),
        ),
    ];
    for (path, extra, status, answers, defaulted) in rows {
        let (thread_id, run_id) = env.start_turn("agent", path).await;
        let input = env.wait_pending(&thread_id, 1).await.remove(0);
        let mut body = target(&input);
        if let Value::Object(extra) = extra {
            body.as_object_mut().unwrap().extend(extra);
        }
        let (code, answer) = env.reply(path, ALICE, body).await;
        assert_eq!(
            (code, &answer),
            (StatusCode::OK, &json!({ "delivered": true })),
            "{path}"
        );
        assert_eq!(
            env.wait_run_finished(&run_id).await["status"],
            "completed",
            "{path}"
        );
        let (reply, seen) = settled(&env, &thread_id, &run_id, &format!("tool:{run_id}:q1")).await;
        assert_eq!(reply["status"], status, "{path}");
        assert_eq!(reply["answers"], answers, "{path}");
        assert_eq!(reply["defaulted"], defaulted, "{path}");
        assert_eq!(
            seen["skipped"],
            status == "rejected",
            "{path}: a skip is not a confirmation"
        );
    }
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn answers_or_skips_addressed_to_an_approval_are_409_and_record_nothing() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, _) = env.start_turn("agent", "go").await;
    let input = env.wait_pending(&thread_id, 1).await.remove(0);
    for (path, body) in [
        (
            "/agent/tool-call/answer",
            with(target(&input), "answers", json!({})),
        ),
        ("/agent/tool-call/skip", target(&input)),
    ] {
        let (status, answer) = env.reply(path, ALICE, body).await;
        assert_eq!(status, StatusCode::CONFLICT, "{path} {answer}");
        assert_eq!(answer["error"], "HumanReplyMismatchError");
    }
    let still = env.wait_pending(&thread_id, 1).await;
    assert_eq!(
        still[0]["toolCallId"], "c1",
        "the row keeps pending_approval"
    );
    assert!(!env
        .event_types(&thread_id)
        .await
        .contains(&"INPUT_RESOLVED".to_owned()));
    let (_, ok) = env
        .reply("/agent/tool-call/approve", ALICE, target(&input))
        .await;
    assert_eq!(
        ok["delivered"], true,
        "the approval it was always waiting for still works"
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn answers_that_do_not_fit_are_422_with_the_issues_and_record_nothing() {
    let env = TestEnv::start(ask_agent(VALID_SET)).await;
    let worker = env.spawn_worker();
    let (thread_id, _) = env.start_turn("agent", "go").await;
    let input = env.wait_pending(&thread_id, 1).await.remove(0);
    for (answers, path) in [
        (json!({ "nope": ["x"] }), "/answers/nope"),
        (json!({ "scope": ["galaxy"] }), "/answers/scope/0"),
        (json!({ "scope": ["module", "repo"] }), "/answers/scope"),
        (json!({ "scope": "module" }), "/answers/scope"),
        (json!(["scope"]), "/answers"),
    ] {
        let (status, body) = env
            .reply(
                "/agent/tool-call/answer",
                ALICE,
                with(target(&input), "answers", answers.clone()),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answers} {body}");
        assert_eq!(body["error"], "InvalidAnswers");
        assert_eq!(body["issues"][0]["path"], path, "{body}");
    }
    env.wait_pending(&thread_id, 1).await;
    assert!(!env
        .event_types(&thread_id)
        .await
        .contains(&"INPUT_RESOLVED".to_owned()));
    let (status, _) = env
        .reply(
            "/agent/tool-call/answer",
            BOB,
            with(target(&input), "answers", json!({})),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "same ownership check as approve"
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn an_invalid_question_set_is_a_tool_failure_the_model_recovers_from() {
    // No defaults on the question: the model must fix it; nobody is paged.
    let env = TestEnv::start(ask_agent(
        r#"{ questions = [ { id = "scope", prompt = "How wide?", options = [ { value = "a", label = "A" } ], defaults = [] } ] }"#,
    ))
    .await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed");
    assert_eq!(
        env.journal_names(&run_id).await,
        ["model:0", "persist:toolcall:q1", "exec:q1", "model:1"]
    );
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    let result = &messages[2]["content"];
    assert_eq!(result["error"], "invalid question set");
    assert_eq!(result["issues"][0]["path"], "/questions/0/defaults");
    assert!(env.get("/agent/inbox").await.as_array().unwrap().is_empty());
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_models_question_cannot_carry_a_link() {
    // A link is a server's or the file's to show: a model told by a page
    // it read to send the person somewhere is refused, and nobody is asked.
    let env = TestEnv::start(ask_agent(
        r#"{ questions = [ { id = "go", prompt = "Sign in", link = "https://evil.example/login", options = [ { value = "done", label = "Done" } ], defaults = ["done"] } ] }"#,
    ))
    .await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    let result = &messages[2]["content"];
    assert_eq!(result["error"], "invalid question set", "{result}");
    assert_eq!(result["issues"][0]["path"], "/questions/0/link");
    assert!(env.get("/agent/inbox").await.as_array().unwrap().is_empty());
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_sub_agents_question_shows_on_the_root_stream_with_the_childs_run_id() {
    let registry = Registry::from_toml(&format!(
        r#"
[agents.root]
subagents = ["scoper"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "d1", name = "scoper", arguments = {{ task = "scope it" }} }} ] }},
  {{ text = "root done" }},
] }}
[agents.scoper]
ask = true
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "q1", name = "ask", arguments = {VALID_SET} }} ] }},
  {{ text = "scoped" }},
] }}
"#
    ))
    .unwrap();
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (thread_id, root_run) = env.start_turn("root", "go").await;
    let input = env.wait_pending(&thread_id, 1).await.remove(0);
    assert_eq!(input["runName"], "scoper");
    assert_eq!(input["depth"], 1);
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let frame = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "ELICITATION")
        .unwrap();
    assert_eq!(frame["data"]["runId"], input["runId"]);
    assert_ne!(frame["data"]["runId"], root_run.as_str());
    assert_eq!(frame["data"]["runName"], "scoper");
    env.reply("/agent/tool-call/approve", ALICE, target(&input))
        .await;
    let root = env.wait_run_finished(&root_run).await;
    assert_eq!(root["output"], "root done");
    worker.stop().await.unwrap();
    env.finish().await;
}
