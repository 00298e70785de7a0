//! `POST /agent/decisions`: many decisions at once, each settled on its own
//! with its own result, and safe to retry with an `Idempotency-Key`.

use agentenkit_core::canonical::arguments_hash;
use agentenkit_core::Owner;
use agentenkit_runtime::replies::{Approve, Decision};
use agentenkit_store::{Claim, KeyTimes, RecordedItem};
use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::{json, Value};

/// POSTs a batch as ALICE, with `key` as its `Idempotency-Key`; returns the
/// status, whether it is a stored response, and the body.
async fn decide(env: &TestEnv, key: Option<&str>, body: &Value) -> (StatusCode, bool, Value) {
    let mut request = env
        .http
        .post(env.url("/agent/decisions"))
        .bearer_auth(ALICE)
        .json(body);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let response = request.send().await.expect("request");
    let status = StatusCode::from_u16(response.status().as_u16()).unwrap();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let body = response.json().await.unwrap_or(Value::Null);
    (status, replayed, body)
}

/// A run waiting for two approvals (c1, c2), and a worker.
async fn two_waiting() -> (ToolServer, TestEnv, WorkerHandle, String, String) {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(TWO_CALLS, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send both").await;
    env.wait_pending(&thread_id, 2).await;
    (tool, env, worker, thread_id, run_id)
}

fn statuses(results: &Value) -> Vec<(u64, Value)> {
    results["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results in {results}"))
        .iter()
        .map(|r| {
            let outcome = r["body"]
                .get("delivered")
                .cloned()
                .unwrap_or_else(|| r["body"]["error"].clone());
            (r["status"].as_u64().unwrap(), outcome)
        })
        .collect()
}

#[tokio::test]
async fn many_decisions_at_once_are_each_settled_on_their_own() {
    let (tool, env, worker, thread_id, run_id) = two_waiting().await;
    let wrong_hash = arguments_hash(&json!({ "to": "someone@else" }));

    let (status, _, results) = decide(
        &env,
        None,
        &json!({ "decisions": [
            // Refused on their own: the call waits for approve or deny, not
            // answers; its arguments are not those shown.
            { "action": "answer", "runId": run_id, "toolCallId": "c2", "answers": {} },
            { "action": "deny", "runId": run_id, "toolCallId": "c2", "argumentsHash": wrong_hash },
            { "action": "approve", "runId": run_id, "toolCallId": "c1", "message": "go" },
            { "action": "deny", "runId": run_id, "toolCallId": "c2", "reason": "not two" },
            // First answer won.
            { "action": "approve", "runId": run_id, "toolCallId": "c1" },
            // Not a call of the caller's.
            { "action": "skip", "runId": run_id, "toolCallId": "zz" },
        ]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{results}");
    assert_eq!(
        statuses(&results),
        [
            (409, json!("HumanReplyMismatchError")),
            (409, json!("ArgumentsHashMismatch")),
            (200, json!(true)),
            (200, json!(true)),
            (200, json!(false)),
            (404, json!("NotFound")),
        ]
    );
    assert_eq!(
        results["results"][4]["body"]["error"],
        "This request was already answered"
    );
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 1, "only c1 ran");
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    let denial = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["toolCallId"] == "c2")
        .unwrap();
    assert_eq!(
        denial["content"],
        json!({ "denied": true, "reason": "not two" })
    );
    // Who decided is the key's owner, for each item.
    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    let decided_by: Vec<&Value> = journal
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"].as_str().unwrap().starts_with("tool:"))
        .map(|e| &e["value"]["answeredBy"])
        .collect();
    assert_eq!(decided_by, [&json!("alice"), &json!("alice")]);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_retry_with_the_same_key_gets_the_same_results_and_another_body_is_refused() {
    let (tool, env, worker, thread_id, run_id) = two_waiting().await;
    let body = json!({ "decisions": [
        { "action": "approve", "runId": run_id, "toolCallId": "c1" },
        { "action": "skip", "runId": run_id, "toolCallId": "zz" },
    ]});

    let (status, replayed, first) = decide(&env, Some("batch-1"), &body).await;
    assert_eq!((status, replayed), (StatusCode::OK, false), "{first}");
    assert_eq!(
        statuses(&first),
        [(200, json!(true)), (404, json!("NotFound"))]
    );
    // The same body (its keys in another order) gets the stored response,
    // not "already answered".
    let reordered = json!({ "decisions": [
        { "toolCallId": "c1", "runId": run_id, "action": "approve" },
        { "toolCallId": "zz", "action": "skip", "runId": run_id },
    ]});
    let (status, replayed, again) = decide(&env, Some("batch-1"), &reordered).await;
    assert_eq!((status, replayed), (StatusCode::OK, true));
    assert_eq!(again, first);
    // Another body with the key is refused, and changes nothing.
    let other = json!({ "decisions": [
        { "action": "deny", "runId": run_id, "toolCallId": "c2" },
    ]});
    let (status, _, refused) = decide(&env, Some("batch-1"), &other).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(refused["error"], "IdempotencyKeyReused");
    assert_eq!(env.wait_pending(&thread_id, 1).await[0]["toolCallId"], "c2");
    // Keys are the caller's own: Bob's "batch-1" is another key.
    let (status, bobs) = env
        .call("POST", "/agent/decisions", Some(BOB), Some(other.clone()))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(statuses(&bobs), [(404, json!("NotFound"))]);

    // Two requests at once with a new key: one settles, the other is told
    // to retry or gets the stored response; c2 is denied once.
    let deny = json!({ "decisions": [
        { "action": "deny", "runId": run_id, "toolCallId": "c2", "reason": "no" },
    ]});
    let (a, b) = tokio::join!(
        decide(&env, Some("batch-2"), &deny),
        decide(&env, Some("batch-2"), &deny)
    );
    let mut outcomes = [a, b];
    outcomes.sort_by_key(|(status, replayed, _)| (status.as_u16(), *replayed));
    let (first, second) = (&outcomes[0], &outcomes[1]);
    assert_eq!((first.0, first.1), (StatusCode::OK, false), "{outcomes:?}");
    assert_eq!(statuses(&first.2), [(200, json!(true))]);
    match second.0 {
        StatusCode::OK => assert_eq!((second.1, &second.2), (true, &first.2)),
        StatusCode::CONFLICT => assert_eq!(second.2["error"], "IdempotencyKeyInUse"),
        other => panic!("unexpected {other}: {outcomes:?}"),
    }
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 1);

    // A key past its retention (24 h) is new again, whatever the reaper
    // has done yet.
    env.sql("UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE key = 'batch-1'")
        .await;
    let (status, replayed, fresh) = decide(&env, Some("batch-1"), &other).await;
    assert_eq!((status, replayed), (StatusCode::OK, false), "{fresh}");
    assert_eq!(statuses(&fresh), [(200, json!(false))], "c2 was answered");
    worker.stop().await.unwrap();
    env.finish().await;
}

/// An attempt cut off after settling its first item: the key is held (a
/// retry is told to wait) until the hold goes stale; then a retry answers
/// that item as it was answered and settles the rest.
#[tokio::test]
async fn a_retry_after_a_cut_off_attempt_answers_what_it_settled_as_it_was_settled() {
    let (tool, env, worker, _thread_id, run_id) = two_waiting().await;
    let body = json!({ "decisions": [
        { "action": "approve", "runId": run_id, "toolCallId": "c1" },
        { "action": "deny", "runId": run_id, "toolCallId": "c2", "reason": "no" },
    ]});

    // What the first attempt did before it died: claimed the key, settled
    // item 0 and recorded it in the same transaction.
    let alice = Owner("alice".into());
    let claim = env
        .store
        .claim_idempotency_key(
            &alice,
            "batch-9",
            &arguments_hash(&body),
            KeyTimes::default(),
        )
        .await
        .unwrap();
    let Claim::Process { recorded, hold } = claim else {
        panic!("a fresh key is processed: {claim:?}")
    };
    assert!(recorded.is_empty());
    let delivered = json!({ "delivered": true });
    let replies = env.deployment_of(env.registry.clone(), 1).replies();
    let answered = replies
        .decide(
            &alice,
            run_id.parse().unwrap(),
            "c1",
            Decision::Approve(Approve::default()),
            Some(RecordedItem {
                key: "batch-9",
                hold,
                index: 0,
                result: &delivered,
            }),
        )
        .await
        .unwrap();
    assert!(answered.delivered);

    let (status, _, busy) = decide(&env, Some("batch-9"), &body).await;
    assert_eq!(status, StatusCode::CONFLICT, "{busy}");
    assert_eq!(busy["error"], "IdempotencyKeyInUse");

    env.sql("UPDATE idempotency_keys SET claimed_at = now() - interval '1 hour'")
        .await;
    let (status, replayed, results) = decide(&env, Some("batch-9"), &body).await;
    assert_eq!((status, replayed), (StatusCode::OK, false), "{results}");
    assert_eq!(
        statuses(&results),
        [(200, json!(true)), (200, json!(true))],
        "c1 as the first attempt settled it, c2 now"
    );
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 1);
    // And from now on the stored response.
    let (_, replayed, again) = decide(&env, Some("batch-9"), &body).await;
    assert!(replayed);
    assert_eq!(again, results);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_batch_that_cannot_be_read_changes_nothing() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    let approve = json!({ "action": "approve", "runId": run_id, "toolCallId": "c1" });
    let many: Vec<Value> = std::iter::repeat_n(approve.clone(), 101).collect();

    for (key, body, expected) in [
        (None, json!({ "decisions": [] }), "BadRequest"),
        (None, json!({ "decisions": many }), "BadRequest"),
        (
            None,
            json!({ "decisions": [approve, { "action": "maybe" }] }),
            "BadRequest",
        ),
        (
            None,
            json!({ "decisions": [approve], "extra": 1 }),
            "BadRequest",
        ),
        (
            Some("has space"),
            json!({ "decisions": [approve] }),
            "BadRequest",
        ),
    ] {
        let (status, _, answer) = decide(&env, key, &body).await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some(expected)),
            "{body}: {answer}"
        );
    }
    let (status, _) = env
        .call(
            "POST",
            "/agent/decisions",
            None,
            Some(json!({ "decisions": [approve] })),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(env.wait_pending(&thread_id, 1).await.len(), 1, "still open");
    assert_eq!(
        env.rows("SELECT 1 FROM idempotency_keys", |_| ())
            .await
            .len(),
        0
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

/// An attempt whose key a retry took over (it held it past the stale time)
/// settles nothing more and keeps no response: the retry's stand.
#[tokio::test]
async fn an_attempt_whose_key_was_taken_over_writes_nothing_more() {
    let (tool, env, worker, _thread_id, run_id) = two_waiting().await;
    let body = json!({ "decisions": [
        { "action": "approve", "runId": run_id, "toolCallId": "c1" },
    ]});
    let alice = Owner("alice".into());
    let claim = |env: &TestEnv| {
        let store = env.store.clone();
        let hash = arguments_hash(&body);
        async move {
            match store
                .claim_idempotency_key(
                    &Owner("alice".into()),
                    "batch-f",
                    &hash,
                    KeyTimes::default(),
                )
                .await
                .unwrap()
            {
                Claim::Process { hold, .. } => hold,
                other => panic!("{other:?}"),
            }
        }
    };
    let first = claim(&env).await;
    // The first attempt stalls past the stale time; a retry takes over.
    env.sql("UPDATE idempotency_keys SET claimed_at = now() - interval '1 hour'")
        .await;
    let second = claim(&env).await;
    assert_ne!(first, second);
    let replies = env.deployment_of(env.registry.clone(), 1).replies();
    let delivered = json!({ "delivered": true });
    let record = |hold| RecordedItem {
        key: "batch-f",
        hold,
        index: 0,
        result: &delivered,
    };
    // The stalled attempt's answer is refused whole: c1 stays open.
    let refused = replies
        .decide(
            &alice,
            run_id.parse().unwrap(),
            "c1",
            Decision::Approve(Approve::default()),
            Some(record(first)),
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(agentenkit_runtime::Error::Store(
                agentenkit_store::Error::IdempotencyKeyTakenOver { .. }
            ))
        ),
        "{refused:?}"
    );
    assert_eq!(tool.calls(), 0);
    // Nor does it complete or release the key the retry holds.
    let kept = json!({ "results": [] });
    assert!(!env
        .store
        .complete_idempotency_key(&alice, "batch-f", first, 200, &kept)
        .await
        .unwrap());
    env.store
        .release_idempotency_key(&alice, "batch-f", first)
        .await
        .unwrap();
    // The retry settles c1 and keeps its response.
    let answered = replies
        .decide(
            &alice,
            run_id.parse().unwrap(),
            "c1",
            Decision::Approve(Approve::default()),
            Some(record(second)),
        )
        .await
        .unwrap();
    assert!(answered.delivered);
    assert!(env
        .store
        .complete_idempotency_key(&alice, "batch-f", second, 200, &kept)
        .await
        .unwrap());
    let (status, replayed, stored) = decide(&env, Some("batch-f"), &body).await;
    assert_eq!((status, replayed), (StatusCode::OK, true));
    assert_eq!(stored, kept);
    worker.stop().await.unwrap();
    env.finish().await;
}
