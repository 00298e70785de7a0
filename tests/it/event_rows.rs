//! The events of one commit are served one by one, each with its own id,
//! in commit order, and a reader after any of them resumes right after it.

use agentenkit_tests::*;
use serde_json::json;

/// `(id, type)` of every event the API serves after `after`.
async fn served(env: &TestEnv, thread_id: &str, after: i64) -> Vec<(i64, String)> {
    let events = env
        .get(&format!("/threads/{thread_id}/events?after={after}"))
        .await;
    events
        .as_array()
        .expect("an array of events")
        .iter()
        .map(|e| {
            (
                e["id"].as_i64().unwrap(),
                e["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_parks_three_events_are_served_with_their_own_ids() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let _worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;

    let all = served(&env, &thread_id, 0).await;
    let types: Vec<&str> = all.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        types,
        ["RUN_STARTED", "MESSAGE", "TOOL_CALL", "INPUT_REQUIRED"]
    );
    let ids: Vec<i64> = all.iter().map(|(id, _)| *id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    // A reader that stopped inside the park's commit resumes inside it.
    assert_eq!(
        served(&env, &thread_id, ids[2]).await,
        vec![(ids[3], "INPUT_REQUIRED".to_owned())]
    );
    assert_eq!(served(&env, &thread_id, ids[3]).await, vec![]);

    // The answer's commit and the finish's each add a row; every event is
    // served once, in order, whole.
    let (status, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1" }),
        )
        .await;
    assert_eq!(status.as_u16(), 200, "{answer}");
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let all = served(&env, &thread_id, 0).await;
    let types: Vec<&str> = all.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        types,
        [
            "RUN_STARTED",
            "MESSAGE",
            "TOOL_CALL",
            "INPUT_REQUIRED",
            "INPUT_RESOLVED",
            "TOOL_RESULT",
            "MESSAGE",
            "RUN_COMPLETED"
        ]
    );
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0), "{all:?}");
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let last_message = events
        .as_array()
        .unwrap()
        .iter()
        .rfind(|e| e["type"] == "MESSAGE")
        .unwrap();
    assert_eq!(last_message["data"]["message"]["role"], "assistant");
    assert!(
        last_message["data"]["message"]["content"].is_string(),
        "{last_message}"
    );
}
