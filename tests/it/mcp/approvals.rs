//! What approvals have applies to an MCP server's tools unchanged: a
//! server's `approvals` makes a call wait for several people, and edits
//! are checked against the server's schema.

use agentenkit_core::KeyScope;
use agentenkit_tests::*;
use serde_json::json;

use super::*;

const CLOSE: &str = r#"
  { tool_calls = [ { id = "c1", name = "tickets/close_ticket", arguments = { id = "T-4" } } ] },
  { text = "Done." },
"#;

#[tokio::test]
async fn an_mcp_call_waits_for_two_people_of_its_servers_rule_and_runs_once() {
    let log = CallLog::new();
    let registry = load(&agent_file(
        "\"tickets/close_ticket\"",
        CLOSE,
        &tickets_stdio(
            &log,
            "approvals = { close_ticket = { required = 2, from = [\"ops\"] } }",
        ),
    ))
    .await;
    assert_eq!(registry.approval_rule("tickets/close_ticket").required, 2);
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let scopes = [KeyScope::Read, KeyScope::RespondApprovals];
    let (first, _) = make_key(&env, "alice", &scopes, &["ops"]).await;
    let (second, _) = make_key(&env, "alice", &scopes, &["ops"]).await;
    let (thread_id, run_id) = env.start_turn("agent", "close T-4").await;
    let pending = env.wait_pending(&thread_id, 1).await;
    assert_eq!(pending[0]["approvalsRequired"], 2);

    // An edit the server's schema refuses changes nothing.
    let call = json!({ "runId": run_id, "toolCallId": "c1" });
    let mut edited = call.clone();
    edited["arguments"] = json!({ "id": 4 });
    let (status, refused) = env
        .call(
            "POST",
            "/agent/tool-call/approve",
            Some(&first),
            Some(edited),
        )
        .await;
    assert_eq!(status.as_u16(), 422, "{refused}");

    let (_, one) = env
        .call(
            "POST",
            "/agent/tool-call/approve",
            Some(&first),
            Some(call.clone()),
        )
        .await;
    assert_eq!(one["delivered"], true, "{one}");
    assert_eq!(
        env.wait_pending(&thread_id, 1).await[0]["approvalsGiven"],
        1
    );
    assert!(
        log.calls_of("close_ticket").is_empty(),
        "one of two is not enough"
    );
    let (_, two) = env
        .call(
            "POST",
            "/agent/tool-call/approve",
            Some(&second),
            Some(call),
        )
        .await;
    assert_eq!(two["delivered"], true, "{two}");
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(log.calls_of("close_ticket").len(), 1);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_rule_for_a_tool_that_does_not_ask_or_is_not_offered_is_refused_at_load() {
    let log = CallLog::new();
    for (table, says) in [
        (
            "approvals = { search_tickets = { required = 2 } }",
            "requires_confirmation",
        ),
        (
            "approvals = { no_such_tool = { required = 2 } }",
            "does not offer",
        ),
    ] {
        let refused = Registry::load_toml(
            &agent_file("\"tickets/*\"", "", &tickets_stdio(&log, table)),
            Vec::new(),
        )
        .await
        .err()
        .expect("refused");
        assert!(refused.to_string().contains(says), "{refused}");
    }
}

#[tokio::test]
async fn a_servers_reminder_applies_to_each_of_its_tools_that_asks() {
    let log = CallLog::new();
    let text = format!(
        "[notifications.ops]\nurl = \"https://hooks.example/ops\"\nsecret_env = \"OPS_SECRET\"\n{}",
        agent_file(
            "\"tickets/*\"",
            "",
            &tickets_stdio(&log, "remind_after = \"30m\"\nescalate_to = \"ops\""),
        )
    );
    let registry = load(&text).await;
    let reminded = registry
        .escalation("tickets/close_ticket")
        .expect("reminded");
    assert_eq!(reminded.target, "ops");
    assert_eq!(reminded.remind_after.as_secs(), 1800);
    assert!(
        registry.escalation("tickets/search_tickets").is_none(),
        "a tool that runs at once waits for nobody"
    );
    // A pinned version whose target is gone keeps its calls, unreminded.
    let version = registry.agent_version("agent").unwrap();
    let plain = load(&agent_file("\"tickets/*\"", "", &tickets_stdio(&log, ""))).await;
    let (pinned, unnamed) = plain.pinned(&version.hash, &version.definition).unwrap();
    assert_eq!(unnamed, None);
    assert!(pinned.escalation("tickets/close_ticket").is_none());
}

/// `keys list` with the agent file lists the MCP servers' tools as a
/// serving process does: a server's rule no set of live keys can meet is
/// warned of.
#[tokio::test]
async fn keys_list_warns_of_an_mcp_tools_rule_no_keys_can_meet() {
    use agentenkit::keys::KeysCommand;

    let log = CallLog::new();
    let env = TestEnv::start(Registry::new()).await;
    let dir = std::env::temp_dir().join(format!("aek-mcp-keys-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("agentenkit.toml");
    let file = agent_file(
        "\"tickets/close_ticket\"",
        "",
        &tickets_stdio(
            &log,
            "approvals = { close_ticket = { required = 2, from = [\"ops\"] } }",
        ),
    );
    std::fs::write(&config, file).unwrap();
    make_key(&env, "alice", &[KeyScope::RespondApprovals], &["ops"]).await;
    let (listed, done) = KeysCommand::List {
        owner: None,
        config: Some(config.clone()),
    }
    .run(&env.store)
    .await
    .unwrap();
    assert!(done);
    assert!(
        listed.contains("warning: tool tickets/close_ticket needs 2 approvals from ops"),
        "{listed}"
    );
    std::fs::remove_dir_all(dir).unwrap();
    env.finish().await;
}
