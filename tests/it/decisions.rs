//! Decisions beyond yes and no: an approval with edited arguments or a
//! note, a rejection whose reason reaches the model, and an answer bound to
//! the exact call it was shown (`argumentsHash`).

use agentenkit_core::canonical::arguments_hash;
use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::json;

#[tokio::test]
async fn an_approval_with_edited_arguments_runs_the_tool_once_with_them_and_the_model_is_told() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    let pending = env.wait_pending(&thread_id, 1).await;
    let proposed = json!({ "to": "a@b.c" });
    let hash = arguments_hash(&proposed);
    assert_eq!(pending[0]["argumentsHash"], hash.as_str());
    let inbox = env.get("/agent/inbox").await;
    assert_eq!(
        inbox[0]["argumentsHash"],
        hash.as_str(),
        "the inbox shows it"
    );

    let edited = json!({ "to": "boss@b.c" });
    let (status, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1", "arguments": edited,
                    "message": "send it to my boss instead", "argumentsHash": hash }),
        )
        .await;
    assert_eq!(
        (status, answer["delivered"].clone()),
        (StatusCode::OK, json!(true))
    );
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");

    assert_eq!(tool.calls(), 1, "the tool ran once");
    assert_eq!(
        tool.bodies()[0]["arguments"],
        edited,
        "with the edited arguments"
    );
    // The model reads the output with the edits and the note.
    let content = tool_message(&env, &thread_id).await;
    assert_eq!(content["result"]["ok"], true);
    assert_eq!(content["editedArguments"], edited);
    assert_eq!(content["message"], "send it to my boss instead");
    // The journal keeps the decision: who, when, the hash decided on, the
    // edits; the model's entry keeps what it proposed.
    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    let decision = journal_value(&journal, "tool:");
    assert_eq!(decision["answeredBy"], "alice");
    assert!(decision["answeredAt"].is_string());
    assert_eq!(decision["argumentsHash"], hash.as_str());
    assert_eq!(decision["arguments"], edited);
    assert_eq!(decision["message"], "send it to my boss instead");
    assert_eq!(
        journal_value(&journal, "model:0")["toolCalls"][0]["arguments"],
        proposed
    );
    // So does the stream's INPUT_RESOLVED.
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let resolved = first_event(&events, "INPUT_RESOLVED");
    assert_eq!(resolved["data"]["arguments"], edited);
    assert_eq!(
        first_event(&events, "INPUT_REQUIRED")["data"]["argumentsHash"],
        hash.as_str()
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_decision_that_cannot_stand_changes_nothing() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    let hash = arguments_hash(&json!({ "to": "a@b.c" }));
    let other = arguments_hash(&json!({ "to": "x@y.z" }));

    for (path, body, expected, code) in [
        // Edits that do not fit the tool's schema.
        (
            "/agent/tool-call/approve",
            json!({ "arguments": { "to": 7 } }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "InvalidArguments",
        ),
        (
            "/agent/tool-call/approve",
            json!({ "arguments": ["a"] }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "InvalidArguments",
        ),
        // Shown other arguments than the call has.
        (
            "/agent/tool-call/approve",
            json!({ "argumentsHash": other }),
            StatusCode::CONFLICT,
            "ArgumentsHashMismatch",
        ),
        (
            "/agent/tool-call/reject",
            json!({ "argumentsHash": other }),
            StatusCode::CONFLICT,
            "ArgumentsHashMismatch",
        ),
        // Not a hash at all.
        (
            "/agent/tool-call/approve",
            json!({ "argumentsHash": "abc" }),
            StatusCode::BAD_REQUEST,
            "BadRequest",
        ),
        (
            "/agent/tool-call/approve",
            json!({ "argumentsHash": hash.to_uppercase() }),
            StatusCode::BAD_REQUEST,
            "BadRequest",
        ),
    ] {
        let mut request = json!({ "runId": run_id, "toolCallId": "c1" });
        request
            .as_object_mut()
            .unwrap()
            .extend(body.as_object().unwrap().clone());
        let (status, answer) = env.reply(path, ALICE, request.clone()).await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (expected, Some(code)),
            "{request}: {answer}"
        );
        if code == "InvalidArguments" {
            assert!(!answer["issues"].as_array().unwrap().is_empty(), "{answer}");
        }
    }
    let (status, answer) = env
        .call(
            "POST",
            "/agent/hitl/respond",
            Some(ALICE),
            Some(json!({ "threadId": thread_id, "toolCallId": "c1", "approved": true, "argumentsHash": other })),
        )
        .await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (StatusCode::CONFLICT, Some("ArgumentsHashMismatch"))
    );
    assert_eq!(env.wait_pending(&thread_id, 1).await.len(), 1, "still open");
    assert_eq!(tool.calls(), 0);

    // A rejection with the right hash and a reason: the model reads it.
    let (_, answer) = env
        .reply(
            "/agent/tool-call/reject",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1", "argumentsHash": hash,
                    "reason": "not to that address" }),
        )
        .await;
    assert_eq!(answer["delivered"], true);
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(
        tool_message(&env, &thread_id).await,
        json!({ "denied": true, "reason": "not to that address" })
    );
    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    assert_eq!(
        journal_value(&journal, "tool:")["argumentsHash"],
        hash.as_str()
    );
    assert_eq!(tool.calls(), 0);
    worker.stop().await.unwrap();
    env.finish().await;
}

/// A worker killed between the edited decision's entry and the tool's run:
/// the next worker runs the tool once, with the edited arguments.
#[tokio::test]
async fn a_worker_killed_after_an_edited_decision_runs_the_edited_call_once() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let parker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    parker.stop().await.unwrap();

    let edited = json!({ "to": "edited@b.c" });
    let (_, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1", "arguments": edited }),
        )
        .await;
    assert_eq!(answer["delivered"], true);
    // Dies once the decision is read and the call is about to run.
    let crashing = env.spawn_crashing_worker("invoke:c1");
    assert!(crashing.died().await.is_err(), "the crash point fired");
    assert_eq!(tool.calls(), 0, "the tool did not run before the crash");

    let worker = env.spawn_worker();
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 1, "once");
    assert_eq!(tool.bodies()[0]["arguments"], edited);
    assert_eq!(
        tool_message(&env, &thread_id).await["editedArguments"],
        edited
    );
    worker.stop().await.unwrap();
    env.finish().await;
}
