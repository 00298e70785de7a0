//! A parked thread costs rows, not a process: after parking many threads the
//! worker handles nothing, holds no lease and no task, and its memory does
//! not grow with them.

use agentenkit_tests::*;
use futures::StreamExt;
use serde_json::json;

const THREADS: usize = 1000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_parked_threads_hold_no_worker() {
    let tool = ToolServer::ok().await;
    let mut env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    env.worker_config.prefetch = 32;
    let worker = env.worker();
    let handle = {
        let w = worker.clone();
        let token = tokio_util::sync::CancellationToken::new();
        let stop = token.clone();
        (tokio::spawn(async move { w.run(token).await }), stop)
    };
    let metrics = tokio::runtime::Handle::current().metrics();

    // Warm up (connections, prepared statements) with a first batch, then
    // measure across the rest.
    let park = |n: usize| {
        let env = &env;
        async move {
            futures::stream::iter(0..n)
                .map(|i| async move { env.start_turn("agent", &format!("mail {i}")).await })
                .buffer_unordered(16)
                .collect::<Vec<_>>()
                .await
        }
    };
    let wait_parked = |n: usize| {
        let env = &env;
        async move {
            eventually(&format!("{n} threads are parked"), || async {
                let inbox = env.get("/agent/inbox").await;
                (inbox.as_array().map_or(0, Vec::len) == n).then_some(())
            })
            .await
        }
    };
    // Each park's segment finishes its bookkeeping (publishing the expiry
    // messages, the ack) just after the park commits: then nothing is held.
    let wait_idle = || async {
        eventually("the worker is idle with every thread parked", || async {
            let held = env
                .rows(
                    "SELECT count(*) FROM runs WHERE lease_expires_at > now() AND status = 'running'",
                    |r| r.get::<_, i64>(0),
                )
                .await;
            (worker.busy() == 0 && held == [0]).then_some(())
        })
        .await
    };
    park(100).await;
    wait_parked(100).await;
    wait_idle().await;
    let (rss_before, tasks_before) = (rss_bytes(), metrics.num_alive_tasks());
    let started = park(THREADS - 100).await;
    wait_parked(THREADS).await;
    wait_idle().await;
    let (rss_after, tasks_after) = (rss_bytes(), metrics.num_alive_tasks());
    // Connections may still open between the batches (each Postgres
    // connection of the pool and each HTTP keep-alive connection is a task):
    // a task per parked thread would be 900 more.
    assert!(
        tasks_after <= tasks_before + 40,
        "tasks grew with parked threads: {tasks_before} -> {tasks_after}"
    );
    let per_thread = rss_after.saturating_sub(rss_before) / (THREADS as u64 - 100);
    eprintln!(
        "parked {THREADS} threads: rss {rss_before} -> {rss_after} bytes ({per_thread} B per parked thread), tasks {tasks_before} -> {tasks_after}"
    );
    // Generous: allocator and connection-pool noise, not a leak per thread.
    assert!(
        per_thread < 16 * 1024,
        "{per_thread} bytes per parked thread"
    );
    assert_eq!(tool.calls(), 0);

    // And they all still resume.
    let (thread_id, run_id) = &started[0];
    env.reply(
        "/agent/tool-call/approve",
        ALICE,
        json!({ "runId": run_id, "toolCallId": "c1" }),
    )
    .await;
    env.wait_status(thread_id, "IDLE").await;
    handle.1.cancel();
    handle.0.await.unwrap().unwrap();
    env.finish().await;
}
