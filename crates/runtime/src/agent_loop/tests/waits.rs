//! Waits other than approvals: a tool that parks for a job, and question
//! sets (the `ask` tool and the intake).

use agentenkit_core::call::Waiting;
use agentenkit_core::{CallState, RunStatus, ToolCallStatus};

use super::*;

#[tokio::test]
async fn a_tool_that_parks_waits_as_a_job_and_runs_again_with_the_payload() {
    let h = harness(Does::ParkForJob, false, SEND_THEN_DONE, "", "");
    let (run, memory) = h.turn("render").await;
    assert_eq!(status(&memory, run), RunStatus::Waiting);
    assert_eq!(kind_of(&memory, run, "c1"), ToolKind::Park);
    assert_eq!(
        memory.call(run, "c1").unwrap().arguments,
        json!({ "job": 7 }),
        "the job's payload is what the request shows"
    );
    h.answer(
        run,
        "c1",
        Verdict::Approve {
            payload: Some(json!("frame.png")),
            arguments: None,
            message: None,
        },
    );
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(h.tool.runs(), 2, "the first half, then the second");
    assert_eq!(
        tool_results(&memory, run),
        [json!({ "rendered": "frame.png" })]
    );
}

#[tokio::test]
async fn a_park_request_is_kept_before_the_park_so_a_retry_does_not_run_the_tool_again() {
    let mut h = harness(Does::ParkForJob, false, SEND_THEN_DONE, "", "");
    let run = h.engine.start_turn("agent", "render");
    h.crash_at("before:park");
    assert!(matches!(
        h.segment(run).await,
        Some(Err(SegmentError::Crashed))
    ));
    let memory = h.engine.snapshot();
    assert!(matches!(
        memory.call(run, "c1").unwrap().state,
        CallState::Proposed {
            park_request: Some(_)
        }
    ));
    h.crash = None;
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Waiting);
    assert_eq!(h.tool.runs(), 1, "the retried step read the kept request");
}

const ASKS: &str = r#"
  { tool_calls = [ { id = "q1", name = "ask", arguments = { questions = [
      { id = "color", prompt = "Which?", options = [ { value = "red", label = "Red" }, { value = "blue", label = "Blue" } ], defaults = ["red"] } ] } } ] },
  { text = "Done." },
"#;

#[tokio::test]
async fn a_question_set_waits_without_an_expiry() {
    let h = harness(Does::Answer, false, ASKS, "ask = true", "");
    let (run, memory) = h.turn("help me choose").await;
    assert_eq!(status(&memory, run), RunStatus::Waiting);
    let CallState::Waiting(Waiting {
        kind, expires_at, ..
    }) = &memory.call(run, "q1").unwrap().state
    else {
        panic!("waiting")
    };
    assert_eq!((*kind, *expires_at), (ToolKind::Ask, None));
}

#[tokio::test]
async fn answers_resume_the_run_with_the_resolved_values() {
    let h = harness(Does::Answer, false, ASKS, "ask = true", "");
    let (run, _) = h.turn("help me choose").await;
    h.answer(
        run,
        "q1",
        Verdict::Answer {
            answers: json!({ "color": ["blue"] }),
        },
    );
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    let read = &tool_results(&memory, run)[0];
    assert_eq!(read["answers"], json!({ "color": ["blue"] }));
    assert_eq!(read["skipped"], json!(false));
}

#[tokio::test]
async fn a_skipped_question_set_takes_its_defaults_and_says_so() {
    let h = harness(Does::Answer, false, ASKS, "ask = true", "");
    let (run, _) = h.turn("help me choose").await;
    h.answer(run, "q1", Verdict::Skip);
    let memory = h.drive(run).await;
    assert_eq!(
        memory.call(run, "q1").unwrap().state.status(),
        ToolCallStatus::Rejected
    );
    let read = &tool_results(&memory, run)[0];
    assert_eq!(read["answers"], json!({ "color": ["red"] }));
    assert_eq!(read["skipped"], json!(true));
    assert_eq!(read["defaulted"], json!(["color"]));
}

const INTAKE: &str = r#"
[agents.agent.intake]
when = "thread-start"
questions = [ { id = "tone", prompt = "Tone?", options = [ { value = "formal", label = "Formal" }, { value = "casual", label = "Casual" } ], defaults = ["casual"] } ]
"#;

#[tokio::test]
async fn an_intake_asks_before_the_first_step_and_only_on_the_threads_first_turn() {
    let h = harness(Does::Answer, false, r#"{ text = "Hello." }"#, "", INTAKE);
    let (run, memory) = h.turn("hi").await;
    assert_eq!(status(&memory, run), RunStatus::Waiting);
    assert_eq!(kind_of(&memory, run, "intake"), ToolKind::Ask);
    h.answer(
        run,
        "intake",
        Verdict::Answer {
            answers: json!({ "tone": ["formal"] }),
        },
    );
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    let thread = memory.run(run).unwrap().thread;
    let second = h.engine.start_on(thread, "agent", "again");
    let memory = h.drive(second).await;
    assert_eq!(
        status(&memory, second),
        RunStatus::Completed,
        "not asked again"
    );
    assert!(memory.call(second, "intake").is_none());
}
