//! Keys with scopes, made with `agentenkit keys`: each does what its scopes
//! allow and is refused the rest with 403 naming the scope; a decision
//! records the key that made it; a revoked key is refused.

use agentenkit::keys::KeysCommand;
use agentenkit_core::KeyScope;
use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::{json, Value};

/// A job tool: parks on its first call, returns what settled it after.
async fn job_tool() -> ToolServer {
    ToolServer::start(|_, body| {
        if body["approval"].is_null() {
            (
                StatusCode::OK,
                json!({ "park": { "reason": "job", "payload": {} } }),
            )
        } else {
            (StatusCode::OK, json!({ "rendered": true }))
        }
    })
    .await
}

fn forbidden(answer: &(StatusCode, Value), scope: &str) {
    assert_eq!(answer.0, StatusCode::FORBIDDEN, "{}", answer.1);
    assert_eq!(answer.1["error"], "Forbidden");
    assert_eq!(answer.1["missingScope"], scope);
}

#[tokio::test]
async fn each_key_does_what_its_scopes_allow_and_is_refused_the_rest() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (reader, _) = make_key(&env, "alice", &[KeyScope::Read], &[]).await;
    let (webhook, _) = make_key(&env, "alice", &[KeyScope::SettleJobs], &[]).await;
    let (approver, approver_id) = make_key(
        &env,
        "alice",
        &[KeyScope::Read, KeyScope::RespondApprovals],
        &[],
    )
    .await;

    // Only threads:write starts a thread.
    let create = env
        .call(
            "POST",
            "/threads",
            Some(&reader),
            Some(json!({ "agent": "agent" })),
        )
        .await;
    forbidden(&create, "threads:write");
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;

    // Read may read (the owner's threads: the key acts for alice).
    let (status, thread) = env
        .call("GET", &format!("/threads/{thread_id}"), Some(&reader), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(thread["pendingInputs"][0]["toolCallId"], "c1");
    let (status, _) = env.call("GET", "/agent/inbox", Some(&reader), None).await;
    assert_eq!(status, StatusCode::OK);
    // The webhook's key may not read, nor approve a person's approval;
    // neither may the reader; nothing changes.
    forbidden(
        &env.call("GET", "/agent/inbox", Some(&webhook), None).await,
        "read",
    );
    forbidden(
        &env.call("GET", "/agents", Some(&webhook), None).await,
        "read",
    );
    let (status, _) = env.call("GET", "/agents", Some(&reader), None).await;
    assert_eq!(status, StatusCode::OK);
    let approve = json!({ "runId": run_id, "toolCallId": "c1" });
    for key in [&reader, &webhook] {
        let refused = env
            .call(
                "POST",
                "/agent/tool-call/approve",
                Some(key),
                Some(approve.clone()),
            )
            .await;
        forbidden(&refused, "respond:approvals");
        let respond = env
            .call(
                "POST",
                "/agent/hitl/respond",
                Some(key),
                Some(json!({ "threadId": thread_id, "toolCallId": "c1", "approved": true })),
            )
            .await;
        forbidden(&respond, "respond:approvals");
    }
    let (status, batch) = env
        .call(
            "POST",
            "/agent/decisions",
            Some(&webhook),
            Some(json!({ "decisions": [ { "action": "approve", "runId": run_id, "toolCallId": "c1" } ] })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(batch["results"][0]["status"], 403);
    assert_eq!(
        batch["results"][0]["body"]["missingScope"],
        "respond:approvals"
    );
    // A key that can answer nothing is refused the whole batch, before it
    // holds an idempotency key.
    let refused = env
        .http
        .post(env.url("/agent/decisions"))
        .bearer_auth(&reader)
        .header("Idempotency-Key", "k1")
        .json(&json!({ "decisions": [ { "action": "approve", "runId": run_id, "toolCallId": "c1" } ] }))
        .send()
        .await
        .unwrap();
    let refused = (
        StatusCode::from_u16(refused.status().as_u16()).unwrap(),
        refused.json::<Value>().await.unwrap(),
    );
    forbidden(&refused, "respond:approvals");
    assert!(env
        .rows("SELECT 1 FROM idempotency_keys", |_| ())
        .await
        .is_empty());
    assert_eq!(env.wait_pending(&thread_id, 1).await.len(), 1, "still open");
    assert_eq!(tool.calls(), 0);

    // The approver's decision records its key.
    let (status, answer) = env
        .call(
            "POST",
            "/agent/tool-call/approve",
            Some(&approver),
            Some(approve),
        )
        .await;
    assert_eq!(
        (status, answer["delivered"].clone()),
        (StatusCode::OK, json!(true))
    );
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    let decision = journal_value(&journal, "tool:");
    assert_eq!(decision["answeredBy"], "alice");
    assert_eq!(decision["keyId"], approver_id.as_str());
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    assert_eq!(
        first_event(&events, "INPUT_RESOLVED")["data"]["keyId"],
        approver_id.as_str()
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_job_webhook_key_settles_its_job_and_a_revoked_key_is_refused() {
    let tool = job_tool().await;
    let env = TestEnv::start(registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (webhook, webhook_id) = make_key(&env, "alice", &[KeyScope::SettleJobs], &[]).await;
    let (thread_id, run_id) = env.start_turn("agent", "render it").await;
    env.wait_pending(&thread_id, 1).await;

    let (status, answer) = env
        .call(
            "POST",
            "/agent/hitl/respond",
            Some(&webhook),
            Some(json!({ "threadId": thread_id, "toolCallId": "c1", "approved": true, "payload": { "done": 1 } })),
        )
        .await;
    assert_eq!(
        (status, answer["delivered"].clone()),
        (StatusCode::OK, json!(true)),
        "{answer}"
    );
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");

    // Listed, revoked, then refused (within the API's cache of a few
    // seconds), and listed as revoked.
    let (listed, _) = KeysCommand::List {
        owner: Some("alice".into()),
        config: None,
    }
    .run(&env.store)
    .await
    .unwrap();
    assert!(
        listed.contains(&webhook_id) && listed.contains("settle:jobs"),
        "{listed}"
    );
    revoke_key(&env, &webhook_id).await;
    eventually("the revoked key is refused", || async {
        let (status, _) = env
            .call(
                "POST",
                "/agent/hitl/respond",
                Some(&webhook),
                Some(json!({ "threadId": thread_id, "toolCallId": "c1", "approved": true })),
            )
            .await;
        (status == StatusCode::UNAUTHORIZED).then_some(())
    })
    .await;
    let (again, done) = KeysCommand::Revoke {
        id: webhook_id.parse().unwrap(),
    }
    .run(&env.store)
    .await
    .unwrap();
    assert!(!done, "{again}");
    let (listed, _) = KeysCommand::List {
        owner: None,
        config: None,
    }
    .run(&env.store)
    .await
    .unwrap();
    assert!(listed.contains("revoked"), "{listed}");
    // The database holds no key, only its digest.
    let stored = env
        .rows("SELECT encode(secret_sha256, 'hex') FROM api_keys", |row| {
            row.get::<_, String>(0)
        })
        .await;
    assert!(stored
        .iter()
        .all(|digest| digest.len() == 64 && !webhook.contains(digest.as_str())));
    worker.stop().await.unwrap();
    env.finish().await;
}
