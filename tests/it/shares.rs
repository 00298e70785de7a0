//! Fair shares (docs/budgets.md, "Fair shares"): runs past their owner's
//! or their agent's cap wait in Postgres, and a burst from one owner does
//! not hold back another's runs; on real Postgres and RabbitMQ.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentenkit_runtime::reaper::{reap_once, ReaperConfig};
use agentenkit_runtime::Registry;
use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::json;

/// Two agents calling a slow tool once: `capped` at 2 running runs per
/// owner, `free` under the owner's cap alone (3).
fn capped(url: &str) -> Registry {
    Registry::from_toml(&capped_toml(url, "max_concurrent_runs_per_owner = 3")).expect("agent file")
}

fn capped_toml(url: &str, top: &str) -> String {
    format!(
        r#"
{top}

[agents.capped]
system = "test agent"
tools = ["tool"]
max_concurrent_runs = 2
model = {{ provider = "scripted", script = [ {CALL_THEN_DONE} ] }}

[agents.free]
system = "test agent"
tools = ["tool"]
model = {{ provider = "scripted", script = [ {CALL_THEN_DONE} ] }}

[tools.tool]
type = "http"
url = "{url}"
input_schema = {{ type = "object", required = ["to"], properties = {{ to = {{ type = "string" }} }} }}
"#
    )
}

async fn slow_tool(delay_ms: u64) -> ToolServer {
    ToolServer::start_with_delay(Duration::from_millis(delay_ms), |n, _| {
        (StatusCode::OK, json!({ "sent": n }))
    })
    .await
}

/// Starts a turn of `agent` as `key`'s owner; returns the run id.
async fn start_as(env: &TestEnv, key: &str, agent: &str) -> String {
    let (status, thread) = env
        .call(
            "POST",
            "/threads",
            Some(key),
            Some(json!({ "agent": agent })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{thread}");
    let path = format!("/threads/{}/messages", thread["id"].as_str().unwrap());
    let (status, run) = env
        .call("POST", &path, Some(key), Some(json!({ "content": "go" })))
        .await;
    assert!(status.is_success(), "{run}");
    run["runId"].as_str().unwrap().to_owned()
}

/// The most runs seen running at once, per owner and per agent key, while
/// `sampling` is set.
async fn sample_running(env: &TestEnv, sampling: Arc<AtomicBool>) -> (i64, i64) {
    let client = env.pg_client().await;
    let (mut by_owner, mut by_key) = (0, 0);
    while sampling.load(Ordering::Relaxed) {
        // Running: what a worker holds or may take (queued, not held).
        let row = client
            .query_one(
                "SELECT coalesce((SELECT max(n) FROM (SELECT count(*) n FROM runs
                          WHERE status IN ('queued', 'running') AND held_since IS NULL
                          GROUP BY slot_owner) o), 0),
                        coalesce((SELECT max(n) FROM (SELECT count(*) n FROM runs
                          WHERE status IN ('queued', 'running') AND held_since IS NULL
                            AND slot_key IS NOT NULL
                          GROUP BY slot_key) k), 0)",
                &[],
            )
            .await
            .expect("sample");
        by_owner = by_owner.max(row.get(0));
        by_key = by_key.max(row.get(1));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (by_owner, by_key)
}

#[tokio::test]
async fn a_burst_waits_in_postgres_under_its_caps_and_another_owner_runs_meanwhile() {
    let tool = slow_tool(150).await;
    let env = TestEnv::start(capped(&tool.url)).await;
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = sample_running(&env, sampling.clone());
    let scenario = async {
        // Alice's burst, before any worker runs: 8 of `capped` and 4 of
        // `free`; only 3 of them (2 of `capped`) get a segment.
        let mut alice = Vec::new();
        for i in 0..12 {
            let agent = if i % 3 == 2 { "free" } else { "capped" };
            alice.push(start_as(&env, ALICE, agent).await);
        }
        let held: Vec<i64> = env
            .rows(
                "SELECT count(*) FROM runs WHERE held_since IS NOT NULL AND status = 'queued'",
                |r| r.get(0),
            )
            .await;
        assert_eq!(held, [9], "3 admitted, 9 held");
        let published: Vec<i64> = env
            .rows(
                "SELECT count(*) FROM outbox WHERE key LIKE 'segment:%'",
                |r| r.get(0),
            )
            .await;
        assert_eq!(published, [3], "a held run has no segment");
        let workers = [env.spawn_worker(), env.spawn_worker()];
        // Bob starts two runs while Alice's burst drains: his own slots.
        let bob = [
            start_as(&env, BOB, "capped").await,
            start_as(&env, BOB, "capped").await,
        ];
        for run in &bob {
            eventually("Bob's run completes", || async {
                let (_, run) = env
                    .call("GET", &format!("/runs/{run}"), Some(BOB), None)
                    .await;
                (run["status"] == "completed").then_some(())
            })
            .await;
        }
        let alice_done: Vec<i64> = env
            .rows(
                "SELECT count(*) FROM runs WHERE slot_owner = 'alice' AND status = 'completed'",
                |r| r.get(0),
            )
            .await;
        assert!(
            alice_done[0] < 12,
            "Bob's runs did not wait for Alice's burst ({} of 12 done)",
            alice_done[0]
        );
        for run in &alice {
            let finished = env.wait_run_finished(run).await;
            assert_eq!(finished["status"], "completed", "{finished}");
        }
        sampling.store(false, Ordering::Relaxed);
        for worker in workers {
            worker.stop().await.unwrap();
        }
    };
    let ((by_owner, by_key), ()) = tokio::join!(sampler, scenario);
    assert!(
        by_owner <= 3,
        "{by_owner} runs of one owner running at once"
    );
    assert!(
        by_key <= 2,
        "{by_key} runs of one agent key running at once"
    );
    assert!(by_owner >= 2, "the sampler saw the runs ({by_owner})");
    let left: Vec<i64> = env
        .rows(
            "SELECT count(*) FROM runs WHERE held_since IS NOT NULL",
            |r| r.get(0),
        )
        .await;
    assert_eq!(left, [0], "every held run was admitted");
    env.finish().await;
}

#[tokio::test]
async fn a_worker_killed_holding_a_slot_frees_it_by_its_lease_and_the_held_run_follows() {
    let tool = slow_tool(50).await;
    let toml = capped_toml(&tool.url, "max_concurrent_runs_per_owner = 1");
    let env = TestEnv::start(Registry::from_toml(&toml).unwrap()).await;
    let doomed = env.spawn_crashing_worker("before:exec:c1");
    let first = start_as(&env, ALICE, "free").await;
    let second = start_as(&env, ALICE, "free").await;
    assert!(doomed.died().await.is_err(), "the crash point fired");
    // The dead worker's run still holds the one slot: the second waits.
    let held: Vec<String> = env
        .rows(
            "SELECT id::text FROM runs WHERE held_since IS NOT NULL AND status = 'queued'",
            |r| r.get(0),
        )
        .await;
    assert_eq!(held, std::slice::from_ref(&second));
    // The reaper's stalled-run rule leaves a held run alone.
    let report = reap_once(
        &env.reaper(),
        &ReaperConfig {
            stalled_after: Duration::ZERO,
            ..ReaperConfig::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(report.held_runs_admitted, 0, "{report:?}");
    assert_eq!(report.stalled_queued, 0, "{report:?}");
    let sampling = Arc::new(AtomicBool::new(true));
    let scenario = async {
        let worker = env.spawn_worker();
        for run in [&first, &second] {
            let finished = env.wait_run_finished(run).await;
            assert_eq!(finished["status"], "completed", "{finished}");
        }
        sampling.store(false, Ordering::Relaxed);
        worker.stop().await.unwrap();
    };
    let ((by_owner, _), ()) = tokio::join!(sample_running(&env, sampling.clone()), scenario);
    assert_eq!(by_owner, 1, "one run of the owner at a time");
    // The first ran its tool (again, after its worker died before it
    // recorded the result), and only then did the second.
    let mut keys: Vec<String> = tool
        .bodies()
        .iter()
        .map(|b| b["idempotencyKey"].as_str().unwrap().to_owned())
        .collect();
    keys.dedup();
    assert_eq!(keys, [format!("{first}:c1"), format!("{second}:c1")]);
    env.finish().await;
}

#[tokio::test]
async fn a_stopped_run_admits_the_next_and_the_reaper_admits_what_nobody_did() {
    let tool = slow_tool(50).await;
    let toml = capped_toml(&tool.url, "max_concurrent_runs_per_owner = 1");
    let env = TestEnv::start(Registry::from_toml(&toml).unwrap()).await;
    let (status, thread) = env
        .call(
            "POST",
            "/threads",
            Some(ALICE),
            Some(json!({ "agent": "free" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let thread = thread["id"].as_str().unwrap().to_owned();
    let first = env
        .post(
            &format!("/threads/{thread}/messages"),
            json!({ "content": "go" }),
        )
        .await["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = start_as(&env, ALICE, "free").await;
    let third = start_as(&env, ALICE, "free").await;
    // Stopping the first (no worker yet) admits the second at once.
    let (status, body) = env
        .call(
            "POST",
            &format!("/threads/{thread}/stop"),
            Some(ALICE),
            None,
        )
        .await;
    assert!(status.is_success(), "{body}");
    let admitted: Vec<String> = env
        .rows(
            "SELECT id::text FROM runs WHERE slot_owner = 'alice' AND held_since IS NULL
               AND status = 'queued'",
            |r| r.get(0),
        )
        .await;
    assert_eq!(admitted, std::slice::from_ref(&second));
    // A run stopped behind the store's back (as a reaper failing it would)
    // admits nobody: the reaper's pass does.
    env.sql(&format!(
        "UPDATE runs SET status = 'cancelled', finished_at = now() WHERE id = '{second}'"
    ))
    .await;
    let report = reap_once(&env.reaper(), &ReaperConfig::default())
        .await
        .unwrap();
    assert_eq!(report.held_runs_admitted, 1, "{report:?}");
    let worker = env.spawn_worker();
    let finished = env.wait_run_finished(&third).await;
    assert_eq!(finished["status"], "completed", "{finished}");
    assert_eq!(env.wait_run_finished(&first).await["status"], "cancelled");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[test]
fn caps_that_cannot_hold_are_refused() {
    for (top, agent, why) in [
        (
            "max_concurrent_runs_per_owner = 0",
            "",
            "max_concurrent_runs_per_owner must be at least 1",
        ),
        (
            "",
            "max_concurrent_runs = 0",
            "max_concurrent_runs must be at least 1",
        ),
        (
            "",
            "fair_key = \"metadata.user\"",
            "set max_concurrent_runs too",
        ),
        (
            "",
            "max_concurrent_runs = 1\nfair_key = \"user\"",
            "\"metadata.KEY\"",
        ),
    ] {
        let toml = format!(
            r#"
{top}
[agents.a]
system = "x"
{agent}
model = {{ provider = "scripted", script = [ {{ text = "hi" }} ] }}
"#
        );
        let err = Registry::from_toml(&toml).err().expect(why).to_string();
        assert!(err.contains(why), "{err}");
    }
}

#[tokio::test]
async fn a_parked_run_holds_no_slot_and_its_resume_waits_for_one() {
    let tool = slow_tool(700).await;
    let toml = format!(
        r#"
max_concurrent_runs_per_owner = 1

[agents.asks]
system = "test agent"
tools = ["risky"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "risky", arguments = {{}} }} ] }},
  {{ text = "Done." }},
] }}

[agents.slow]
system = "test agent"
tools = ["tool"]
model = {{ provider = "scripted", script = [ {CALL_THEN_DONE} ] }}

[tools.risky]
type = "echo"
requires_confirmation = true

[tools.tool]
type = "http"
url = "{}"
input_schema = {{ type = "object", required = ["to"], properties = {{ to = {{ type = "string" }} }} }}
"#,
        tool.url
    );
    let env = TestEnv::start(Registry::from_toml(&toml).unwrap()).await;
    let worker = env.spawn_worker();
    let (thread, asking) = env.start_turn("asks", "go").await;
    let pending = env.wait_pending(&thread, 1).await;
    // Parked: its slot is free, so a run of the same owner starts.
    let slow = start_as(&env, ALICE, "slow").await;
    eventually("the slow run calls its tool", || async {
        (tool.calls() == 1).then_some(())
    })
    .await;
    // Approved while the slow run holds the slot: the resume is held.
    approve(&env, &asking, pending[0]["toolCallId"].as_str().unwrap()).await;
    let held: Vec<String> = env
        .rows(
            "SELECT id::text FROM runs WHERE held_since IS NOT NULL AND status = 'queued'",
            |r| r.get(0),
        )
        .await;
    assert_eq!(
        held,
        std::slice::from_ref(&asking),
        "the resumed run waits for the slot"
    );
    let slow_done = env.wait_run_finished(&slow).await;
    assert_eq!(slow_done["status"], "completed");
    let asked_done = env.wait_run_finished(&asking).await;
    assert_eq!(asked_done["status"], "completed", "{asked_done}");
    worker.stop().await.unwrap();
    env.finish().await;
}

/// An environment whose `capped` agent allows one running run per value
/// of the thread metadata's `user`.
async fn per_user(tool: &ToolServer) -> TestEnv {
    let toml = capped_toml(&tool.url, "").replace(
        "max_concurrent_runs = 2",
        "max_concurrent_runs = 1\nfair_key = \"metadata.user\"",
    );
    TestEnv::start(Registry::from_toml(&toml).unwrap()).await
}

/// Starts a turn of `capped` on a thread of `user`'s; returns the run id.
async fn start_for(env: &TestEnv, user: &str) -> String {
    let thread = env
        .post(
            "/threads",
            json!({ "agent": "capped", "metadata": { "user": user } }),
        )
        .await;
    let id = thread["id"].as_str().unwrap();
    let run = env
        .post(
            &format!("/threads/{id}/messages"),
            json!({ "content": "go" }),
        )
        .await;
    run["runId"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_fair_key_keeps_the_agent_cap_per_metadata_value() {
    let tool = slow_tool(10).await;
    let env = per_user(&tool).await;
    let mut runs = Vec::new();
    for user in ["ann", "ann", "ben", "ben", "ann"] {
        runs.push(start_for(&env, user).await);
    }
    let held: Vec<String> = env
        .rows(
            "SELECT id::text FROM runs WHERE held_since IS NOT NULL ORDER BY held_since, id",
            |r| r.get(0),
        )
        .await;
    assert_eq!(held, [runs[1].clone(), runs[3].clone(), runs[4].clone()]);
    let worker = env.spawn_worker();
    for run in &runs {
        assert_eq!(env.wait_run_finished(run).await["status"], "completed");
    }
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn concurrent_starts_never_take_more_slots_than_the_cap() {
    let tool = slow_tool(10).await;
    let env = TestEnv::start(capped(&tool.url)).await;
    // 16 turns of `capped` (2 a owner) started at once, no worker.
    let started = futures::future::join_all((0..16).map(|_| start_as(&env, ALICE, "capped"))).await;
    let counts: Vec<(i64, i64)> = env
        .rows(
            "SELECT count(*) FILTER (WHERE held_since IS NULL),
                    count(*) FILTER (WHERE held_since IS NOT NULL)
             FROM runs WHERE status = 'queued'",
            |r| (r.get(0), r.get(1)),
        )
        .await;
    assert_eq!(counts, [(2, 14)], "admitted, held");
    let worker = env.spawn_worker();
    for run in &started {
        assert_eq!(env.wait_run_finished(run).await["status"], "completed");
    }
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_long_backlog_of_one_fair_key_does_not_hide_another_keys_run() {
    let tool = slow_tool(10).await;
    let env = per_user(&tool).await;
    let mut ben = Vec::new();
    // Ann's 12 runs first (11 held), then Ben's 2 (1 held, behind them).
    for user in std::iter::repeat_n("ann", 12).chain(["ben", "ben"]) {
        let run = start_for(&env, user).await;
        if user == "ben" {
            ben.push(run);
        }
    }
    // Ben's first run ends where nobody admits (as the reaper failing it
    // would): the reaper's pass admits Ben's second past Ann's backlog.
    env.sql(&format!(
        "UPDATE runs SET status = 'failed', finished_at = now() WHERE id = '{}'",
        ben[0]
    ))
    .await;
    let report = reap_once(&env.reaper(), &ReaperConfig::default())
        .await
        .unwrap();
    assert_eq!(report.held_runs_admitted, 1, "{report:?}");
    let admitted: Vec<String> = env
        .rows(
            "SELECT id::text FROM runs WHERE held_since IS NULL AND status = 'queued'
               AND slot_key LIKE '%\"ben\"%'",
            |r| r.get(0),
        )
        .await;
    assert_eq!(admitted, std::slice::from_ref(&ben[1]));
    env.finish().await;
}
