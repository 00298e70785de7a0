//! Sub-agents: a delegation starts a child run; the parent waits for it and
//! reads what it came to.

use agentenkit_core::{CallState, RunStatus};

use super::*;

const DELEGATES: &str = r#"
  { tool_calls = [ { id = "d1", name = "helper", arguments = { task = "plan it" } } ] },
  { text = "Done." },
"#;

fn with_helper(helper_script: &str) -> Harness {
    harness(
        Does::Answer,
        false,
        DELEGATES,
        r#"subagents = ["helper"]"#,
        &format!(
            r#"
[agents.helper]
system = "helper"
tools = ["send"]
model = {{ provider = "scripted", script = [ {helper_script} ] }}
"#
        ),
    )
}

/// The child run the parent's delegation `d1` started.
fn child_of(memory: &Memory, parent: RunId) -> RunId {
    memory
        .runs
        .values()
        .find(|r| {
            r.parent
                .as_ref()
                .is_some_and(|(p, call)| *p == parent && call.as_str() == "d1")
        })
        .expect("a child run")
        .id
}

#[tokio::test]
async fn a_delegation_starts_a_child_and_the_parent_waits_for_it() {
    let h = with_helper(r#"{ text = "planned" }"#);
    let (parent, memory) = h.turn("go").await;
    assert_eq!(status(&memory, parent), RunStatus::Waiting);
    assert_eq!(kind_of(&memory, parent, "d1"), ToolKind::Delegate);
    let child = child_of(&memory, parent);
    assert_eq!(status(&memory, child), RunStatus::Queued);
    let ctx = h.engine.lease(child).expect("the child runs");
    assert_eq!(ctx.history.len(), 1, "a child sees only its task");
    assert_eq!(ctx.parent_run_id, Some(parent));
    assert_eq!(ctx.lease.depth, 1);
}

#[tokio::test]
async fn the_parent_resumes_with_the_childs_output_once_the_child_completes() {
    let h = with_helper(SEND_THEN_DONE);
    let (parent, memory) = h.turn("go").await;
    let child = child_of(&memory, parent);
    let memory = h.drive(child).await;
    assert_eq!(status(&memory, child), RunStatus::Completed);
    assert_eq!(h.tool.runs(), 1, "the child's own tool ran");
    assert_eq!(status(&memory, parent), RunStatus::Queued, "resumed");
    let memory = h.drive(parent).await;
    assert_eq!(status(&memory, parent), RunStatus::Completed);
    assert_eq!(
        memory.call(parent, "d1").unwrap().state,
        CallState::Ran {
            result: json!("Done.")
        }
    );
}

#[tokio::test]
async fn a_failed_child_is_a_failed_call_the_parents_model_reads() {
    let h = with_helper(r#"{ error = "the helper broke" }"#);
    let (parent, memory) = h.turn("go").await;
    let child = child_of(&memory, parent);
    let memory = h.drive(child).await;
    assert_eq!(status(&memory, child), RunStatus::Failed);
    let memory = h.drive(parent).await;
    assert_eq!(status(&memory, parent), RunStatus::Completed);
    assert!(failure_of(&memory, parent, "d1").contains("the helper broke"));
}

#[tokio::test]
async fn a_delegation_without_a_task_is_a_failure_the_model_sees() {
    let script = r#"
      { tool_calls = [ { id = "d1", name = "helper", arguments = { } } ] },
      { text = "Done." },
    "#;
    let h = harness(
        Does::Answer,
        false,
        script,
        r#"subagents = ["helper"]"#,
        r#"
[agents.helper]
system = "helper"
model = { provider = "scripted", script = [ { text = "x" } ] }
"#,
    );
    let (parent, memory) = h.turn("go").await;
    assert_eq!(status(&memory, parent), RunStatus::Completed);
    failure_of(&memory, parent, "d1");
    assert_eq!(memory.runs.len(), 1, "no child started");
}
