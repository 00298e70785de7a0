//! The operator CLI (`agentenkit inbox | approve | … | runs show`) against
//! the real API.

use agentenkit::ops::{ApiTarget, OpsCommand, RunsCommand, ThreadsCommand, NOT_DELIVERED};
use agentenkit_tests::*;
use serde_json::{json, Value};

fn target(env: &TestEnv, key: &str, json: bool) -> ApiTarget {
    ApiTarget {
        url: env.url(""),
        api_key: key.to_owned(),
        json,
    }
}

#[tokio::test]
async fn an_operator_sees_the_inbox_approves_and_reads_the_run_from_the_command_line() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;

    let inbox = OpsCommand::Inbox {
        api: target(&env, ALICE, false),
    }
    .run()
    .await
    .unwrap();
    assert_eq!(inbox.exit_code, 0);
    assert!(
        inbox.output.contains(&format!("run {run_id} call c1")),
        "{}",
        inbox.output
    );
    assert!(inbox.output.contains(r#"arguments: {"to":"a@b.c"}"#));
    let as_json = OpsCommand::Inbox {
        api: target(&env, ALICE, true),
    }
    .run()
    .await
    .unwrap();
    let listed: Value = serde_json::from_str(&as_json.output).unwrap();
    assert_eq!(listed[0]["toolCallId"], "c1");
    let hash = listed[0]["argumentsHash"].as_str().unwrap().to_owned();
    assert!(
        inbox.output.contains(&format!("argumentsHash: {hash}")),
        "{}",
        inbox.output
    );
    // Bob's inbox does not hold Alice's request.
    let bobs = OpsCommand::Inbox {
        api: target(&env, BOB, false),
    }
    .run()
    .await
    .unwrap();
    assert_eq!(bobs.output, "no open requests\n");

    let thread = OpsCommand::Threads {
        command: ThreadsCommand::Show {
            api: target(&env, ALICE, false),
            id: thread_id.clone(),
        },
    }
    .run()
    .await
    .unwrap();
    let status = env.get(&format!("/threads/{thread_id}")).await["status"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        thread.output.contains(&format!("status {status}")),
        "{}",
        thread.output
    );
    assert!(thread.output.contains("call c1"), "{}", thread.output);

    // Bound to arguments the call does not have: refused, nothing changes.
    let stale = OpsCommand::Approve {
        api: target(&env, ALICE, false),
        run: run_id.clone(),
        call: "c1".into(),
        payload: None,
        arguments: None,
        message: None,
        arguments_hash: Some("0".repeat(64)),
    }
    .run()
    .await
    .unwrap();
    assert_eq!(stale.exit_code, 1);
    assert!(
        stale.output.contains("409 ArgumentsHashMismatch"),
        "{}",
        stale.output
    );

    let approve = OpsCommand::Approve {
        api: target(&env, ALICE, false),
        run: run_id.clone(),
        call: "c1".into(),
        payload: Some(json!({ "note": "from the terminal" })),
        arguments: Some(json!({ "to": "edited@b.c" })),
        message: Some("edited in the terminal".into()),
        arguments_hash: Some(hash),
    };
    let approved = approve.clone().run().await.unwrap();
    assert_eq!(
        (approved.output.as_str(), approved.exit_code),
        ("delivered\n", 0)
    );
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(tool.calls(), 1);
    assert_eq!(
        tool.bodies()[0]["approval"]["payload"],
        json!({ "note": "from the terminal" })
    );
    assert_eq!(tool.bodies()[0]["arguments"], json!({ "to": "edited@b.c" }));
    // Twice: not delivered, exit code 3, the reason printed.
    let again = approve.run().await.unwrap();
    assert_eq!(again.exit_code, NOT_DELIVERED);
    assert_eq!(
        again.output,
        "not delivered: This request was already answered\n"
    );

    let run = OpsCommand::Runs {
        command: RunsCommand::Show {
            api: target(&env, ALICE, false),
            id: run_id.clone(),
            journal: true,
        },
    }
    .run()
    .await
    .unwrap();
    assert!(run.output.contains("status completed"), "{}", run.output);
    assert!(run.output.contains("output: Done."), "{}", run.output);
    for name in ["model:0", "persist:toolcall:c1", "exec:c1", "model:1"] {
        assert!(run.output.contains(name), "{name} in {}", run.output);
    }
    let run_json = OpsCommand::Runs {
        command: RunsCommand::Show {
            api: target(&env, ALICE, true),
            id: run_id.clone(),
            journal: true,
        },
    }
    .run()
    .await
    .unwrap();
    let value: Value = serde_json::from_str(&run_json.output).unwrap();
    assert_eq!(value["status"], "completed");
    assert!(value["journal"].as_array().unwrap().len() >= 4);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn refusals_print_the_apis_error_and_exit_1() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, _) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;
    let wrong_key = OpsCommand::Inbox {
        api: target(&env, "wrong-key", false),
    }
    .run()
    .await
    .unwrap();
    assert_eq!(wrong_key.exit_code, 1);
    assert!(
        wrong_key.output.starts_with("error: 401 Unauthorized:"),
        "{}",
        wrong_key.output
    );
    // An id that is not a UUID never reaches the API (`..` would change
    // the path once URL-parsed).
    let traversal = OpsCommand::Runs {
        command: RunsCommand::Show {
            api: target(&env, ALICE, false),
            id: "..".into(),
            journal: true,
        },
    }
    .run()
    .await;
    assert!(traversal
        .unwrap_err()
        .to_string()
        .contains("is not a run id"));
    let unknown = OpsCommand::Runs {
        command: RunsCommand::Show {
            api: target(&env, ALICE, false),
            id: uuid::Uuid::now_v7().to_string(),
            journal: false,
        },
    }
    .run()
    .await
    .unwrap();
    assert_eq!(unknown.exit_code, 1);
    assert!(
        unknown.output.starts_with("error: 404 NotFound"),
        "{}",
        unknown.output
    );
    // respond by thread, rejecting: delivered, the tool never runs.
    let rejected = OpsCommand::Respond {
        api: target(&env, ALICE, false),
        thread: thread_id.clone(),
        call: "c1".into(),
        approved: false,
        payload: None,
    }
    .run()
    .await
    .unwrap();
    assert_eq!(rejected.output, "delivered\n");
    // Nothing listens here: an error, not an outcome.
    let unreachable = OpsCommand::Inbox {
        api: ApiTarget {
            url: "http://127.0.0.1:9".into(),
            api_key: ALICE.into(),
            json: false,
        },
    }
    .run()
    .await;
    assert!(format!("{:#}", unreachable.unwrap_err()).contains("reaching the API"));
    let no_key = OpsCommand::Inbox {
        api: target(&env, "", false),
    }
    .run()
    .await;
    assert!(no_key
        .unwrap_err()
        .to_string()
        .contains("AGENTENKIT_API_KEY"));
    worker.stop().await.unwrap();
    assert_eq!(tool.calls(), 0);
    env.finish().await;
}

/// `agentenkit decide FILE --idempotency-key K`: many decisions from a
/// file, a line each; run again with the key, the same results.
#[tokio::test]
async fn an_operator_decides_many_from_a_file_and_can_run_it_again() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(TWO_CALLS, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "both").await;
    env.wait_pending(&thread_id, 2).await;
    let file = std::env::temp_dir().join(format!(
        "agentenkit-decisions-{}.json",
        uuid::Uuid::now_v7()
    ));
    std::fs::write(
        &file,
        json!([
            { "action": "approve", "runId": run_id, "toolCallId": "c1", "message": "ok" },
            { "action": "deny", "runId": run_id, "toolCallId": "c2", "reason": "not two" },
        ])
        .to_string(),
    )
    .unwrap();
    let decide = OpsCommand::Decide {
        api: target(&env, ALICE, false),
        file: file.clone(),
        idempotency_key: Some("ops-1".into()),
    };
    let first = decide.clone().run().await.unwrap();
    assert_eq!(first.exit_code, 0, "{}", first.output);
    let lines: Vec<&str> = first.output.lines().collect();
    assert_eq!(lines.len(), 2, "{}", first.output);
    assert!(
        lines[0].contains("approve") && lines[0].contains("c1") && lines[0].ends_with("delivered")
    );
    assert!(
        lines[1].contains("deny") && lines[1].contains("c2") && lines[1].ends_with("delivered")
    );
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");

    // The same file and key: the stored results, nothing settled twice.
    let again = decide.run().await.unwrap();
    assert_eq!(again, first);
    assert_eq!(tool.calls(), 1);
    // Without the key the decisions come back not delivered: exit code 3.
    let unkeyed = OpsCommand::Decide {
        api: target(&env, ALICE, false),
        file,
        idempotency_key: None,
    }
    .run()
    .await
    .unwrap();
    assert_eq!(unkeyed.exit_code, NOT_DELIVERED);
    assert!(unkeyed
        .output
        .contains("not delivered: This request was already answered"));
    worker.stop().await.unwrap();
    env.finish().await;
}
