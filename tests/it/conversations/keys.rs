//! A message or an edit sent again with its `Idempotency-Key`.

use super::*;

/// A POST of `body` to `path` with `Idempotency-Key: key`: the status, the
/// body, and whether the answer says it is a replay.
async fn post_keyed(
    env: &TestEnv,
    path: &str,
    key: &str,
    body: Value,
) -> (StatusCode, Value, bool) {
    let response = env
        .http
        .post(env.url(path))
        .bearer_auth(ALICE)
        .header("Idempotency-Key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = StatusCode::from_u16(response.status().as_u16()).unwrap();
    let replayed = response.headers().get("idempotent-replayed").is_some();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body, replayed)
}

#[tokio::test]
async fn a_message_or_an_edit_sent_again_with_its_key_is_done_once() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approving(CALL_THEN_DONE, &tool.url, "")).await;
    let worker = env.spawn_worker();
    let (thread, first) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread, 1).await;
    let messages = format!("/threads/{thread}/messages");

    // Queued once, whatever the retries.
    let queue = json!({ "content": "also cc Dana", "onActive": "enqueue" });
    let (status, once, replayed) = post_keyed(&env, &messages, "k-1", queue.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{once}");
    assert!(!replayed);
    let (status, again, replayed) = post_keyed(&env, &messages, "k-1", queue).await;
    assert_eq!(
        (status, &again, replayed),
        (StatusCode::ACCEPTED, &once, true)
    );
    let view = env.get(&format!("/threads/{thread}")).await;
    assert_eq!(view["queuedMessages"].as_array().unwrap().len(), 1);
    // The key with another message is refused; nothing changes.
    let (status, body, _) = post_keyed(
        &env,
        &messages,
        "k-1",
        json!({ "content": "cc Eve", "onActive": "enqueue" }),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"], "IdempotencyKeyReused");

    // An interrupt retried does not interrupt the turn it started.
    let stop = json!({ "content": "no, wait", "onActive": "interrupt" });
    let (_, interrupted, _) = post_keyed(&env, &messages, "k-2", stop.clone()).await;
    assert_eq!(interrupted["interrupted"], json!([first]));
    let second = interrupted["runId"].as_str().unwrap().to_owned();
    env.wait_pending(&thread, 1).await;
    let (status, again, replayed) = post_keyed(&env, &messages, "k-2", stop).await;
    assert_eq!(
        (status, &again, replayed),
        (StatusCode::ACCEPTED, &interrupted, true)
    );
    assert_eq!(
        env.get(&format!("/runs/{second}")).await["status"],
        "waiting",
        "still the current turn"
    );

    // So is an edit.
    let listed = env.get(&messages).await;
    let no_wait = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"] == "no, wait")
        .unwrap()["id"]
        .clone();
    let edit_path = format!("{messages}/{no_wait}/edit");
    let edit = json!({ "content": "wait a moment" });
    let (status, edited, _) = post_keyed(&env, &edit_path, "k-3", edit.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{edited}");
    let third = edited["runId"].as_str().unwrap().to_owned();
    let (status, again, replayed) = post_keyed(&env, &edit_path, "k-3", edit).await;
    assert_eq!(
        (status, &again, replayed),
        (StatusCode::ACCEPTED, &edited, true)
    );
    assert_eq!(
        env.get(&format!("/threads/{thread}")).await["currentRunId"],
        third.as_str()
    );
    // A message refused (`reject`) records nothing: sent again once the
    // thread is free, it starts its turn.
    let (status, _, _) = post_keyed(&env, &messages, "k-4", json!({ "content": "later" })).await;
    assert_eq!(status, StatusCode::CONFLICT);
    env.post(&format!("/threads/{thread}/stop"), json!({}))
        .await;
    // The stop started the queued message; wait for it and stop it too.
    let queued_run = once["runId"].as_str().unwrap().to_owned();
    env.wait_pending(&thread, 1).await;
    env.post(&format!("/threads/{thread}/stop"), json!({}))
        .await;
    env.wait_status(&thread, "IDLE").await;
    assert_eq!(
        env.get(&format!("/runs/{queued_run}")).await["status"],
        "cancelled"
    );
    let (status, later, replayed) =
        post_keyed(&env, &messages, "k-4", json!({ "content": "later" })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{later}");
    assert!(!replayed);
    let (_, again, replayed) =
        post_keyed(&env, &messages, "k-4", json!({ "content": "later" })).await;
    assert_eq!((&again, replayed), (&later, true));
    worker.stop().await.unwrap();
    env.finish().await;
}
