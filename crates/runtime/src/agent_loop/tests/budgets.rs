//! Budgets that park, on the memory engine: a thread's budget counts its
//! other runs, and a replay asks where the run asked, whatever the budget
//! has become.

use agentenkit_core::budget;
use agentenkit_core::RunStatus;

use super::*;

/// `send` as c1, c2, c3 (functions: they run at once), then "Done.".
const THREE_SENDS: &str = r#"
  { tool_calls = [ { id = "c1", name = "send", arguments = { to = "a@b.c" } } ] },
  { tool_calls = [ { id = "c2", name = "send", arguments = { to = "a@b.c" } } ] },
  { tool_calls = [ { id = "c3", name = "send", arguments = { to = "a@b.c" } } ] },
  { text = "Done." },
"#;

fn request(n: u32) -> String {
    budget::request_id(n)
}

#[tokio::test]
async fn a_thread_budget_counts_the_other_runs_of_the_thread() {
    let h = harness(
        Does::Answer,
        false,
        SEND_THEN_DONE,
        "budget = { thread = { model_calls = 3 } }",
        "",
    );
    let (first, memory) = h.turn("one").await;
    assert_eq!(status(&memory, first), RunStatus::Completed);
    let thread = memory.run(first).unwrap().thread;
    let second = h.engine.start_on(thread, "agent", "two");
    let memory = h.drive(second).await;
    assert_eq!(status(&memory, second), RunStatus::Waiting);
    assert_eq!(
        memory.journal_names(second),
        ["model:0", "persist:toolcall:c1", "exec:c1", "budget:1"]
    );
    let asked = memory.call(second, &request(1)).expect("the request's row");
    assert_eq!(asked.kind, ToolKind::Approval);
    assert_eq!(asked.arguments["budget"], "thread");
    assert_eq!(asked.arguments["used"], 3);
    h.answer(second, &request(1), Verdict::approve());
    let memory = h.drive(second).await;
    assert_eq!(status(&memory, second), RunStatus::Completed);
}

#[tokio::test]
async fn a_replay_asks_where_the_run_asked_whatever_the_budget_has_become() {
    let mut h = harness(
        Does::Answer,
        false,
        THREE_SENDS,
        "budget = { run = { model_calls = 2 } }",
        "",
    );
    let (run, memory) = h.turn("go").await;
    assert_eq!(status(&memory, run), RunStatus::Waiting);
    h.answer(run, &request(2), Verdict::approve());
    // A deploy halves the budget: the run's replay still asked at 2 and
    // was granted 2 more (the budget's size as the run asked), journaled:
    // the new limit is 1 + 2.
    let send = h.registry.tool("send").expect("send").tool.clone();
    h.registry = Registry::from_toml_with_tools(
        &format!(
            "[agents.agent]\ntools = [\"send\"]\nmodel = {{ provider = \"scripted\", script = [ {THREE_SENDS} ] }}\nbudget = {{ run = {{ model_calls = 1 }} }}\n"
        ),
        vec![send],
    )
    .unwrap();
    let memory = h.drive(run).await;
    let names = memory.journal_names(run);
    assert_eq!(
        names
            .iter()
            .filter(|n| n.starts_with("budget:") && !n.ends_with(":granted"))
            .count(),
        2,
        "{names:?}"
    );
    assert_eq!(status(&memory, run), RunStatus::Waiting);
    assert!(memory.call(run, &request(3)).is_some(), "{names:?}");
    assert_eq!(h.tool.runs(), 3, "no call ran twice");
}

#[tokio::test]
async fn a_model_call_id_that_names_a_budget_request_fails_the_run() {
    let script =
        r#"{ tool_calls = [ { id = "budget~1", name = "send", arguments = { to = "a" } } ] }"#;
    let h = harness(Does::Answer, false, script, "", "");
    let (run, memory) = h.turn("go").await;
    assert_eq!(status(&memory, run), RunStatus::Failed);
    assert!(memory
        .run(run)
        .unwrap()
        .error
        .as_deref()
        .unwrap_or_default()
        .contains("names a budget request"));
    assert_eq!(h.tool.runs(), 0);
}
