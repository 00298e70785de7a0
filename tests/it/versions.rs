//! Deploys never change a run under a person's feet: a run continues on
//! the version of its agent it started on, whatever the agent file says
//! by the time the person answers.

use std::sync::Arc;

use agentenkit::agents::AgentsCommand;
use agentenkit_runtime::Registry;
use agentenkit_tests::*;
use serde_json::json;

/// The agent file of the deploy: `mailer` with one approval tool.
fn mailer(tool: &str, system: &str, done: &str, url: &str) -> Registry {
    mailer_deploy(tool, system, done, url, "pin")
}

/// A run parks on `send_email`; the agent file is redeployed with the tool
/// renamed `send_mail` (the same service), a new prompt and a new script;
/// the person then approves. The approval is honoured by v1's tool and the
/// run ends with v1's script, on the version it recorded when it started.
/// (A deploy that no longer names v1's URL does not send for v1: see
/// `unserved::a_stored_version_sending_where_the_deployment_does_not_is_not_served`.)
#[tokio::test]
async fn a_parked_run_finishes_on_its_version_after_a_deploy_renames_its_tool() {
    let v1_tool = ToolServer::ok().await;
    let v1 = mailer("send_email", "v1", "Done v1.", &v1_tool.url);
    let v1_hash = v1.agent_version("mailer").expect("a version").hash.clone();
    let env = TestEnv::start(v1).await;
    let old = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("mailer", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    let run = env.get(&format!("/runs/{run_id}")).await;
    assert_eq!(run["agentVersion"], v1_hash.as_str());
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    assert_eq!(
        first_event(&events, "RUN_STARTED")["data"]["agentVersion"],
        v1_hash.as_str()
    );
    old.stop().await.unwrap();

    // The deploy: the old workers are gone, the new ones load v2.
    let v2 = mailer("send_mail", "v2", "Done v2.", &v1_tool.url);
    assert_ne!(v2.agent_version("mailer").unwrap().hash, v1_hash);
    let new = env.spawn_worker_of(Arc::new(v2));
    // The person is shown the version the call will be run by, and the
    // operator which versions have open runs.
    let input = env.wait_pending(&thread_id, 1).await.remove(0);
    assert_eq!(input["agentVersion"], v1_hash.as_str());
    let listed = eventually("the new workers recorded their version", || async {
        let (listed, found) = AgentsCommand::Versions {
            name: "mailer".into(),
        }
        .run(&env.store)
        .await
        .unwrap();
        (found && listed.lines().count() == 4).then_some(listed)
    })
    .await;
    let lines: Vec<&str> = listed.lines().collect();
    assert!(lines[0].starts_with(&v1_hash[..12]), "{listed}");
    assert!(
        lines[0].contains("1 open run ") && lines[0].contains("tools send_email"),
        "{listed}"
    );
    assert!(
        lines[2].contains("0 open runs") && lines[2].contains("tools send_mail"),
        "{listed}"
    );
    let answer = approve(&env, &run_id, "c1").await;
    assert_eq!(answer["delivered"], true, "{answer}");
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], "Done v1.", "{run}");
    assert_eq!(v1_tool.calls(), 1, "v1's tool ran the approved call");
    assert_eq!(v1_tool.bodies()[0]["arguments"], json!({ "to": "a@b.c" }));
    let tool_message = tool_message(&env, &thread_id).await;
    assert!(
        tool_message.get("error").is_none(),
        "no unknown tool: {tool_message}"
    );
    new.stop().await.unwrap();
    env.finish().await;
}

/// A version is stored once, under its hash, by the process that loaded
/// it: another process (a worker of another deploy) reads it back as it
/// was.
#[tokio::test]
async fn versions_are_recorded_once_under_their_hash() {
    let v1 = mailer("send_email", "v1", "Done.", "http://127.0.0.1:9/");
    let version = v1.agent_version("mailer").unwrap().clone();
    let env = TestEnv::start(v1).await;
    let stored = env
        .store
        .stored_agent_version(&version.hash)
        .await
        .unwrap()
        .expect("recorded at start");
    assert_eq!(stored.agent, "mailer");
    assert_eq!(stored.definition, version.definition);
    assert_eq!(
        agentenkit_core::canonical::sha256_hex(
            agentenkit_core::canonical::canonical(&stored.definition).as_bytes()
        ),
        version.hash
    );
    // Recording again keeps the first sighting.
    env.registry.record_versions(&env.store).await.unwrap();
    let again = env
        .store
        .stored_agent_version(&version.hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.first_seen, stored.first_seen);
    env.finish().await;
}

/// A root that delegates to `child`, which asks to run `tool`.
fn delegating(child_done: &str, url: &str) -> Registry {
    Registry::from_toml(&format!(
        r#"
[agents.root]
subagents = ["child"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "d1", name = "child", arguments = {{ task = "mail it" }} }} ] }},
  {{ text = "root done" }},
] }}

[agents.child]
tools = ["tool"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "tool", arguments = {{ to = "a@b.c" }} }} ] }},
  {{ text = "{child_done}" }},
] }}

[tools.tool]
type = "http"
url = "{url}"
requires_confirmation = true
"#
    ))
    .expect("agent file")
}

/// A sub-agent's run records the version of its own agent, apart from its
/// parent's, and both finish on their versions after a deploy changed the
/// sub-agent (its script; the tool's service is the same).
#[tokio::test]
async fn a_sub_agents_run_is_pinned_to_its_own_agents_version() {
    let v1_tool = ToolServer::ok().await;
    let v1 = delegating("child done v1", &v1_tool.url);
    let (root_v1, child_v1) = (
        v1.agent_version("root").unwrap().hash.clone(),
        v1.agent_version("child").unwrap().hash.clone(),
    );
    assert_ne!(root_v1, child_v1);
    let env = TestEnv::start(v1).await;
    let old = env.spawn_worker();
    let (thread_id, root_run) = env.start_turn("root", "go").await;
    let input = env.wait_pending(&thread_id, 1).await.remove(0);
    let child_run = input["runId"].as_str().unwrap().to_owned();
    assert_ne!(child_run, root_run);
    let child = env.get(&format!("/runs/{child_run}")).await;
    assert_eq!(child["agentVersion"], child_v1.as_str());
    let root = env.get(&format!("/runs/{root_run}")).await;
    assert_eq!(root["agentVersion"], root_v1.as_str());
    old.stop().await.unwrap();

    let v2 = delegating("child done v2", &v1_tool.url);
    assert_ne!(v2.agent_version("child").unwrap().hash, child_v1);
    let new = env.spawn_worker_of(Arc::new(v2));
    env.reply(
        "/agent/tool-call/approve",
        ALICE,
        json!({ "runId": child_run, "toolCallId": "c1" }),
    )
    .await;
    let root = env.wait_run_finished(&root_run).await;
    assert_eq!(root["status"], "completed", "{root}");
    assert_eq!(root["output"], "root done");
    let child = env.get(&format!("/runs/{child_run}")).await;
    assert_eq!(child["output"], "child done v1", "{child}");
    assert_eq!(v1_tool.calls(), 1);
    new.stop().await.unwrap();
    env.finish().await;
}

/// An API that loaded the new agent file checks an answer to a run pinned
/// to the old version by the old version's tools: the person's edits to
/// `send_email` are valid there (the new file has no such tool), and the
/// call runs with them.
#[tokio::test]
async fn an_api_of_a_new_deploy_checks_answers_by_the_runs_version() {
    let v1_tool = ToolServer::ok().await;
    let v1 = mailer("send_email", "v1", "Done v1.", &v1_tool.url);
    let env = TestEnv::start(v1).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("mailer", "send it").await;
    env.wait_pending(&thread_id, 1).await;

    // The new deploy's API.
    let v2 = mailer("send_mail", "v2", "Done v2.", "http://127.0.0.1:9/");
    let api = env.serve_api_of(Arc::new(v2)).await;
    let approve = |arguments: serde_json::Value| {
        env.http
            .post(api.url("/agent/tool-call/approve"))
            .bearer_auth(ALICE)
            .json(&json!({ "runId": run_id, "toolCallId": "c1", "arguments": arguments }))
    };
    // Checked by v1's schema: `to` must be a string.
    let (status, refused) = env.send(approve(json!({ "to": 7 }))).await;
    assert_eq!(status.as_u16(), 422, "{refused}");
    assert_eq!(refused["issues"][0]["path"], "/to", "{refused}");
    let (status, answer) = env.send(approve(json!({ "to": "x@y.z" }))).await;
    assert_eq!(
        (status.as_u16(), &answer["delivered"]),
        (200, &json!(true)),
        "{answer}"
    );
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["output"], "Done v1.", "{run}");
    assert_eq!(v1_tool.bodies()[0]["arguments"], json!({ "to": "x@y.z" }));
    api.stop().await;
    worker.stop().await.unwrap();
    env.finish().await;
}

/// A rolling deploy: workers of the old and the new agent file side by
/// side, each fleet's API starting runs; every run is served to its end on
/// the version it started on, whichever worker takes its segments.
#[tokio::test]
async fn a_rolling_deploy_serves_every_run_on_its_own_version() {
    let tool = ToolServer::ok().await;
    // The usual agent file, each deploy's script ending its own way.
    let agent_file = |done: &str| {
        registry(
            &format!(
                r#"{{ tool_calls = [ {{ id = "c1", name = "tool", arguments = {{ to = "a@b.c" }} }} ] }},
                   {{ text = "{done}" }}"#
            ),
            &tool.url,
        )
    };
    let env = TestEnv::start(agent_file("Done v1.")).await;
    let v2 = Arc::new(agent_file("Done v2."));
    // Two fleets: each worker takes whatever segment comes next.
    let mut workers = Vec::new();
    for _ in 0..2 {
        workers.push(env.spawn_worker());
        workers.push(env.spawn_worker_of(v2.clone()));
    }
    // The new fleet's API.
    let api = env.serve_api_of(v2.clone()).await;
    let mut runs = Vec::new();
    for n in 0..8 {
        let base = if n % 2 == 0 { env.url("") } else { api.url("") };
        let thread: serde_json::Value = env
            .http
            .post(format!("{base}/threads"))
            .bearer_auth(ALICE)
            .json(&json!({ "agent": "agent" }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let started: serde_json::Value = env
            .http
            .post(format!(
                "{base}/threads/{}/messages",
                thread["id"].as_str().unwrap()
            ))
            .bearer_auth(ALICE)
            .json(&json!({ "content": "send" }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let expected = if n % 2 == 0 { "Done v1." } else { "Done v2." };
        runs.push((started["runId"].as_str().unwrap().to_owned(), expected));
    }
    for (run_id, expected) in &runs {
        let run = env.wait_run_finished(run_id).await;
        assert_eq!(run["status"], "completed", "{run}");
        assert_eq!(run["output"], *expected, "{run}");
    }
    api.stop().await;
    for worker in workers {
        worker.stop().await.unwrap();
    }
    env.finish().await;
}

/// A worker that cannot build a run's version (here: a definition naming a
/// provider this build does not have) does not run the step: it hands the
/// segment back, counted, and gives the lease back without a takeover, so
/// a worker that can serves the run at once.
#[tokio::test]
async fn a_worker_that_cannot_build_a_runs_version_hands_it_back_untouched() {
    let v1 = mailer("send_email", "v1", "Done v1.", "http://127.0.0.1:9/");
    let env = TestEnv::start(v1).await;
    // No worker yet: the run waits queued; then pin it to a version no
    // worker of this build can build.
    let (_, run_id) = env.start_turn("mailer", "send it").await;
    let definition =
        json!({ "agents": { "mailer": { "model": { "provider": "from-the-future" } } } });
    let hash = agentenkit_core::canonical::sha256_hex(
        agentenkit_core::canonical::canonical(&definition).as_bytes(),
    );
    env.store
        .record_agent_versions(&[(hash.as_str(), "mailer", &definition)])
        .await
        .unwrap();
    env.sql(&format!(
        "UPDATE runs SET agent_version = '{hash}' WHERE id = '{run_id}'"
    ))
    .await;
    let worker = env.spawn_worker();
    eventually("the segment handed back", || async {
        env.metrics_text()
            .await
            .contains("agentenkit_unserved_versions_total")
            .then_some(())
    })
    .await;
    worker.stop().await.unwrap();
    let rows: Vec<(String, i32, i32)> = env
        .rows(
            &format!("SELECT status, takeovers, attempts FROM runs WHERE id = '{run_id}'"),
            |r| (r.get(0), r.get(1), r.get(2)),
        )
        .await;
    assert_eq!(
        rows,
        [("queued".to_owned(), 0, 0)],
        "untouched, no takeover"
    );
    assert!(env.journal_names(&run_id).await.is_empty(), "no step ran");
    env.finish().await;
}

/// The reaper drops old versions nobody needs: not its agent's newest, no
/// open run on it, no run started on it lately. One still in use is kept
/// and looked at again a day later.
#[tokio::test]
async fn the_reaper_drops_old_versions_no_run_needs() {
    use agentenkit_runtime::reaper::{reap_once, ReaperConfig};

    let tool = ToolServer::ok().await;
    let v1 = mailer("send_email", "v1", "Done v1.", &tool.url);
    let v1_hash = v1.agent_version("mailer").unwrap().hash.clone();
    let env = TestEnv::start(v1).await;
    let v2 = mailer("send_email", "v2", "Done v2.", &tool.url);
    v2.record_versions(&env.store).await.unwrap();
    let v2_hash = v2.agent_version("mailer").unwrap().hash.clone();
    let v3 = mailer("send_email", "v3", "Done v3.", &tool.url);
    v3.record_versions(&env.store).await.unwrap();
    let v3_hash = v3.agent_version("mailer").unwrap().hash.clone();
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("mailer", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    worker.stop().await.unwrap();
    env.sql(&format!(
        "UPDATE agent_versions SET first_seen = first_seen - interval '40 days'
         WHERE hash IN ('{v1_hash}', '{v2_hash}')"
    ))
    .await;
    let kept = || async {
        env.rows("SELECT hash FROM agent_versions ORDER BY first_seen", |r| {
            r.get::<_, String>(0)
        })
        .await
    };
    let config = ReaperConfig::default();
    let report = reap_once(&env.reaper(), &config).await.unwrap();
    assert_eq!(report.versions_dropped, 1);
    assert_eq!(
        kept().await,
        [v1_hash.clone(), v3_hash.clone()],
        "v2 dropped"
    );
    // v1 has an open run: kept, and not looked at again within a day.
    let report = reap_once(&env.reaper(), &config).await.unwrap();
    assert_eq!(report.versions_dropped, 0);

    // Once its run is done and was started long ago, v1 goes too; v3,
    // the newest, stays however old.
    let worker = env.spawn_worker();
    env.reply(
        "/agent/tool-call/approve",
        ALICE,
        json!({ "runId": run_id, "toolCallId": "c1" }),
    )
    .await;
    env.wait_run_finished(&run_id).await;
    worker.stop().await.unwrap();
    env.sql(
        "UPDATE runs SET created_at = created_at - interval '40 days';
         UPDATE agent_versions SET checked_at = checked_at - interval '2 days',
                                   first_seen = first_seen - interval '40 days'",
    )
    .await;
    let report = reap_once(&env.reaper(), &config).await.unwrap();
    assert_eq!(report.versions_dropped, 1);
    assert_eq!(kept().await, [v3_hash]);
    env.finish().await;
}

/// An API that cannot record its agent versions at start serves on but is
/// not ready, and records them (and is ready) once the store takes them.
#[tokio::test]
async fn an_api_is_not_ready_until_its_versions_are_recorded() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(mailer("send_email", "v1", "Done.", &tool.url)).await;
    // The store refuses the next deploy's versions for now.
    env.sql("ALTER TABLE agent_versions RENAME TO agent_versions_away")
        .await;
    let v2 = Arc::new(mailer("send_email", "v2", "Done v2.", &tool.url));
    let v2_hash = v2.agent_version("mailer").unwrap().hash.clone();
    let api = env.serve_api_of(v2).await;
    let ready = env.http.get(api.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 503);
    let body: serde_json::Value = ready.json().await.unwrap();
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("agent versions are not recorded"),
        "{body}"
    );
    let (status, _) = env.call("GET", "/agents", None, None).await;
    assert_eq!(status.as_u16(), 401, "the API serves on meanwhile");

    env.sql("ALTER TABLE agent_versions_away RENAME TO agent_versions")
        .await;
    eventually("the API records its versions and is ready", || async {
        let ready = env.http.get(api.url("/readyz")).send().await.ok()?;
        (ready.status().as_u16() == 200).then_some(())
    })
    .await;
    let recorded = env.store.stored_agent_version(&v2_hash).await.unwrap();
    assert!(recorded.is_some(), "v2 recorded");
    api.stop().await;
    env.finish().await;
}
