//! Sub-agents: a delegation is a child run; its requests are the root
//! thread's; its end (or failure) is the delegation's result.

use agentenkit_runtime::Registry;
use agentenkit_tests::*;
use serde_json::{json, Value};

/// root → child → grandchild; the grandchild calls the marked tool.
fn nested(url: &str, grandchild_after_approval: &str) -> Registry {
    Registry::from_toml(&format!(
        r#"
[agents.root]
subagents = ["child"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "d1", name = "child", arguments = {{ task = "plan it" }} }} ] }},
  {{ text = "root done" }},
] }}

[agents.child]
subagents = ["grandchild"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "d2", name = "grandchild", arguments = {{ task = "mail it" }} }} ] }},
  {{ text = "child done" }},
] }}

[agents.grandchild]
tools = ["tool"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "tool", arguments = {{ to = "a@b.c" }} }} ] }},
  {grandchild_after_approval},
] }}

[tools.tool]
type = "http"
url = "{url}"
requires_confirmation = true
"#
    ))
    .unwrap()
}

/// A root that delegates to two sub-agents in one step; both park.
fn fan_out(url: &str) -> Registry {
    Registry::from_toml(&format!(
        r#"
[agents.root]
subagents = ["left", "right"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [
      {{ id = "d1", name = "left", arguments = {{ task = "left task" }} }},
      {{ id = "d2", name = "right", arguments = {{ task = "right task" }} }},
  ] }},
  {{ text = "both done" }},
] }}
[agents.left]
tools = ["tool"]
model = {{ provider = "scripted", script = [ {{ tool_calls = [ {{ id = "l1", name = "tool", arguments = {{ to = "left" }} }} ] }}, {{ text = "left done" }} ] }}
[agents.right]
tools = ["tool"]
model = {{ provider = "scripted", script = [ {{ tool_calls = [ {{ id = "r1", name = "tool", arguments = {{ to = "right" }} }} ] }}, {{ text = "right done" }} ] }}
[tools.tool]
type = "http"
url = "{url}"
requires_confirmation = true
"#
    ))
    .unwrap()
}

fn approve(input: &Value) -> Value {
    json!({ "runId": input["runId"], "toolCallId": input["toolCallId"] })
}

#[tokio::test]
async fn a_grandchilds_request_shows_on_the_root_stream_and_unwinds_after_approval() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(nested(&tool.url, r#"{ text = "grandchild done" }"#)).await;
    let worker = env.spawn_worker();
    let (thread_id, root_run) = env.start_turn("root", "go").await;
    let pending = env.wait_pending(&thread_id, 1).await;
    let input = &pending[0];
    assert_eq!(input["runName"], "grandchild");
    assert_eq!(input["depth"], 2);
    assert_ne!(
        input["runId"],
        root_run.as_str(),
        "the grandchild's own run id"
    );
    assert_eq!(input["threadId"], thread_id.as_str());
    let grandchild_run = input["runId"].as_str().unwrap().to_owned();
    let run = env.get(&format!("/runs/{grandchild_run}")).await;
    assert_eq!(run["depth"], 2);
    assert_eq!(run["name"], "grandchild");
    let child_run = run["parentRunId"].as_str().unwrap().to_owned();
    assert_eq!(
        env.get(&format!("/runs/{child_run}")).await["parentRunId"],
        root_run.as_str()
    );

    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let required = first_event(&events, "INPUT_REQUIRED");
    assert_eq!(required["runId"], grandchild_run.as_str());
    assert_eq!(required["data"]["runName"], "grandchild");
    assert_eq!(required["data"]["depth"], 2);

    let (_, answer) = env
        .reply("/agent/tool-call/approve", ALICE, approve(input))
        .await;
    assert_eq!(answer["delivered"], true);
    let root = env.wait_run_finished(&root_run).await;
    assert_eq!(root["status"], "completed");
    assert_eq!(root["output"], "root done");
    assert_eq!(tool.calls(), 1);
    // Each level's delegation result is the level below's final text.
    let journal = env.get(&format!("/runs/{root_run}/journal")).await;
    let exec = journal
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "exec:d1")
        .unwrap();
    assert_eq!(exec["value"], "child done");
    let journal = env.get(&format!("/runs/{child_run}/journal")).await;
    let exec = journal
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "exec:d2")
        .unwrap();
    assert_eq!(exec["value"], "grandchild done");
    // The root conversation holds the root's turn; the child saw only its task.
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    let child_user: Vec<_> = messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["runId"] == child_run.as_str() && m["role"] == "user")
        .collect();
    assert_eq!(child_user.len(), 1);
    assert_eq!(child_user[0]["content"], "plan it");
    env.wait_status(&thread_id, "IDLE").await;
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn two_children_parked_at_once_resume_the_parent_only_when_both_are_done_in_either_order() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(fan_out(&tool.url)).await;
    let worker = env.spawn_worker();
    for order in [["left", "right"], ["right", "left"]] {
        let (thread_id, root_run) = env.start_turn("root", "fan out").await;
        let pending = env.wait_pending(&thread_id, 2).await;
        let by_name = |name: &str| {
            pending
                .iter()
                .find(|p| p["runName"] == name)
                .unwrap()
                .clone()
        };
        let (first, second) = (by_name(order[0]), by_name(order[1]));
        let (_, answer) = env
            .reply("/agent/tool-call/approve", ALICE, approve(&first))
            .await;
        assert_eq!(answer["delivered"], true);
        // The first child finishes; the parent still waits on the second.
        env.wait_run_finished(first["runId"].as_str().unwrap())
            .await;
        let still = env.wait_pending(&thread_id, 1).await;
        assert_eq!(still[0]["runName"], order[1]);
        assert_eq!(
            env.get(&format!("/runs/{root_run}")).await["status"],
            "waiting"
        );
        env.reply("/agent/tool-call/approve", ALICE, approve(&second))
            .await;
        let root = env.wait_run_finished(&root_run).await;
        assert_eq!(root["output"], "both done", "{root}");
        let journal = env.get(&format!("/runs/{root_run}/journal")).await;
        let values: Vec<_> = journal
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"].as_str().unwrap().starts_with("exec:"))
            .map(|e| e["value"].clone())
            .collect();
        assert_eq!(
            values,
            [json!("left done"), json!("right done")],
            "call order, whatever the answer order"
        );
    }
    assert_eq!(tool.calls(), 4);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_child_that_fails_mid_unwind_is_the_delegations_result_and_the_parent_goes_on() {
    let tool = ToolServer::ok().await;
    // After its approval the grandchild's model fails: it fails, and the
    // child sees that failure as its delegation's result.
    let env = TestEnv::start(nested(&tool.url, r#"{ error = "the model is down" }"#)).await;
    let worker = env.spawn_worker();
    let (thread_id, root_run) = env.start_turn("root", "go").await;
    let pending = env.wait_pending(&thread_id, 1).await;
    env.reply("/agent/tool-call/approve", ALICE, approve(&pending[0]))
        .await;
    let root = env.wait_run_finished(&root_run).await;
    assert_eq!(root["status"], "completed");
    let grandchild = env
        .get(&format!("/runs/{}", pending[0]["runId"].as_str().unwrap()))
        .await;
    assert_eq!(grandchild["status"], "failed");
    let child_run = grandchild["parentRunId"].as_str().unwrap().to_owned();
    let journal = env.get(&format!("/runs/{child_run}/journal")).await;
    let exec = journal
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "exec:d2")
        .unwrap();
    let error = exec["value"]["error"].as_str().unwrap();
    assert!(
        error.contains("sub-agent grandchild failed") && error.contains("the model is down"),
        "{error}"
    );
    assert_eq!(
        env.get(&format!("/runs/{child_run}")).await["status"],
        "completed"
    );
    let types = env.event_types(&thread_id).await;
    assert!(types.contains(&"RUN_FAILED".to_owned()));
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_worker_killed_halfway_through_an_unwind_leaves_the_rest_to_the_next() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(nested(&tool.url, r#"{ text = "grandchild done" }"#)).await;
    // Dies right before the commit that would journal the grandchild's
    // result in the child (with the child's end), after the grandchild
    // finished: the child is resumed, the root still waits.
    let doomed = env.spawn_crashing_worker("before:exec:d2");
    let (thread_id, root_run) = env.start_turn("root", "go").await;
    let pending = env.wait_pending(&thread_id, 1).await;
    env.reply("/agent/tool-call/approve", ALICE, approve(&pending[0]))
        .await;
    doomed.died().await.unwrap_err();
    assert_eq!(
        env.get(&format!("/runs/{root_run}")).await["status"],
        "waiting"
    );

    let rescuer = env.spawn_worker();
    let root = env.wait_run_finished(&root_run).await;
    assert_eq!(root["output"], "root done");
    assert_eq!(tool.calls(), 1, "no level ran twice");
    let grandchild_run = pending[0]["runId"].as_str().unwrap();
    let child_run = env.get(&format!("/runs/{grandchild_run}")).await["parentRunId"]
        .as_str()
        .unwrap()
        .to_owned();
    for run in [root_run.as_str(), child_run.as_str(), grandchild_run] {
        let names = env.journal_names(run).await;
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{run}: {names:?}");
    }
    let completed = env
        .event_types(&thread_id)
        .await
        .into_iter()
        .filter(|t| t == "RUN_COMPLETED")
        .count();
    assert_eq!(completed, 3, "each level completed once");
    rescuer.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_stopped_tree_leaves_no_open_request_and_late_answers_are_refused() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(nested(&tool.url, r#"{ text = "grandchild done" }"#)).await;
    let worker = env.spawn_worker();
    let (thread_id, root_run) = env.start_turn("root", "go").await;
    let pending = env.wait_pending(&thread_id, 1).await;
    let (status, stopped) = env
        .call(
            "POST",
            &format!("/threads/{thread_id}/stop"),
            Some(ALICE),
            None,
        )
        .await;
    assert_eq!(status.as_u16(), 202);
    assert_eq!(
        stopped["stopped"].as_array().unwrap().len(),
        3,
        "the whole tree"
    );
    let thread = env.wait_status(&thread_id, "IDLE").await;
    assert_eq!(thread["pendingInputs"], json!([]));
    let (_, late) = env
        .reply("/agent/tool-call/approve", ALICE, approve(&pending[0]))
        .await;
    assert_eq!(
        late,
        json!({ "delivered": false, "error": "This request was cancelled" })
    );
    assert_eq!(
        env.get(&format!("/runs/{root_run}")).await["status"],
        "cancelled"
    );
    assert_eq!(tool.calls(), 0);
    worker.stop().await.unwrap();
    env.finish().await;
}

/// A root that delegates to six sub-agents in one step; each answers at
/// once, so the six finish (and settle the root's rows) at the same moment.
fn wide(n: usize) -> Registry {
    let calls: Vec<String> = (0..n)
        .map(|i| {
            format!(r#"{{ id = "d{i}", name = "sub{i}", arguments = {{ task = "part {i}" }} }}"#)
        })
        .collect();
    let names: Vec<String> = (0..n).map(|i| format!(r#""sub{i}""#)).collect();
    let mut toml = format!(
        r#"
[agents.root]
subagents = [{}]
model = {{ provider = "scripted", script = [ {{ tool_calls = [ {} ] }}, {{ text = "all done" }} ] }}
"#,
        names.join(", "),
        calls.join(", ")
    );
    for i in 0..n {
        toml.push_str(&format!(
            "[agents.sub{i}]\nmodel = {{ provider = \"scripted\", script = [ {{ text = \"part {i} done\" }} ] }}\n"
        ));
    }
    Registry::from_toml(&toml).unwrap()
}

#[tokio::test]
async fn sub_agents_that_finish_together_resume_their_parent_without_a_deadlock() {
    let env = TestEnv::start(wide(6)).await;
    let workers = [env.spawn_worker(), env.spawn_worker()];
    let mut roots = Vec::new();
    for i in 0..3 {
        roots.push(env.start_turn("root", &format!("turn {i}")).await);
    }
    for (thread_id, root_run) in &roots {
        let started = std::time::Instant::now();
        let root = env.wait_run_finished(root_run).await;
        assert_eq!(root["status"], "completed", "{root}");
        assert_eq!(root["output"], "all done");
        // A deadlock would hand the step back for a lease's time (seconds);
        // a retry at once resolves it in milliseconds.
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "root {root_run} took {:?}",
            started.elapsed()
        );
        let completed = env
            .event_types(thread_id)
            .await
            .into_iter()
            .filter(|t| t == "RUN_COMPLETED")
            .count();
        assert_eq!(completed, 7, "six children and the root, once each");
    }
    for worker in workers {
        worker.stop().await.unwrap();
    }
    env.finish().await;
}

#[tokio::test]
async fn a_delegation_past_max_depth_is_a_failure_the_model_sees() {
    let tool = ToolServer::ok().await;
    // max_depth 1: root (depth 0) may start the child (1), which may not
    // start the grandchild (2).
    let registry = nested(&tool.url, r#"{ text = "grandchild done" }"#).with_max_depth(1);
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (_, root_run) = env.start_turn("root", "go").await;
    let root = env.wait_run_finished(&root_run).await;
    assert_eq!(root["status"], "completed");
    assert_eq!(root["output"], "root done");
    assert_eq!(tool.calls(), 0, "the grandchild never ran");
    let pg = env.pg_client().await;
    let rows = pg
        .query("SELECT id::text, name, depth FROM runs ORDER BY depth", &[])
        .await
        .unwrap();
    let runs: Vec<(String, String, i32)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        runs.iter().map(|r| (r.1.as_str(), r.2)).collect::<Vec<_>>(),
        [("root", 0), ("child", 1)],
        "no run was started past max_depth"
    );
    let journal = env.get(&format!("/runs/{}/journal", runs[1].0)).await;
    let exec = journal
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "exec:d2")
        .expect("the refused delegation has a result");
    assert_eq!(exec["value"]["error"], "delegation too deep");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn respond_by_thread_to_a_call_id_two_open_requests_share_is_409_naming_both_runs() {
    let tool = ToolServer::ok().await;
    // Both children's scripts call their tool as `c1`.
    let registry = Registry::from_toml(&format!(
        r#"
[agents.root]
subagents = ["left", "right"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [
      {{ id = "d1", name = "left", arguments = {{ task = "left task" }} }},
      {{ id = "d2", name = "right", arguments = {{ task = "right task" }} }},
  ] }},
  {{ text = "both done" }},
] }}
[agents.left]
tools = ["tool"]
model = {{ provider = "scripted", script = [ {{ tool_calls = [ {{ id = "c1", name = "tool", arguments = {{ to = "left" }} }} ] }}, {{ text = "left done" }} ] }}
[agents.right]
tools = ["tool"]
model = {{ provider = "scripted", script = [ {{ tool_calls = [ {{ id = "c1", name = "tool", arguments = {{ to = "right" }} }} ] }}, {{ text = "right done" }} ] }}
[tools.tool]
type = "http"
url = "{}"
requires_confirmation = true
"#,
        tool.url
    ))
    .unwrap();
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (thread_id, root_run) = env.start_turn("root", "go").await;
    let pending = env.wait_pending(&thread_id, 2).await;
    let mut runs: Vec<String> = pending
        .iter()
        .map(|p| p["runId"].as_str().unwrap().to_owned())
        .collect();
    runs.sort();
    let (status, body) = env
        .reply(
            "/agent/hitl/respond",
            ALICE,
            json!({ "threadId": thread_id, "toolCallId": "c1", "approved": true }),
        )
        .await;
    assert_eq!(status.as_u16(), 409, "{body}");
    assert_eq!(body["error"], "AmbiguousToolCallId");
    let mut named: Vec<String> = body["runIds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect();
    named.sort();
    assert_eq!(named, runs);
    assert_eq!(tool.calls(), 0, "nothing was settled");
    assert_eq!(env.wait_pending(&thread_id, 2).await.len(), 2);
    // Addressed by run, each is answered.
    for input in &pending {
        let (_, answer) = env
            .reply("/agent/tool-call/approve", ALICE, approve(input))
            .await;
        assert_eq!(answer["delivered"], true);
    }
    assert_eq!(
        env.wait_run_finished(&root_run).await["status"],
        "completed"
    );
    assert_eq!(tool.calls(), 2);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_refused_delegation_beside_an_approval_replays_after_the_approval() {
    let tool = ToolServer::ok().await;
    // max_depth 0: the root may not delegate at all; in the same step it
    // also asks for an approval, so the step is replayed after the answer.
    let registry = Registry::from_toml(&format!(
        r#"
[agents.root]
subagents = ["child"]
tools = ["tool"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [
      {{ id = "d1", name = "child", arguments = {{ task = "too deep" }} }},
      {{ id = "c1", name = "tool", arguments = {{ to = "a@b.c" }} }},
  ] }},
  {{ text = "root done" }},
] }}
[agents.child]
model = {{ provider = "scripted", script = [ {{ text = "child done" }} ] }}
[tools.tool]
type = "http"
url = "{}"
requires_confirmation = true
"#,
        tool.url
    ))
    .unwrap()
    .with_max_depth(0);
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (thread_id, root_run) = env.start_turn("root", "go").await;
    let pending = env.wait_pending(&thread_id, 1).await;
    let (_, answer) = env
        .reply("/agent/tool-call/approve", ALICE, approve(&pending[0]))
        .await;
    assert_eq!(answer["delivered"], true);
    let root = env.wait_run_finished(&root_run).await;
    assert_eq!(root["status"], "completed", "{root}");
    let journal = env.get(&format!("/runs/{root_run}/journal")).await;
    let refused = journal
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "exec:d1")
        .unwrap();
    assert_eq!(refused["value"]["error"], "delegation too deep");
    assert_eq!(tool.calls(), 1);
    worker.stop().await.unwrap();
    env.finish().await;
}
