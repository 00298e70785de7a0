//! What a server lists is part of the version: a server deployed again
//! with another schema makes a new version, and a run parked on the old
//! one finishes on the schema it started with.

use std::sync::Arc;

use agentenkit::agents::AgentsCommand;
use agentenkit_tests::*;
use serde_json::json;

use super::*;

const CLOSE: &str = r#"
  { tool_calls = [ { id = "c1", name = "tickets/close_ticket", arguments = { id = "T-9" } } ] },
  { text = "Done." },
"#;

/// The tickets server over stdio, its schema read from `schema`;
/// `more` lines in its table.
fn tickets_with_schema(log: &CallLog, schema: &std::path::Path, more: &str) -> String {
    format!(
        "[mcp.tickets]\ntransport = \"stdio\"\ncommand = {:?}\nargs = [{:?}, \"stdio\", {:?}, {:?}]\n{more}\n",
        python(),
        tickets_script(),
        log.path(),
        schema.display().to_string()
    )
}

/// What `agentenkit agents versions agent` says, once it lists two
/// versions with the tickets server's listing.
async fn two_listings(env: &TestEnv) -> String {
    eventually("two versions with their listings are recorded", || async {
        let (listed, _) = AgentsCommand::Versions {
            name: "agent".into(),
        }
        .run(&env.store)
        .await
        .unwrap();
        (listed.matches("mcp tickets  listed").count() == 2).then_some(listed)
    })
    .await
}

/// The parked `c1` of `run_id` refuses an edit only the new schema
/// allows, and runs once approved as proposed; the finished run.
async fn finishes_on_its_schema(env: &TestEnv, run_id: &str) -> serde_json::Value {
    let (status, refused) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1", "arguments": { "ticket": "T-9" } }),
        )
        .await;
    assert_eq!(status.as_u16(), 422, "{refused}");
    assert_eq!(
        approve(env, run_id, "c1").await,
        json!({ "delivered": true })
    );
    env.wait_run_finished(run_id).await
}

#[tokio::test]
async fn a_schema_change_makes_a_new_version_and_a_parked_run_keeps_its_schema() {
    let log = CallLog::new();
    let schema = std::env::temp_dir().join(format!("aek-schema-{}", uuid::Uuid::now_v7()));
    std::fs::write(&schema, "v1").unwrap();
    let v1 = load(&agent_file(
        "\"tickets/close_ticket\"",
        CLOSE,
        &tickets_with_schema(&log, &schema, ""),
    ))
    .await;
    let v1_hash = v1.agent_version("agent").unwrap().hash.clone();
    let env = TestEnv::start(v1).await;
    let old = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "close T-9").await;
    env.wait_pending(&thread_id, 1).await;
    old.stop().await.unwrap();

    // The server is deployed again with a new schema, and so are the
    // workers. (Another limit makes this process open another session,
    // as a new worker process would; the connection is the same.)
    std::fs::write(&schema, "v2").unwrap();
    let v2 = load(&agent_file(
        "\"tickets/close_ticket\"",
        CLOSE,
        &tickets_with_schema(&log, &schema, "max_response_bytes = 1048575"),
    ))
    .await;
    let v2_hash = v2.agent_version("agent").unwrap().hash.clone();
    assert_ne!(v1_hash, v2_hash, "the server's new schema is a new version");
    let spec = &v2.tool("tickets/close_ticket").unwrap().spec;
    assert!(spec.input_schema["properties"]["ticket"].is_object());
    let v2 = Arc::new(v2);
    let new = env.spawn_worker_of(v2.clone());
    let api = env.serve_api_of(v2).await;

    // An edit the new schema allows, the run's own refuses: the parked
    // run keeps the schema it started with (its call goes to the session
    // it started with here; a new process would meet the new server, and
    // the model would see what it says).
    let run = finishes_on_its_schema(&env, &run_id).await;
    assert_eq!(run["status"], "completed");
    assert_eq!(run["agentVersion"], v1_hash.as_str());
    assert_eq!(
        log.calls_of("close_ticket")[0]["arguments"],
        json!({ "id": "T-9" })
    );

    // A new turn through the new deploy's API starts on the new version.
    let (status, thread) = env
        .send(
            env.http
                .post(api.url("/threads"))
                .bearer_auth(ALICE)
                .json(&json!({ "agent": "agent" })),
        )
        .await;
    assert_eq!(status.as_u16(), 201, "{thread}");
    let thread = thread["id"].as_str().unwrap().to_owned();
    let (_, started) = env
        .send(
            env.http
                .post(api.url(&format!("/threads/{thread}/messages")))
                .bearer_auth(ALICE)
                .json(&json!({ "content": "close T-9 again" })),
        )
        .await;
    let run = env
        .get(&format!("/runs/{}", started["runId"].as_str().unwrap()))
        .await;
    assert_eq!(run["agentVersion"], v2_hash.as_str());
    // The operator sees both versions, and that the server's listing
    // changed between them.
    let listed = two_listings(&env).await;
    let listings: Vec<&str> = listed
        .lines()
        .filter(|l| l.contains("mcp tickets"))
        .collect();
    assert_ne!(listings[0], listings[1], "{listed}");
    assert!(listings[0].contains("close_ticket"), "{listed}");
    api.stop().await;
    new.stop().await.unwrap();
    let _ = std::fs::remove_file(&schema);
    env.finish().await;
}

#[tokio::test]
async fn a_server_that_says_its_tools_changed_makes_a_new_version_at_once() {
    let log = CallLog::new();
    let text = format!(
        r#"
[agents.agent]
tools = ["tickets/close_ticket"]
model = {{ provider = "scripted", script = [{CLOSE}] }}

[agents.deployer]
tools = ["tickets/redeploy"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "d1", name = "tickets/redeploy", arguments = {{}} }} ] }},
  {{ text = "Deployed." }},
] }}

{}"#,
        tickets_stdio(&log, "")
    );
    let v1 = load(&text).await;
    let v1_hash = v1.agent_version("agent").unwrap().hash.clone();
    let env = TestEnv::start(v1).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "close T-9").await;
    env.wait_pending(&thread_id, 1).await;

    // The server changes close_ticket's schema while the run is parked,
    // and says so: no process restarts.
    let (_, deploy) = env.start_turn("deployer", "deploy").await;
    assert_eq!(env.wait_run_finished(&deploy).await["status"], "completed");
    let listed = two_listings(&env).await;
    assert!(listed.contains("ticket"), "{listed}");

    // New turns start on it (the API re-listed too) ...
    let v2_hash = eventually("a new turn starts on the new version", || async {
        let (_, run) = env.start_turn("agent", "close T-9 again").await;
        let version = env.get(&format!("/runs/{run}")).await["agentVersion"].clone();
        env.post(
            &format!(
                "/threads/{}/stop",
                env.get(&format!("/runs/{run}")).await["threadId"]
                    .as_str()
                    .unwrap()
            ),
            json!({}),
        )
        .await;
        (version != json!(v1_hash)).then_some(version)
    })
    .await;
    assert!(v2_hash.is_string(), "{v2_hash}");
    // ... and the parked run keeps the schema it started with.
    let run = finishes_on_its_schema(&env, &run_id).await;
    assert_eq!(run["agentVersion"], v1_hash.as_str());
    let metrics = env.metrics_text().await;
    assert!(
        metrics.contains("agentenkit_relisted_versions_total"),
        "{metrics}"
    );
    worker.stop().await.unwrap();
    env.finish().await;
}
