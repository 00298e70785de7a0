//! Calls a person approves: the park, and what each answer resumes.

use agentenkit_core::call::Waiting;
use agentenkit_core::{CallState, EventType, QueueMessage, RunStatus, ToolCallStatus};

use super::*;

fn approve() -> Verdict {
    Verdict::approve()
}

#[tokio::test]
async fn an_approval_parks_the_run_and_nothing_runs() {
    let h = harness(Does::Answer, true, SEND_THEN_DONE, "", "");
    let (run, memory) = h.turn("send it").await;
    assert_eq!(status(&memory, run), RunStatus::Waiting);
    assert_eq!(h.tool.runs(), 0);
    let call = memory.call(run, "c1").unwrap();
    let CallState::Waiting(Waiting {
        kind, expires_at, ..
    }) = &call.state
    else {
        panic!("{:?}", call.state)
    };
    assert_eq!(*kind, ToolKind::Approval);
    assert!(expires_at.is_some(), "an approval expires");
    let thread = memory.run(run).unwrap().thread;
    assert!(memory
        .event_types(thread)
        .contains(&EventType::InputRequired));
    assert!(
        memory.outbox.iter().any(|m| matches!(m,
            QueueMessage::Expiry { tool_call_id, .. } if tool_call_id.as_str() == "c1")),
        "its expiry is scheduled"
    );
}

#[tokio::test]
async fn an_approved_call_runs_once_on_resume_and_keeps_its_result() {
    let h = harness(Does::Answer, true, SEND_THEN_DONE, "", "");
    let (run, _) = h.turn("send it").await;
    h.answer(run, "c1", approve());
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(h.tool.runs(), 1);
    let call = memory.call(run, "c1").unwrap();
    assert_eq!(call.state.status(), ToolCallStatus::Executed);
    assert_eq!(call.state.result(), Some(&json!({ "ran": 1 })));
    let (_, approval) = &h.tool.seen()[0];
    assert_eq!(approval.as_ref().map(|a| a.approved), Some(true));
}

#[tokio::test]
async fn a_rejected_call_never_runs_and_the_model_reads_the_reason() {
    let h = harness(Does::Answer, true, SEND_THEN_DONE, "", "");
    let (run, _) = h.turn("send it").await;
    h.answer(
        run,
        "c1",
        Verdict::Reject {
            reason: Some("not to them".into()),
        },
    );
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(h.tool.runs(), 0);
    assert_eq!(
        tool_results(&memory, run),
        [json!({ "denied": true, "reason": "not to them" })]
    );
}

#[tokio::test]
async fn an_expired_call_never_runs_and_the_model_reads_the_timeout() {
    let h = harness(Does::Answer, true, SEND_THEN_DONE, "", "");
    let (run, _) = h.turn("send it").await;
    h.engine
        .expire(run, &ToolCallId("c1".into()), chrono::Utc::now())
        .unwrap();
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(h.tool.runs(), 0);
    assert_eq!(
        tool_results(&memory, run),
        [agentenkit_core::call::expired_result()]
    );
}

#[tokio::test]
async fn edited_arguments_are_what_the_tool_runs_with_and_the_model_is_told() {
    let h = harness(Does::Answer, true, SEND_THEN_DONE, "", "");
    let (run, _) = h.turn("send it").await;
    h.answer(
        run,
        "c1",
        Verdict::Approve {
            payload: None,
            arguments: Some(json!({ "to": "ops@b.c" })),
            message: Some("ops instead".into()),
        },
    );
    let memory = h.drive(run).await;
    assert_eq!(h.tool.seen()[0].0, json!({ "to": "ops@b.c" }));
    let result = &tool_results(&memory, run)[0];
    assert_eq!(result["editedArguments"], json!({ "to": "ops@b.c" }));
    assert_eq!(result["message"], json!("ops instead"));
    assert_eq!(result["result"], json!({ "ran": 1 }));
}

#[tokio::test]
async fn two_approvals_of_one_step_resume_the_run_only_once_both_are_answered() {
    let script = r#"
      { tool_calls = [ { id = "c1", name = "send", arguments = { to = "a" } },
                       { id = "c2", name = "send", arguments = { to = "b" } } ] },
      { text = "Done." },
    "#;
    let h = harness(Does::Answer, true, script, "", "");
    let (run, memory) = h.turn("go").await;
    assert_eq!(status(&memory, run), RunStatus::Waiting);
    h.answer(run, "c1", approve());
    assert_eq!(
        status(&h.engine.snapshot(), run),
        RunStatus::Waiting,
        "c2 still waits"
    );
    assert!(h.segment(run).await.is_none(), "nothing to run yet");
    h.answer(run, "c2", Verdict::Reject { reason: None });
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    let sent: Vec<Value> = h.tool.seen().into_iter().map(|(a, _)| a).collect();
    assert_eq!(sent, [json!({ "to": "a" })], "only the approved one ran");
    let segments = memory
        .outbox
        .iter()
        .filter(|m| matches!(m, QueueMessage::Segment { run_id, .. } if *run_id == run))
        .count();
    assert_eq!(segments, 2, "the start and one resume");
}

#[tokio::test]
async fn a_call_denied_before_is_refused_again_without_asking() {
    let script = r#"
      { tool_calls = [ { id = "c1", name = "send", arguments = { to = "a" } } ] },
      { tool_calls = [ { id = "c2", name = "send", arguments = { to = "a" } } ] },
      { text = "Done." },
    "#;
    let h = harness(Does::Answer, true, script, "", "");
    let (run, _) = h.turn("go").await;
    h.answer(
        run,
        "c1",
        Verdict::Reject {
            reason: Some("never".into()),
        },
    );
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed, "no second park");
    let again = memory.call(run, "c2").unwrap();
    assert!(
        matches!(again.state, CallState::Refused { .. }),
        "{:?}",
        again.state
    );
    assert_eq!(h.tool.runs(), 0);
}

#[tokio::test]
async fn an_answer_to_a_call_that_is_not_waiting_is_refused_by_its_state() {
    let h = harness(Does::Answer, true, SEND_THEN_DONE, "", "");
    let (run, _) = h.turn("send it").await;
    h.answer(run, "c1", approve());
    let memory = h.engine.snapshot();
    let call = memory.call(run, "c1").unwrap();
    let again = h
        .engine
        .answer(run, &ToolCallId("c1".into()), reply(call, &approve()));
    assert!(again.is_err(), "a decided call takes no second answer");
    assert_eq!(h.engine.snapshot().outbox.len(), memory.outbox.len());
}
