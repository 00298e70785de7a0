//! Approvals from several people: a tool with `approvals = { required, from
//! }` stays parked until that many distinct keys of those groups approve;
//! one deny settles it; each approval is recorded and shown.

use agentenkit_core::KeyScope;
use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::{json, Value};

/// A key of alice's threads able to approve, its holder in `group`.
async fn approver(env: &TestEnv, group: &str) -> (String, String) {
    make_key(
        env,
        "alice",
        &[KeyScope::Read, KeyScope::RespondApprovals],
        &[group],
    )
    .await
}

/// A run of alice's waiting for two approvals of ops or security, a worker,
/// and a key of each group.
struct Waiting {
    tool: ToolServer,
    env: TestEnv,
    worker: WorkerHandle,
    thread_id: String,
    run_id: String,
    ops: (String, String),
    security: (String, String),
}

async fn waiting() -> Waiting {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(two_of_ops_or_security(&tool.url)).await;
    let worker = env.spawn_worker();
    let ops = approver(&env, "ops").await;
    let security = approver(&env, "security").await;
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    Waiting {
        tool,
        env,
        worker,
        thread_id,
        run_id,
        ops,
        security,
    }
}

async fn approve(env: &TestEnv, key: &str, body: Value) -> (StatusCode, Value) {
    env.call("POST", "/agent/tool-call/approve", Some(key), Some(body))
        .await
}

#[tokio::test]
async fn two_approvers_of_the_groups_settle_the_call_each_counted_once() {
    let Waiting {
        tool,
        env,
        worker,
        thread_id,
        run_id,
        ops: (ops, ops_id),
        security: (security, security_id),
    } = waiting().await;
    let (sales, _) = approver(&env, "sales").await;
    let pending = env.wait_pending(&thread_id, 1).await;
    assert_eq!(
        (
            &pending[0]["approvalsGiven"],
            &pending[0]["approvalsRequired"]
        ),
        (&json!(0), &json!(2))
    );
    let call = json!({ "runId": run_id, "toolCallId": "c1" });

    // Keys in none of the groups (an AGENTENKIT_API_KEYS key has none).
    for key in [ALICE, sales.as_str()] {
        let (status, refused) = approve(&env, key, call.clone()).await;
        assert_eq!(
            (status, refused["error"].as_str()),
            (StatusCode::FORBIDDEN, Some("NotAnApprover")),
            "{refused}"
        );
    }
    // The first approval is counted and the call waits on.
    let (status, first) = approve(
        &env,
        &ops,
        json!({ "runId": run_id, "toolCallId": "c1", "message": "fine by ops" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        first,
        json!({ "delivered": true, "approvals": { "given": 1, "required": 2 } })
    );
    let pending = env.wait_pending(&thread_id, 1).await;
    assert_eq!(pending[0]["approvalsGiven"], 1);
    let inbox = env.get("/agent/inbox").await;
    assert_eq!(
        (&inbox[0]["approvalsGiven"], &inbox[0]["approvalsRequired"]),
        (&json!(1), &json!(2))
    );
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let recorded = first_event(&events, "APPROVAL_RECORDED");
    assert_eq!(
        (&recorded["data"]["given"], &recorded["data"]["required"]),
        (&json!(1), &json!(2))
    );
    assert_eq!(recorded["data"]["principal"], ops_id.as_str());
    // The same key again does not count twice; edits are not for a call
    // several people approve.
    let (_, again) = approve(&env, &ops, call.clone()).await;
    assert_eq!(
        again,
        json!({ "delivered": false, "error": "You have already approved this request" })
    );
    let (status, edited) = approve(
        &env,
        &security,
        json!({ "runId": run_id, "toolCallId": "c1", "arguments": { "to": "x" } }),
    )
    .await;
    assert_eq!(
        (status, edited["error"].as_str()),
        (StatusCode::CONFLICT, Some("CannotEditArguments"))
    );
    assert_eq!(tool.calls(), 0);

    // The second person's approval settles it: the tool runs once.
    let (_, last) = approve(&env, &security, call).await;
    assert_eq!(last, json!({ "delivered": true }));
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 1);
    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    let decision = journal_value(&journal, "tool:");
    assert_eq!(decision["keyId"], security_id.as_str());
    let principals: Vec<&Value> = decision["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["principal"])
        .collect();
    assert_eq!(principals, [&json!(ops_id), &json!(security_id)]);
    assert_eq!(decision["approvals"][0]["message"], "fine by ops");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn one_deny_settles_a_call_that_needs_several_approvals() {
    let Waiting {
        tool,
        env,
        worker,
        thread_id,
        run_id,
        ops: (ops, _),
        security: (security, _),
    } = waiting().await;
    // A payload is the tool's input too: no approver hands it one alone.
    let (status, refused) = approve(
        &env,
        &ops,
        json!({ "runId": run_id, "toolCallId": "c1", "payload": { "x": 1 } }),
    )
    .await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (StatusCode::CONFLICT, Some("CannotEditArguments"))
    );
    let (_, counted) = approve(&env, &ops, json!({ "runId": run_id, "toolCallId": "c1" })).await;
    assert_eq!(counted["approvals"]["given"], 1);
    // Only an approver may deny it: a key outside the groups (the owner's
    // own AGENTENKIT_API_KEYS key here) is refused, and nothing changes.
    let deny = json!({ "runId": run_id, "toolCallId": "c1", "reason": "not this week" });
    let (status, refused) = env
        .reply("/agent/tool-call/reject", ALICE, deny.clone())
        .await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("NotAnApprover"))
    );
    assert_eq!(
        env.wait_pending(&thread_id, 1).await[0]["approvalsGiven"],
        1
    );
    let (_, denied) = env
        .call(
            "POST",
            "/agent/tool-call/reject",
            Some(&security),
            Some(deny),
        )
        .await;
    assert_eq!(denied["delivered"], true);
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 0);
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    let result = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert_eq!(
        result["content"],
        json!({ "denied": true, "reason": "not this week" })
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

/// Idempotency keys are each API key's own: two approvers sending the same
/// batch with the same `Idempotency-Key` are both counted.
#[tokio::test]
async fn two_approvers_sending_one_batch_with_one_key_are_both_counted() {
    let Waiting {
        tool,
        env,
        worker,
        run_id,
        ops: (ops, _),
        security: (security, _),
        ..
    } = waiting().await;
    let batch =
        json!({ "decisions": [ { "action": "approve", "runId": run_id, "toolCallId": "c1" } ] });
    let mut bodies = Vec::new();
    for key in [&ops, &security] {
        let response = env
            .http
            .post(env.url("/agent/decisions"))
            .bearer_auth(key)
            .header("Idempotency-Key", "approve-c1")
            .json(&batch)
            .send()
            .await
            .unwrap();
        assert!(response.headers().get("idempotent-replayed").is_none());
        bodies.push(response.json::<Value>().await.unwrap());
    }
    assert_eq!(
        bodies[0]["results"][0]["body"],
        json!({ "delivered": true, "approvals": { "given": 1, "required": 2 } })
    );
    assert_eq!(
        bodies[1]["results"][0]["body"],
        json!({ "delivered": true })
    );
    // The first approver's retry gets its own first answer, count and all.
    let replayed = env
        .http
        .post(env.url("/agent/decisions"))
        .bearer_auth(&ops)
        .header("Idempotency-Key", "approve-c1")
        .json(&batch)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(replayed, bodies[0]);
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 1);
    worker.stop().await.unwrap();
    env.finish().await;
}

/// Approvals count people: two keys of one holder are one approver, and
/// revoking a key drops the approval it gave to a call still waiting.
#[tokio::test]
async fn one_holders_keys_count_once_and_a_revoked_keys_vote_is_dropped() {
    let Waiting {
        tool,
        env,
        worker,
        thread_id,
        run_id,
        ops: (ops, ops_id),
        ..
    } = waiting().await;
    let scopes = [KeyScope::Read, KeyScope::RespondApprovals];
    let (ann_ops, ann_ops_id) = make_held_key(&env, "alice", &scopes, &["ops"], Some("ann")).await;
    let (ann_sec, _) = make_held_key(&env, "alice", &scopes, &["security"], Some("ann")).await;
    let call = json!({ "runId": run_id, "toolCallId": "c1" });

    let (_, first) = approve(&env, &ann_ops, call.clone()).await;
    assert_eq!(first["approvals"], json!({ "given": 1, "required": 2 }));
    let (_, again) = approve(&env, &ann_sec, call.clone()).await;
    assert_eq!(
        again,
        json!({ "delivered": false, "error": "You have already approved this request" }),
        "ann's second key is still ann"
    );
    assert_eq!(
        env.wait_pending(&thread_id, 1).await[0]["approvalsGiven"],
        1
    );

    // Revoking the key that gave ann's approval takes the approval back.
    revoke_key(&env, &ann_ops_id).await;
    assert_eq!(
        env.wait_pending(&thread_id, 1).await[0]["approvalsGiven"],
        0
    );
    let (_, counted) = approve(&env, &ann_sec, call.clone()).await;
    assert_eq!(counted["approvals"], json!({ "given": 1, "required": 2 }));
    assert_eq!(tool.calls(), 0);

    // A second person settles it.
    let (_, last) = approve(&env, &ops, call).await;
    assert_eq!(last, json!({ "delivered": true }));
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 1);
    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    let principals: Vec<Value> = journal_value(&journal, "tool:")["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["principal"].clone())
        .collect();
    assert_eq!(principals, [json!("holder:ann"), json!(ops_id)]);
    worker.stop().await.unwrap();
    env.finish().await;
}

/// Revoking a key waits for the lock of each run it voted in: an answer
/// to that run counts the votes it read under the lock, and a drop that
/// did not wait could be written back over by it (a revoked key's vote
/// counting after all).
#[tokio::test]
async fn a_revocation_waits_for_the_run_lock_an_answer_holds() {
    let Waiting {
        env,
        worker,
        thread_id,
        run_id,
        ops: (ops, ops_id),
        ..
    } = waiting().await;
    let call = json!({ "runId": run_id, "toolCallId": "c1" });
    let (_, first) = approve(&env, &ops, call).await;
    assert_eq!(first["approvals"], json!({ "given": 1, "required": 2 }));

    // An answer in flight: its transaction holds the run's row.
    let locker = env.pg_client().await;
    locker.batch_execute("BEGIN").await.unwrap();
    let run: uuid::Uuid = run_id.parse().unwrap();
    locker
        .execute(
            "SELECT 1 FROM runs WHERE id = $1 FOR NO KEY UPDATE",
            &[&run],
        )
        .await
        .unwrap();
    let store = env.store.clone();
    let key: uuid::Uuid = ops_id.parse().unwrap();
    let revoke = tokio::spawn(async move { store.revoke_api_key(key).await });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        !revoke.is_finished(),
        "the revocation did not wait for the run's lock"
    );
    locker.batch_execute("ROLLBACK").await.unwrap();
    assert!(revoke.await.unwrap().unwrap(), "revoked");
    assert_eq!(
        env.wait_pending(&thread_id, 1).await[0]["approvalsGiven"],
        0,
        "the revoked key's vote is gone"
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

/// `keys list` with the agent file warns of a rule the live keys cannot
/// meet (one holder in the groups of a rule that needs two).
#[tokio::test]
async fn keys_list_warns_of_a_rule_no_set_of_keys_can_meet() {
    use agentenkit::keys::KeysCommand;

    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    let dir = std::env::temp_dir().join(format!("aek-keys-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("agentenkit.toml");
    std::fs::write(&config, two_of_ops_or_security_toml("http://127.0.0.1:9/")).unwrap();
    let list = || KeysCommand::List {
        owner: None,
        config: Some(config.clone()),
    };
    let scopes = [KeyScope::RespondApprovals];
    make_held_key(&env, "alice", &scopes, &["ops"], Some("ann")).await;
    make_held_key(&env, "alice", &scopes, &["security"], Some("ann")).await;
    let (listed, done) = list().run(&env.store).await.unwrap();
    assert!(done);
    assert!(
        listed.contains("warning: tool tool needs 2 approvals from ops, security, but only 1 live key holder can give one"),
        "{listed}"
    );
    make_held_key(&env, "alice", &scopes, &["ops"], Some("bo")).await;
    let (listed, _) = list().run(&env.store).await.unwrap();
    assert!(!listed.contains("warning"), "{listed}");
    assert!(listed.contains("holder bo"), "{listed}");
    std::fs::remove_dir_all(dir).unwrap();
    env.finish().await;
}

/// An API of a deploy whose tool needs one approval shows a run pinned to
/// the version that needs two as needing two: what its answers are
/// counted by, not what the API's own file says.
#[tokio::test]
async fn an_approval_shows_the_rule_of_its_runs_version() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(two_of_ops_or_security(&tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, _) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    let single = approval_registry(CALL_THEN_DONE, &tool.url);
    let api = env.serve_api_of(std::sync::Arc::new(single)).await;
    for path in ["/agent/inbox".to_owned(), format!("/threads/{thread_id}")] {
        let (status, read) = env
            .send(env.http.get(api.url(&path)).bearer_auth(ALICE))
            .await;
        assert_eq!(status, StatusCode::OK, "{read}");
        let input = read
            .get("pendingInputs")
            .map_or(&read[0], |inputs| &inputs[0])
            .clone();
        assert_eq!(
            (&input["approvalsGiven"], &input["approvalsRequired"]),
            (&json!(0), &json!(2)),
            "{path}: {input}"
        );
    }
    api.stop().await;
    worker.stop().await.unwrap();
    env.finish().await;
}
