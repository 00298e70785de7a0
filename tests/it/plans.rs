//! Fast from the first row: the statements of a cycle read the tables that
//! grow with threads by their indexes even when they were planned while
//! those tables were empty (a fresh deployment, a truncate), as prepared
//! statements are. Checked on what Postgres did: the rows its sequential
//! scans of those tables read.

use std::time::Duration;

use agentenkit_tests::*;

/// The tables a deployment's use makes grow.
const GROWING: &[&str] = &[
    "threads",
    "runs",
    "tool_calls",
    "events",
    "messages",
    "journal",
    "outbox",
    "notification_deliveries",
    "idempotency_keys",
];

/// `(table, seq_scan, seq_tup_read)` of the growing tables.
async fn seq_scans(env: &TestEnv) -> Vec<(String, i64, i64)> {
    let schema = env.store.schema().expect("test schema").to_owned();
    env.rows(
        &format!(
            "SELECT relname::text, seq_scan, seq_tup_read FROM pg_stat_user_tables
             WHERE schemaname = '{schema}' AND relname = ANY('{{{}}}') ORDER BY relname",
            GROWING.join(",")
        ),
        |r| (r.get(0), r.get(1), r.get(2)),
    )
    .await
}

#[tokio::test]
async fn cycles_from_fresh_tables_read_no_growing_table_whole() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    // Fresh and just vacuumed, as after a deploy or a truncate: every
    // statement is planned against empty tables.
    for table in GROWING {
        env.sql(&format!("VACUUM {table}")).await;
    }
    let worker = env.spawn_worker();
    for n in 0..12 {
        let (thread_id, run_id) = env.start_turn("agent", &format!("cycle {n}")).await;
        env.wait_pending(&thread_id, 1).await;
        let answer = approve(&env, &run_id, "c1").await;
        assert_eq!(answer["delivered"], true, "{answer}");
        env.wait_run_finished(&run_id).await;
        // Reads of the thread a client makes too.
        env.get(&format!("/threads/{thread_id}")).await;
        env.get(&format!("/threads/{thread_id}/events")).await;
        env.get(&format!("/runs/{run_id}/journal")).await;
    }
    worker.stop().await.unwrap();
    // A backend reports its table counters within 10 s of going idle.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let scans = seq_scans(&env).await;
    assert_eq!(scans.len(), GROWING.len(), "{scans:?}");
    let read_whole: Vec<_> = scans.iter().filter(|(_, _, rows)| *rows > 0).collect();
    assert!(
        read_whole.is_empty(),
        "sequential scans read rows of growing tables: {read_whole:?}"
    );
    env.finish().await;
}

/// A table that outgrew its statistics (analyzed while empty) is analyzed
/// again, once: the next look finds nothing to do.
#[tokio::test]
async fn tables_that_outgrew_their_statistics_are_analyzed_once() {
    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    for table in GROWING {
        env.sql(&format!("VACUUM ANALYZE {table}")).await;
    }
    // 60 threads from a session of its own, which reports its counters
    // when it ends.
    env.sql(
        "INSERT INTO threads (id, owner, agent, metadata)
         SELECT gen_random_uuid(), 'alice', 'agent', '{}' FROM generate_series(1, 60)",
    )
    .await;
    let analyzed = eventually("the threads counted", || async {
        let analyzed = env.store.analyze_grown_tables().await.unwrap();
        (!analyzed.is_empty()).then_some(analyzed)
    })
    .await;
    assert_eq!(analyzed, ["threads"]);
    let reltuples: Vec<f32> = env
        .rows(
            &format!(
                "SELECT reltuples FROM pg_class WHERE relname = 'threads'
                 AND relnamespace = '{}'::regnamespace",
                env.store.schema().unwrap()
            ),
            |r| r.get(0),
        )
        .await;
    assert_eq!(reltuples, [60.0]);
    assert!(env.store.analyze_grown_tables().await.unwrap().is_empty());
    env.finish().await;
}

/// A worker looks for such tables by itself, every `statistics_every`.
#[tokio::test]
async fn a_worker_keeps_the_statistics_of_growing_tables() {
    let mut env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    env.worker_config.statistics_every = Some(Duration::from_millis(200));
    env.sql("VACUUM ANALYZE threads").await;
    env.sql(
        "INSERT INTO threads (id, owner, agent, metadata)
         SELECT gen_random_uuid(), 'alice', 'agent', '{}' FROM generate_series(1, 80)",
    )
    .await;
    let worker = env.spawn_worker();
    let schema = env.store.schema().unwrap().to_owned();
    eventually("the worker analyzed threads", || async {
        let reltuples: Vec<f32> = env
            .rows(
                &format!(
                    "SELECT reltuples FROM pg_class WHERE relname = 'threads'
                     AND relnamespace = '{schema}'::regnamespace"
                ),
                |r| r.get(0),
            )
            .await;
        (reltuples == [80.0]).then_some(())
    })
    .await;
    worker.stop().await.unwrap();
    env.finish().await;
}
