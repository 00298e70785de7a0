//! Moving parked runs to a newer version on purpose (`agentenkit runs
//! upgrade`): a compatible run moves, journaled, and goes on with the new
//! version's tools and script, across a worker's crash; an incompatible
//! one is left as it was, with the reason.

use std::sync::Arc;

use agentenkit::ops::{OpsCommand, RunsCommand};
use agentenkit_runtime::Registry;
use agentenkit_tests::*;

/// `mailer`, whose approval tool `tool` posts to `url`.
fn mailer(tool: &str, system: &str, done: &str, url: &str) -> Registry {
    mailer_deploy(tool, system, done, url, "pin")
}

/// `agentenkit runs upgrade --agent mailer [--to TO] [--dry-run]` on the
/// test's schema, as the command line parses it.
fn upgrade(env: &TestEnv, to: Option<&str>, dry_run: bool) -> OpsCommand {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        command: OpsCommand,
    }
    let schema = env.store.schema().expect("test schema").to_owned();
    let mut args = vec![
        "agentenkit".to_owned(),
        "runs".into(),
        "upgrade".into(),
        "--database-url".into(),
        database_url(),
        "--schema".into(),
        schema,
        "--agent".into(),
        "mailer".into(),
    ];
    if let Some(to) = to {
        args.extend(["--to".to_owned(), to.to_owned()]);
    }
    if dry_run {
        args.push("--dry-run".into());
    }
    let cli: Cli = clap::Parser::parse_from(args);
    assert!(matches!(
        cli.command,
        OpsCommand::Runs {
            command: RunsCommand::Upgrade { .. }
        }
    ));
    cli.command
}

async fn version_of(env: &TestEnv, run_id: &str) -> String {
    env.get(&format!("/runs/{run_id}")).await["agentVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_parked_run_moves_to_a_compatible_version_and_replays_across_the_switch() {
    let v1_tool = ToolServer::ok().await;
    let v2_tool = ToolServer::ok().await;
    let v1 = mailer("send_email", "v1", "Done v1.", &v1_tool.url);
    let v1_hash = v1.agent_version("mailer").unwrap().hash.clone();
    let env = TestEnv::start(v1).await;
    let old = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("mailer", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    old.stop().await.unwrap();

    // v3 renamed the tool: the parked call cannot go on there.
    let v3 = mailer("send_mail", "v3", "Done v3.", &v2_tool.url);
    v3.record_versions(&env.store).await.unwrap();
    let v3_hash = v3.agent_version("mailer").unwrap().hash.clone();
    let refused = upgrade(&env, Some(&v3_hash[..12]), false)
        .run()
        .await
        .unwrap();
    assert_eq!(
        refused.exit_code,
        agentenkit::upgrade::SOME_LEFT,
        "{}",
        refused.output
    );
    assert!(
        refused
            .output
            .contains(&format!("left   run {run_id} (waiting)"))
            && refused
                .output
                .contains("\"send_email\", which the new version does not have"),
        "{}",
        refused.output
    );
    assert_eq!(version_of(&env, &run_id).await, v1_hash);

    // v2 keeps the tool (at another endpoint) with a new prompt and script.
    let v2 = Arc::new(mailer("send_email", "v2", "Done v2.", &v2_tool.url));
    v2.record_versions(&env.store).await.unwrap();
    let v2_hash = v2.agent_version("mailer").unwrap().hash.clone();
    let dry = upgrade(&env, Some(&v2_hash), true).run().await.unwrap();
    assert_eq!(dry.exit_code, 0, "{}", dry.output);
    assert!(
        dry.output.contains(&format!("would move  run {run_id}")),
        "{}",
        dry.output
    );
    assert_eq!(
        version_of(&env, &run_id).await,
        v1_hash,
        "a dry run moves nothing"
    );
    let moved = upgrade(&env, Some(&v2_hash), false).run().await.unwrap();
    assert_eq!(moved.exit_code, 0, "{}", moved.output);
    assert!(moved.output.contains("1 moved, 0 left"), "{}", moved.output);
    assert_eq!(version_of(&env, &run_id).await, v2_hash);
    // Nothing left to move: the run is on v2 already.
    let again = upgrade(&env, Some(&v2_hash), false).run().await.unwrap();
    assert!(again.output.contains("0 moved, 0 left"), "{}", again.output);
    // The run says where it started, and its journal where it moved.
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    assert_eq!(
        first_event(&events, "RUN_STARTED")["data"]["agentVersion"],
        v1_hash.as_str()
    );
    let names = env.journal_names(&run_id).await;
    assert_eq!(
        names.last().unwrap(),
        &format!("version:{v2_hash}"),
        "{names:?}"
    );
    // The person is shown the version the call will now run by.
    assert_eq!(
        env.wait_pending(&thread_id, 1).await[0]["agentVersion"],
        v2_hash.as_str()
    );

    // A worker of v2 dies right after the tool ran; the next one replays
    // over the switch and finishes with v2's script.
    let crashing = env.spawn(
        env.worker_of(v2.clone())
            .with_crash_point(Arc::new(|point: &str| point == "exec:c1")),
    );
    let answer = approve(&env, &run_id, "c1").await;
    assert_eq!(answer["delivered"], true, "{answer}");
    assert!(crashing.died().await.is_err(), "the crash point fired");
    let next = env.spawn_worker_of(v2.clone());
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], "Done v2.", "{run}");
    assert_eq!(v2_tool.calls(), 1, "v2's tool ran the approved call, once");
    assert_eq!(v1_tool.calls(), 0);
    let names = env.journal_names(&run_id).await;
    assert_eq!(
        names.iter().filter(|n| n.starts_with("version:")).count(),
        1,
        "{names:?}"
    );
    assert_eq!(names.last().unwrap(), "model:1", "{names:?}");
    next.stop().await.unwrap();
    env.finish().await;
}

/// `on_deploy = "upgrade"`: a parked run takes the newer version the
/// serving worker has when its open call can go on there (journaled), and
/// stays on its own when it cannot (the tool was renamed).
#[tokio::test]
async fn an_agent_that_takes_newer_versions_moves_at_the_next_segment_where_it_can() {
    let v1_tool = ToolServer::ok().await;
    let v2_tool = ToolServer::ok().await;
    let v1 = mailer_deploy("send_email", "v1", "Done v1.", &v1_tool.url, "upgrade");
    let v1_hash = v1.agent_version("mailer").unwrap().hash.clone();
    let env = TestEnv::start(v1).await;
    let old = env.spawn_worker();
    let (first_thread, first) = env.start_turn("mailer", "send it").await;
    let (second_thread, second) = env.start_turn("mailer", "send it too").await;
    env.wait_pending(&first_thread, 1).await;
    env.wait_pending(&second_thread, 1).await;
    old.stop().await.unwrap();
    assert_eq!(version_of(&env, &first).await, v1_hash);

    // The deploy: v2 keeps the tool; its workers serve both runs.
    let v2 = Arc::new(mailer_deploy(
        "send_email",
        "v2",
        "Done v2.",
        &v2_tool.url,
        "upgrade",
    ));
    let v2_hash = v2.agent_version("mailer").unwrap().hash.clone();
    let new = env.spawn_worker_of(v2.clone());
    for run_id in [&first, &second] {
        let answer = approve(&env, run_id, "c1").await;
        assert_eq!(answer["delivered"], true, "{answer}");
        let run = env.wait_run_finished(run_id).await;
        assert_eq!(run["output"], "Done v2.", "{run}");
        assert_eq!(run["agentVersion"], v2_hash.as_str(), "{run}");
        let names = env.journal_names(run_id).await;
        assert!(names.contains(&format!("version:{v2_hash}")), "{names:?}");
    }
    assert_eq!(v2_tool.calls(), 2);
    assert_eq!(v1_tool.calls(), 0);
    new.stop().await.unwrap();

    // A new turn (started on the API's v1) moves at its first segment;
    // v3 then renames the tool: the run, parked on v2, cannot go on there
    // and finishes on v2 (built from its stored definition).
    let (thread_id, run_id) = env.start_turn("mailer", "once more").await;
    let again = env.spawn_worker_of(v2.clone());
    env.wait_pending(&thread_id, 1).await;
    again.stop().await.unwrap();
    assert_eq!(
        version_of(&env, &run_id).await,
        v2_hash,
        "moved at its first segment"
    );
    let v3 = Arc::new(mailer_deploy(
        "send_mail",
        "v3",
        "Done v3.",
        &v2_tool.url,
        "upgrade",
    ));
    let v3_hash = v3.agent_version("mailer").unwrap().hash.clone();
    let newest = env.spawn_worker_of(v3);
    let answer = approve(&env, &run_id, "c1").await;
    assert_eq!(answer["delivered"], true, "{answer}");
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], "Done v2.", "{run}");
    assert_eq!(run["agentVersion"], v2_hash.as_str(), "{run}");
    let names = env.journal_names(&run_id).await;
    assert_eq!(
        names
            .iter()
            .filter(|n| n.starts_with("version:"))
            .collect::<Vec<_>>(),
        [&format!("version:{v2_hash}")],
        "{names:?}"
    );
    assert!(!names.contains(&format!("version:{v3_hash}")));
    assert_eq!(v2_tool.calls(), 3, "v2's tool ran it");
    newest.stop().await.unwrap();
    env.finish().await;
}

/// `mailer` with two approval calls in one step (`c1`, `c2`) of `tool`,
/// whose `to` is at most `max_len` characters.
fn two_calls(url: &str, max_len: u32, system: &str) -> Registry {
    Registry::from_toml(&format!(
        r#"
[agents.mailer]
system = "{system}"
tools = ["send_email"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "send_email", arguments = {{ to = "a@b.c" }} }},
                   {{ id = "c2", name = "send_email", arguments = {{ to = "d@e.f" }} }} ] }},
  {{ text = "Done." }},
] }}

[tools.send_email]
type = "http"
url = "{url}"
requires_confirmation = true
input_schema = {{ type = "object", required = ["to"], properties = {{ to = {{ type = "string", maxLength = {max_len} }} }} }}
"#
    ))
    .expect("agent file")
}

/// An approved call waiting to run (its sibling still parked) runs with
/// the arguments its approver edited it to: a version those do not fit is
/// refused, though the proposed arguments fit it.
#[tokio::test]
async fn a_run_whose_approved_edit_does_not_fit_the_new_schema_is_left() {
    let tool = ToolServer::ok().await;
    let v1 = two_calls(&tool.url, 100, "v1");
    let v1_hash = v1.agent_version("mailer").unwrap().hash.clone();
    let env = TestEnv::start(v1).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("mailer", "send both").await;
    env.wait_pending(&thread_id, 2).await;
    let (_, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            serde_json::json!({ "runId": run_id, "toolCallId": "c1",
                                "arguments": { "to": "someone.far.away@example.com" } }),
        )
        .await;
    assert_eq!(answer["delivered"], true, "{answer}");
    env.wait_pending(&thread_id, 1).await;
    worker.stop().await.unwrap();

    // v2 allows 10 characters: both proposals fit, c1's edit does not.
    let v2 = two_calls(&tool.url, 10, "v2");
    v2.record_versions(&env.store).await.unwrap();
    let v2_hash = v2.agent_version("mailer").unwrap().hash.clone();
    let refused = upgrade(&env, Some(&v2_hash), false).run().await.unwrap();
    assert_eq!(
        refused.exit_code,
        agentenkit::upgrade::SOME_LEFT,
        "{}",
        refused.output
    );
    assert!(
        refused
            .output
            .contains("call c1: its edited arguments do not fit \"send_email\""),
        "{}",
        refused.output
    );
    assert_eq!(version_of(&env, &run_id).await, v1_hash);
    assert_eq!(tool.calls(), 0);
    env.finish().await;
}
