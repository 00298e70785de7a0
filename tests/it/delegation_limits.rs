//! Fan-out limits of delegation: sub-agents past a call's or a run's
//! limit are failures the model sees, never started.

use agentenkit_runtime::Registry;
use agentenkit_tests::*;

/// One model response may start at most `max_children_per_step`
/// sub-agents, and one turn's tree hold at most `max_runs_per_tree` runs:
/// a delegation past either is a failure the model sees, and no run starts
/// for it.
#[tokio::test]
async fn delegations_past_the_fan_out_limits_are_failures_the_model_sees() {
    let agents = |limits: &str| {
        Registry::from_toml(&format!(
            r#"
{limits}
[agents.root]
subagents = ["helper"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [
      {{ id = "d1", name = "helper", arguments = {{ task = "one" }} }},
      {{ id = "d2", name = "helper", arguments = {{ task = "two" }} }},
      {{ id = "d3", name = "helper", arguments = {{ task = "three" }} }},
  ] }},
  {{ text = "root done" }},
] }}
[agents.helper]
model = {{ provider = "scripted", script = [ {{ text = "helped" }} ] }}
"#
        ))
        .expect("agents")
    };
    for (limits, started, refused) in [
        ("max_children_per_step = 2", 2, "max_children_per_step"),
        // the root and one child
        ("max_runs_per_tree = 2", 1, "max_runs_per_tree"),
    ] {
        let env = TestEnv::start(agents(limits)).await;
        let worker = env.spawn_worker();
        let (_, root_run) = env.start_turn("root", "go").await;
        let root = env.wait_run_finished(&root_run).await;
        assert_eq!(root["status"], "completed", "{limits}: {root}");
        let children: Vec<String> = env
            .rows(
                "SELECT parent_tool_call_id FROM runs WHERE parent_run_id IS NOT NULL ORDER BY 1",
                |r| r.get(0),
            )
            .await;
        assert_eq!(children.len(), started, "{limits}: {children:?}");
        let journal = env.get(&format!("/runs/{root_run}/journal")).await;
        let exec = journal
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "exec:d3")
            .expect("the refused delegation has a result");
        assert_eq!(exec["value"]["error"], "too many sub-agents", "{limits}");
        let message = exec["value"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(refused), "{limits}: {message}");
        worker.stop().await.unwrap();
        env.finish().await;
    }
}
