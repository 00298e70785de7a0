//! A tool that asks questions within its call: each round waits as its
//! own `ask` row and invokes the tool again with the reply, after an
//! approval as without one, up to the last round a call may ask.

use agentenkit_core::call::Waiting;
use agentenkit_core::journal::names;
use agentenkit_core::{CallState, QueueMessage};

use super::*;
use crate::tool::MAX_ASK_ROUNDS;

/// Answers `run`'s round `round` of `c1` with `because`, then drives it.
async fn answer_round(h: &Harness, run: RunId, round: u32, because: &str) -> Memory {
    h.answer(
        run,
        &format!("c1~{round}"),
        Verdict::Answer {
            answers: json!({ "q": [because] }),
        },
    );
    h.drive(run).await
}

#[tokio::test]
async fn a_tool_that_asks_after_its_approval_runs_its_round_and_records_one_result() {
    let h = harness(
        Does::Asks(1),
        true,
        SEND_THEN_DONE,
        "hitl_ttl_ms = 60000",
        "",
    );
    let (run, _) = h.turn("send it").await;
    h.answer(run, "c1", Verdict::approve());
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Waiting);
    let CallState::Waiting(Waiting {
        kind, expires_at, ..
    }) = &memory.call(run, "c1~1").unwrap().state
    else {
        panic!("the round waits")
    };
    assert_eq!(*kind, ToolKind::Ask);
    assert!(expires_at.is_some(), "a tool's question expires");

    let memory = answer_round(&h, run, 1, "because").await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(h.tool.runs(), 2, "asked once, then finished");
    assert_eq!(
        tool_results(&memory, run),
        [json!({
            "rounds": 1,
            "last": [r#"Answered({"q": ["because"]})"#, { "asked": 1 }],
        })],
        "one result, the tool's, after the round"
    );
    assert!(
        matches!(memory.call(run, "c1").unwrap().state, CallState::Decided(ref d) if d.result.is_some()),
        "the approved call holds the result"
    );
    let journal = memory.journal_names(run);
    assert!(
        journal.contains(&names::asked(&ToolCallId("c1".into()), 1)),
        "{journal:?}"
    );
}

#[tokio::test]
async fn a_call_may_ask_its_last_round_and_finish_but_not_ask_once_more() {
    // The tenth round's reply reaches the tool, which finishes.
    let h = harness(Does::Asks(MAX_ASK_ROUNDS), false, SEND_THEN_DONE, "", "");
    let (run, _) = h.turn("send it").await;
    let mut memory = h.engine.snapshot();
    for round in 1..=MAX_ASK_ROUNDS {
        memory = answer_round(&h, run, round, "yes").await;
    }
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(tool_results(&memory, run)[0]["rounds"], MAX_ASK_ROUNDS);

    // One round more is a failure the model reads, and nobody is asked.
    let h = harness(
        Does::Asks(MAX_ASK_ROUNDS + 1),
        false,
        SEND_THEN_DONE,
        "",
        "",
    );
    let (run, _) = h.turn("send it").await;
    let mut memory = h.engine.snapshot();
    for round in 1..=MAX_ASK_ROUNDS {
        memory = answer_round(&h, run, round, "yes").await;
    }
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert!(memory
        .call(run, &format!("c1~{}", MAX_ASK_ROUNDS + 1))
        .is_none());
    assert!(
        failure_of(&memory, run, "c1").contains("more than 10 rounds"),
        "{}",
        failure_of(&memory, run, "c1")
    );
}

#[tokio::test]
async fn a_tool_that_waits_for_work_parks_a_job_row_checked_by_delayed_messages() {
    let h = harness(Does::Awaits, false, SEND_THEN_DONE, "", "");
    let (run, _) = h.turn("send it").await;
    let memory = h.engine.snapshot();
    assert_eq!(status(&memory, run), RunStatus::Waiting);
    let row = memory.call(run, "c1~1").expect("the wait's row");
    let CallState::Waiting(Waiting {
        kind,
        reason,
        expires_at,
        ..
    }) = &row.state
    else {
        panic!("the round waits: {:?}", row.state)
    };
    assert_eq!((*kind, reason.as_str()), (ToolKind::Park, "render"));
    assert!(expires_at.is_some(), "a wait expires");
    assert_eq!(row.arguments, json!({ "job": 7 }), "the payload is shown");
    let checks: Vec<&QueueMessage> = memory
        .outbox
        .iter()
        .filter(|m| matches!(m, QueueMessage::Poll { tool_call_id, attempt: 0, .. } if tool_call_id.as_str() == "c1~1"))
        .collect();
    assert_eq!(checks.len(), 1, "the first check goes with the park");
    assert!(
        h.segment(run).await.is_none(),
        "nothing runs while it waits"
    );

    // A check found it ready (or somebody responded): the tool is woken.
    h.answer(
        run,
        "c1~1",
        Verdict::Approve {
            payload: Some(json!({ "frames": 3 })),
            arguments: None,
            message: None,
        },
    );
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(h.tool.runs(), 2, "waited once, then finished");
    assert_eq!(
        tool_results(&memory, run),
        [
            json!({ "woken": r#"Woke(Some(Object {"frames": Number(3)}))"#, "state": { "waited": 1 } })
        ]
    );
    let journal = memory.journal_names(run);
    assert!(
        journal.contains(&names::asked(&ToolCallId("c1".into()), 1)),
        "{journal:?}"
    );
}

#[tokio::test]
async fn a_rejected_wait_ends_the_tools_wait_as_a_skip() {
    let h = harness(Does::Awaits, false, SEND_THEN_DONE, "", "");
    let (run, _) = h.turn("send it").await;
    h.answer(run, "c1~1", Verdict::Reject { reason: None });
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(tool_results(&memory, run)[0]["woken"], "Skipped");
}
