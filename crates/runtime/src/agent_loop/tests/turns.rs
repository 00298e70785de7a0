//! Turns without a wait: answers, tools that run, fail or are missing,
//! retries, and what a later turn sees.

use agentenkit_core::{CallState, EventType, RunStatus};

use super::*;

#[tokio::test]
async fn a_text_answer_completes_the_run_in_one_commit() {
    let h = harness(Does::Answer, false, r#"{ text = "Hello." }"#, "", "");
    let (run, memory) = h.turn("hi").await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(output(&memory, run).as_deref(), Some("Hello."));
    assert_eq!(memory.journal_names(run), ["model:0"]);
    assert_eq!(memory.commits, 1, "the model's answer and the end together");
    let thread = memory.run(run).unwrap().thread;
    assert_eq!(
        memory.event_types(thread).first(),
        Some(&EventType::RunStarted)
    );
    assert_eq!(
        memory.event_types(thread).last(),
        Some(&EventType::RunCompleted)
    );
}

#[tokio::test]
async fn a_function_call_runs_once_and_its_result_is_what_the_model_reads() {
    let h = harness(Does::Answer, false, SEND_THEN_DONE, "", "");
    let (run, memory) = h.turn("send it").await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(h.tool.runs(), 1);
    assert_eq!(
        memory.journal_names(run),
        ["model:0", "persist:toolcall:c1", "exec:c1", "model:1"]
    );
    let call = memory.call(run, "c1").unwrap();
    assert_eq!(
        call.state,
        CallState::Ran {
            result: json!({ "ran": 1 })
        }
    );
    assert_eq!(tool_results(&memory, run), [json!({ "ran": 1 })]);
    assert_eq!(h.tool.seen()[0].0, json!({ "to": "a@b.c" }));
}

#[tokio::test]
async fn a_failing_tool_is_a_failure_the_model_sees_and_the_run_goes_on() {
    let h = harness(Does::Fail, false, SEND_THEN_DONE, "", "");
    let (run, memory) = h.turn("send it").await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    let result = failure_of(&memory, run, "c1");
    assert!(result.contains("the mail server said no"), "{result}");
}

/// A call the model got wrong: a tool nobody has, arguments that do not
/// fit the tool's schema.
#[tokio::test]
async fn a_call_the_model_got_wrong_is_a_failure_it_sees_and_nothing_runs() {
    for call in [
        r#"{ id = "c1", name = "nope", arguments = {} }"#,
        r#"{ id = "c1", name = "send", arguments = { to = 5 } }"#,
    ] {
        let script = format!(r#"{{ tool_calls = [ {call} ] }}, {{ text = "Done." }},"#);
        let h = harness(Does::Answer, false, &script, "", "");
        let (run, memory) = h.turn("go").await;
        assert_eq!(status(&memory, run), RunStatus::Completed, "{call}");
        failure_of(&memory, run, "c1");
        assert_eq!(h.tool.runs(), 0, "{call}");
    }
}

#[tokio::test]
async fn an_unavailable_tool_is_retried_and_its_output_journaled_once() {
    let h = harness(Does::Unavailable(2), false, SEND_THEN_DONE, "", "");
    let (run, memory) = h.turn("send it").await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(h.tool.runs(), 3, "two failures, then it ran");
    assert_eq!(
        memory.run(run).unwrap().attempts,
        0,
        "the step's progress cleared its failed attempts"
    );
    let execs = memory
        .journal_names(run)
        .iter()
        .filter(|n| n.starts_with("exec:"))
        .count();
    assert_eq!(execs, 1);
    assert_eq!(
        memory.call(run, "c1").unwrap().state,
        CallState::Ran {
            result: json!({ "ran": 3 })
        }
    );
}

#[tokio::test]
async fn a_tool_unavailable_past_the_attempts_fails_the_run() {
    let h = harness(Does::Unavailable(99), false, SEND_THEN_DONE, "", "");
    let (run, memory) = h.turn("send it").await;
    assert_eq!(status(&memory, run), RunStatus::Failed);
    assert_eq!(h.tool.runs(), 3, "max_attempts");
    let error = memory.run(run).unwrap().error.clone().unwrap();
    assert!(error.contains("the mail server is down"), "{error}");
}

#[tokio::test]
async fn a_failing_model_is_retried_then_the_run_fails_with_its_error() {
    let h = harness(Does::Answer, false, r#"{ error = "overloaded" }"#, "", "");
    let (run, memory) = h.turn("hi").await;
    assert_eq!(status(&memory, run), RunStatus::Failed);
    assert!(
        memory.journal_names(run).is_empty(),
        "no answer was journaled"
    );
    assert!(memory
        .run(run)
        .unwrap()
        .error
        .as_deref()
        .unwrap()
        .contains("overloaded"));
}

#[tokio::test]
async fn a_second_turn_sees_the_first_turns_conversation() {
    let h = harness(Does::Answer, false, SEND_THEN_DONE, "", "");
    let (first, memory) = h.turn("send it").await;
    let thread = memory.run(first).unwrap().thread;
    let second = h.engine.start_on(thread, "agent", "and again");
    let ctx = h.engine.lease(second).expect("queued");
    let roles: Vec<&str> = ctx.history.iter().map(|m| m.role()).collect();
    // first turn: user, the call, its result, the answer; then this turn's
    // user message
    assert_eq!(roles, ["user", "assistant", "tool", "assistant", "user"]);
    assert!(ctx.journal.is_empty(), "a new run starts its own journal");
}

#[tokio::test]
async fn two_calls_of_one_step_both_run_in_order() {
    let script = r#"
      { tool_calls = [ { id = "c1", name = "send", arguments = { to = "a" } },
                       { id = "c2", name = "send", arguments = { to = "b" } } ] },
      { text = "Done." },
    "#;
    let h = harness(Does::Answer, false, script, "", "");
    let (run, memory) = h.turn("go").await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    let sent: Vec<Value> = h.tool.seen().into_iter().map(|(a, _)| a).collect();
    assert_eq!(sent, [json!({ "to": "a" }), json!({ "to": "b" })]);
    assert_eq!(tool_results(&memory, run).len(), 2);
}
