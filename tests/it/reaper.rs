use agentenkit_core::RunId;
use agentenkit_runtime::reaper::{reap_once, ReaperConfig};
use agentenkit_store::LeaseAttempt;
use agentenkit_tests::*;
use serde_json::json;

fn eager() -> ReaperConfig {
    ReaperConfig {
        stalled_after: std::time::Duration::from_secs(60),
        outbox_stale_after: std::time::Duration::ZERO,
        batch: 2,
        ..ReaperConfig::default()
    }
}

#[tokio::test]
async fn the_reaper_publishes_what_a_dead_committer_left_in_the_outbox() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(registry(CALL_THEN_DONE, &tool.url)).await;
    let mut runs = Vec::new();
    // Three turns started as an API process would, which then died before
    // publishing: the segments are only in the outbox.
    for _ in 0..3 {
        runs.push(env.start_run_unpublished("agent").await.1.run_id);
    }
    let worker = env.spawn_worker();
    let report = reap_once(&env.reaper(), &eager()).await.unwrap();
    assert_eq!(
        report.outbox_published, 3,
        "batches of 2 until done: {report:?}"
    );
    for run in &runs {
        assert_eq!(
            env.wait_run_finished(&run.to_string()).await["status"],
            "completed"
        );
    }
    // Nothing left: a second pass finds no work.
    let again = reap_once(&env.reaper(), &eager()).await.unwrap();
    assert_eq!(again.outbox_published, 0);
    assert_eq!(tool.calls(), 3);
    worker.stop().await.unwrap();
    env.finish().await;
}

/// A process killed between its commit and its publish (found by `make
/// chaos`) left its run waiting `outbox_stale_after` (30 s) plus the
/// reaper's interval. With no backlog in the segment queue the message
/// cannot be waiting there, so the row goes again after the short
/// `outbox_orphan_after`; behind a backlog it waits the long threshold.
#[tokio::test]
async fn an_orphaned_segment_is_published_again_early_unless_the_queue_has_a_backlog() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(registry(CALL_THEN_DONE, &tool.url)).await;
    // Committed; the committer died before publishing.
    let run = env.start_run_unpublished("agent").await.1.run_id;
    let config = ReaperConfig {
        outbox_stale_after: std::time::Duration::from_secs(600),
        outbox_orphan_after: std::time::Duration::ZERO,
        ..ReaperConfig::default()
    };

    // A backlog (a message nobody consumes yet): the row may be behind it.
    env.queue
        .publish(&agentenkit_core::QueueMessage::Segment {
            run_id: RunId(uuid::Uuid::now_v7()),
            seq: 1,
        })
        .await
        .unwrap();
    wait_for_backlog(&env, 1).await;
    let report = reap_once(&env.reaper(), &config).await.unwrap();
    assert_eq!(report.outbox_published, 0, "behind a backlog it waits");

    // The backlog drains (the unknown run's message is dropped): now the
    // row cannot be in the queue, and goes again at once.
    let worker = env.spawn_worker();
    wait_for_backlog(&env, 0).await;
    let report = reap_once(&env.reaper(), &config).await.unwrap();
    assert_eq!(report.outbox_published, 1, "{report:?}");
    assert_eq!(
        env.wait_run_finished(&run.to_string()).await["status"],
        "completed"
    );
    assert_eq!(tool.calls(), 1);
    worker.stop().await.unwrap();
    env.finish().await;
}

async fn wait_for_backlog(env: &TestEnv, n: u64) {
    for _ in 0..200 {
        if env.relay.backlog().await == Some(n) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the segment queue never held {n} messages");
}

#[tokio::test]
async fn the_reaper_re_enqueues_a_run_whose_worker_died_with_its_message_gone() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(registry(CALL_THEN_DONE, &tool.url)).await;
    let (thread_id, started) = env.start_run_unpublished("agent").await;
    let run: RunId = started.run_id;
    // A worker took the run (its message was acked and is gone) and died.
    let LeaseAttempt::Acquired(_) = env.store.acquire_lease(run, 1, 1).await.unwrap() else {
        panic!("lease");
    };
    for row in &started.outbox {
        let key = row.message.outbox_key();
        env.sql(&format!("DELETE FROM outbox WHERE key = '{key}'"))
            .await;
    }
    let worker = env.spawn_worker();
    let report = eventually(
        "the lease runs out and the reaper re-enqueues the run",
        || async {
            let report = reap_once(&env.reaper(), &eager()).await.unwrap();
            (report.expired_leases == 1).then_some(report)
        },
    )
    .await;
    assert_eq!(report.stalled_queued, 0);
    assert_eq!(
        env.wait_run_finished(&run.to_string()).await["status"],
        "completed"
    );
    env.wait_status(&thread_id.to_string(), "IDLE").await;
    assert_eq!(tool.calls(), 1);
    worker.stop().await.unwrap();
    env.finish().await;
}

/// The outbox keys left in the test's schema, sorted.
async fn outbox_keys(env: &TestEnv) -> Vec<String> {
    let mut keys: Vec<String> = env.rows("SELECT key FROM outbox", |r| r.get(0)).await;
    keys.sort();
    keys
}

#[tokio::test]
async fn an_outbox_row_lives_until_its_message_is_handled_and_no_longer() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    // The first segment was handled (its row went with the lease); the
    // expiry is not due for 15 minutes: its row stays, and a reaper that
    // re-publishes everything overdue leaves it alone.
    assert_eq!(outbox_keys(&env).await, [format!("expiry:{run_id}:c1")]);
    let report = reap_once(&env.reaper(), &eager()).await.unwrap();
    assert_eq!(report.outbox_published, 0, "{report:?}");

    // The answer settles the request: its expiry has nothing left to do.
    env.reply(
        "/agent/tool-call/approve",
        ALICE,
        json!({ "runId": run_id, "toolCallId": "c1" }),
    )
    .await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(
        outbox_keys(&env).await,
        Vec::<String>::new(),
        "the resume segment's row went with its lease"
    );
    assert_eq!(tool.calls(), 1);
    worker.stop().await.unwrap();
    env.finish().await;
}

/// A row is its key alone, which names the message it publishes; a row
/// whose key names nothing is skipped, not a failed pass.
#[tokio::test]
async fn the_reaper_publishes_a_row_from_its_key_and_skips_one_naming_nothing() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(registry(CALL_THEN_DONE, &tool.url)).await;
    let run = env.start_run_unpublished("agent").await.1.run_id;
    let pg = env.pg_client().await;
    assert_eq!(outbox_keys(&env).await, [format!("segment:{run}:1")]);
    pg.batch_execute(
        "INSERT INTO outbox (delay_ms, key, due_at) VALUES (0, 'segment:nonsense', now())",
    )
    .await
    .unwrap();

    let worker = env.spawn_worker();
    let report = reap_once(&env.reaper(), &eager()).await.unwrap();
    assert_eq!(report.outbox_published, 1, "{report:?}");
    assert_eq!(
        env.wait_run_finished(&run.to_string()).await["status"],
        "completed"
    );
    assert_eq!(outbox_keys(&env).await, ["segment:nonsense"]);
    assert_eq!(tool.calls(), 1);
    worker.stop().await.unwrap();
    env.finish().await;
}

/// Idempotency keys past their retention are deleted, batch by batch; a
/// request with one is new again. Younger keys stay.
#[tokio::test]
async fn the_reaper_deletes_idempotency_keys_past_their_retention() {
    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    env.sql(
        "INSERT INTO idempotency_keys (owner, key, request_hash, created_at, status, response)
         SELECT 'alice', 'old-' || n, 'h', now() - interval '25 hours', 200, '{}'
         FROM generate_series(1, 3) n;
         INSERT INTO idempotency_keys (owner, key, request_hash, status, response)
         VALUES ('alice', 'young', 'h', 200, '{}')",
    )
    .await;
    let report = reap_once(&env.reaper(), &eager()).await.unwrap();
    assert_eq!(report.idempotency_keys_deleted, 3, "{report:?}");
    let left = env
        .rows("SELECT key FROM idempotency_keys", |row| {
            row.get::<_, String>(0)
        })
        .await;
    assert_eq!(left, ["young"]);
    env.finish().await;
}

/// A message the reaper publishes again continues its run's trace (the
/// context the run was started under), not one of the reaper's own; a run
/// started untraced gives it none.
#[tokio::test]
async fn a_message_published_again_carries_its_runs_trace() {
    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    let owner = agentenkit_core::Owner("alice".into());
    let trace = agentenkit_core::TraceContext::from_headers(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("congo=t61rcWkgMzE"),
    )
    .unwrap();
    let mut started = Vec::new();
    for traced in [Some(&trace), None] {
        let thread = env
            .store
            .create_thread(&owner, "agent", &json!({}))
            .await
            .unwrap();
        let run = env
            .store
            .start_run(thread.id, &owner, "go", traced)
            .await
            .unwrap();
        started.push((run.run_id, traced.cloned()));
    }
    let rows = env
        .store
        .claim_stale_outbox(0, 60_000, 10, false)
        .await
        .unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for (run, traced) in started {
        let row = rows.iter().find(|r| r.message.run_id() == run).unwrap();
        assert_eq!(row.trace, traced, "run {run}");
    }
    env.finish().await;
}
