//! Messages that steer a working run (`onActive: "steer"`), over HTTP.

use super::*;

#[tokio::test]
async fn a_steering_message_joins_a_parked_run_when_it_resumes() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approving(CALL_THEN_DONE, &tool.url, "")).await;
    let worker = env.spawn_worker();
    let (thread, first) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread, 1).await;
    let (status, body) = post_message(
        &env,
        &thread,
        json!({ "content": "also cc Dana", "onActive": "steer" }),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body, json!({ "runId": first, "steered": true }));
    let view = env.get(&format!("/threads/{thread}")).await;
    assert_eq!(view["queuedMessages"][0]["steers"], first.as_str());
    assert_eq!(view["queuedMessages"][0]["content"], "also cc Dana");
    // Listed once it joins, not before; told on the stream at once.
    assert_eq!(user_messages(&env, &thread).await, ["send it"]);
    let events = env.get(&format!("/threads/{thread}/events")).await;
    let queued = first_event(&events, "MESSAGE_QUEUED");
    assert_eq!(
        queued["data"],
        json!({ "runId": first, "content": "also cc Dana", "steers": true })
    );

    approve_call(&env, &first, "c1").await;
    assert_eq!(env.wait_run_finished(&first).await["status"], "completed");
    assert_eq!(
        user_messages(&env, &thread).await,
        ["send it", "also cc Dana"]
    );
    let messages = env.get(&format!("/threads/{thread}/messages")).await;
    let joined = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"] == "also cc Dana")
        .unwrap();
    assert_eq!(joined["runId"], first.as_str());
    assert_eq!(joined["steered"], true);
    let (status, body) = env
        .call(
            "POST",
            &format!("/threads/{thread}/messages/{}/edit", joined["id"]),
            Some(ALICE),
            Some(json!({ "content": "cc Eve" })),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "NotAUserMessage", "part of a turn, not one");
    let journal = env.journal_names(&first).await;
    let at = journal
        .iter()
        .position(|n| n == "steer:1")
        .expect("journaled");
    assert_eq!(
        journal[at + 1],
        "model:1",
        "right before the next model call"
    );
    assert!(env.get(&format!("/threads/{thread}")).await["queuedMessages"].is_null());
    assert_eq!(
        env.event_types(&thread)
            .await
            .iter()
            .filter(|t| *t == "RUN_STARTED")
            .count(),
        1,
        "no turn of its own"
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_steering_message_a_run_never_reads_starts_a_turn_of_its_own() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approving(CALL_THEN_DONE, &tool.url, "")).await;
    let worker = env.spawn_worker();
    let (thread, first) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread, 1).await;
    let (_, body) = post_message(
        &env,
        &thread,
        json!({ "content": "also cc Dana", "onActive": "steer" }),
    )
    .await;
    assert_eq!(body["steered"], true);
    // The run ends without another model call: stopped.
    env.post(&format!("/threads/{thread}/stop"), json!({}))
        .await;
    assert_eq!(env.wait_run_finished(&first).await["status"], "cancelled");
    let pending = env.wait_pending(&thread, 1).await;
    let next = pending[0]["runId"].as_str().unwrap().to_owned();
    assert_ne!(next, first);
    assert_eq!(
        user_messages(&env, &thread).await,
        ["send it", "also cc Dana"]
    );
    worker.stop().await.unwrap();
    env.finish().await;
}
