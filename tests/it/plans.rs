//! Fast from the first row: the statements of a cycle read the tables that
//! grow with threads by their indexes even when they were planned while
//! those tables were empty (a fresh deployment, a truncate), as prepared
//! statements are. Checked on what Postgres did: the rows its sequential
//! scans of those tables read.

use std::time::Duration;

use agentenkit_core::ThreadId;
use agentenkit_store::Scope;
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

/// Twelve cycles, and a client's reads of each thread and of the inbox
/// (the inbox and a thread's stream first look for overdue requests to
/// expire, in their scope), on tables fresh and just vacuumed, as after a
/// deploy or a truncate: every statement is planned against empty tables.
async fn cycles_from_fresh_tables(env: &TestEnv) {
    for table in GROWING {
        env.sql(&format!("VACUUM {table}")).await;
    }
    let worker = env.spawn_worker();
    for n in 0..12 {
        let (thread_id, run_id) = if n % 2 == 0 {
            env.start_turn("agent", &format!("cycle {n}")).await
        } else {
            turn_on_unseen_thread(env, &format!("cycle {n}")).await
        };
        env.wait_pending(&thread_id, 1).await;
        env.get(&format!("/threads/{thread_id}/pending-inputs"))
            .await;
        env.get("/agent/inbox").await;
        let thread = ThreadId(thread_id.parse().unwrap());
        // What a client's stream and the reaper look for.
        let scope = Scope::Thread(thread);
        env.store.has_reclaimable_requests(&scope).await.unwrap();
        for scope in [scope, Scope::All] {
            env.store.overdue_requests(&scope, 10).await.unwrap();
        }
        let answer = approve(env, &run_id, "c1").await;
        assert_eq!(answer["delivered"], true, "{answer}");
        env.wait_run_finished(&run_id).await;
        env.get(&format!("/threads/{thread_id}")).await;
        env.get(&format!("/threads/{thread_id}/events")).await;
        env.get(&format!("/runs/{run_id}/journal")).await;
    }
    worker.stop().await.unwrap();
}

/// A turn on a thread the API's process did not create, which it starts
/// by reading the thread first (a turn on one it created is written
/// whole): both ways are planned.
async fn turn_on_unseen_thread(env: &TestEnv, content: &str) -> (String, String) {
    let thread: Vec<uuid::Uuid> = env
        .rows(
            "INSERT INTO threads (id, owner, agent, metadata)
             VALUES (gen_random_uuid(), 'alice', 'agent', '{}') RETURNING id",
            |r| r.get(0),
        )
        .await;
    let run = env
        .post(
            &format!("/threads/{}/messages", thread[0]),
            serde_json::json!({ "content": content }),
        )
        .await;
    let run_id = run["runId"].as_str().expect("run id").to_owned();
    (thread[0].to_string(), run_id)
}

#[tokio::test]
async fn cycles_from_fresh_tables_read_no_growing_table_whole() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    cycles_from_fresh_tables(&env).await;
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

/// The growing table a plan reads whole, if any: a sequential scan of it,
/// or an index scan with no `Index Cond` (which reads the whole index:
/// every row of the table, or every row a partial index holds).
fn scanned_whole(plan: &str) -> Option<&'static str> {
    let lines: Vec<&str> = plan.lines().map(|l| l.trim_start()).collect();
    lines.iter().enumerate().find_map(|(at, line)| {
        let node = line.trim_start_matches("->").trim_start();
        let (table, keyed) = if let Some(rest) = node.strip_prefix("Seq Scan on ") {
            (rest.split(' ').next()?, false)
        } else if node.starts_with("Index Scan using ")
            || node.starts_with("Index Only Scan using ")
        {
            let table = node.split(" on ").nth(1)?.split(' ').next()?;
            // The node's own details: the lines up to the next node.
            let keyed = lines[at + 1..]
                .iter()
                .take_while(|l| !l.starts_with("->") && !is_header(l))
                .any(|l| l.starts_with("Index Cond:"));
            (table, keyed)
        } else {
            return None;
        };
        if keyed {
            return None;
        }
        GROWING.iter().copied().find(|growing| *growing == table)
    })
}

/// A line that starts a plan's part rather than detailing a node.
fn is_header(line: &str) -> bool {
    ["SubPlan", "InitPlan", "CTE "]
        .iter()
        .any(|h| line.starts_with(h))
}

/// Every statement the cycles prepared, as `EXPLAIN` shows the plan its
/// session runs it by: none reads a growing table whole, and each is
/// planned once for all executions, never again per execution (a custom
/// plan is what a statement gets, unasked, while Postgres compares plans,
/// and for good once the tables outgrow the first ones).
#[tokio::test]
async fn every_statement_of_a_cycle_has_one_plan_that_reads_by_index() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    cycles_from_fresh_tables(&env).await;
    let plans = env.store.prepared_plans().await.unwrap();
    let acquire = plans
        .iter()
        .filter(|p| p.statement.contains("lease_token = lease_token + 1"))
        .count();
    assert!(
        acquire > 0,
        "the lease's statement was not found among {} statements",
        plans.len()
    );
    // Both ways a turn starts were planned: read first, or written whole.
    for start in ["SELECT agent FROM threads WHERE id", "AND agent = $3"] {
        assert!(
            plans.iter().any(|p| p.statement.contains(start)),
            "no statement with {start:?} among {} statements",
            plans.len()
        );
    }
    let read_whole: Vec<String> = plans
        .iter()
        .filter_map(|p| {
            let table = scanned_whole(&p.plan)?;
            Some(format!(
                "{table} read whole by\n{}\n{}",
                p.statement, p.plan
            ))
        })
        .collect();
    assert!(read_whole.is_empty(), "{}", read_whole.join("\n\n"));
    let per_execution: Vec<&str> = plans
        .iter()
        .filter(|p| p.custom_plans > 0)
        .map(|p| p.statement.as_str())
        .collect();
    assert!(
        per_execution.is_empty(),
        "planned per execution: {per_execution:#?}"
    );
    env.finish().await;
}

#[test]
fn a_whole_table_read_is_found_in_a_plan() {
    let plan = "Update on runs\n  ->  Nested Loop\n        ->  Seq Scan on tool_calls tc\n";
    assert_eq!(scanned_whole(plan), Some("tool_calls"));
    assert_eq!(scanned_whole("Seq Scan on agent_versions"), None);
    let keyed = "Index Scan using runs_pkey on runs\n  Index Cond: (id = $1)\n  Filter: (x)";
    assert_eq!(scanned_whole(keyed), None);
    // An anti join that checks every run against its key.
    let whole = "->  Nested Loop Anti Join\n      Join Filter: (root.id = runs.root_run_id)\n      \
                 ->  Index Scan using runs_pkey on runs\n            Index Cond: (id = $1)\n      \
                 ->  Index Scan using runs_pkey on runs root\n            Filter: (status = 'x')\n\
                 SubPlan 3\n  ->  Index Scan using journal_pkey on journal j\n        Index Cond: (run_id = a.id)";
    assert_eq!(scanned_whole(whole), Some("runs"));
    let only = "Index Only Scan using runs_root_idx on runs c\n  Filter: (parent_run_id = a.id)";
    assert_eq!(scanned_whole(only), Some("runs"));
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
