//! Provider limits (docs/budgets.md, "Provider limits"): a model's
//! `requests_per_minute` holds across workers, and a step past it waits in
//! a delayed message; on real Postgres and RabbitMQ, against a stand-in
//! provider that answers 429 past its own limit.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentenkit_runtime::Registry;
use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::json;

/// What the stand-in saw: each request's arrival, and how many it refused.
#[derive(Default)]
struct Seen {
    arrivals: Vec<Instant>,
    refused: usize,
}

/// An OpenAI-compatible stand-in allowing `per_minute` requests in any 60
/// seconds, answering 429 (`retry-after: 1`) above it.
async fn strict_provider(per_minute: usize) -> (String, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let shared = seen.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || {
            let seen = shared.clone();
            async move {
                let mut seen = seen.lock().unwrap();
                let now = Instant::now();
                let in_window = seen
                    .arrivals
                    .iter()
                    .filter(|at| now.duration_since(**at) < Duration::from_secs(60))
                    .count();
                seen.arrivals.push(now);
                if in_window >= per_minute {
                    seen.refused += 1;
                    return (
                        StatusCode::TOO_MANY_REQUESTS,
                        [("retry-after", "1")],
                        axum::Json(json!({ "error": { "message": "Rate limit reached" } })),
                    );
                }
                (
                    StatusCode::OK,
                    [("x-stand-in", "1")],
                    axum::Json(json!({
                        "choices": [{ "index": 0, "finish_reason": "stop",
                            "message": { "role": "assistant", "content": "Hello." } }],
                        "usage": { "prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22 },
                    })),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://127.0.0.1:{}/v1",
        listener.local_addr().unwrap().port()
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, seen)
}

#[tokio::test]
async fn a_models_requests_per_minute_hold_across_four_workers_and_no_run_fails() {
    let (url, seen) = strict_provider(3).await;
    let registry = Registry::from_toml(&format!(
        r#"
[agents.chat]
system = "You answer."
model = {{ provider = "openai", model = "gpt-limited", base_url = "{url}", requests_per_minute = 3 }}
"#
    ))
    .unwrap();
    let env = TestEnv::start(registry).await;
    let workers: Vec<_> = (0..4).map(|_| env.spawn_worker()).collect();
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(env.start_turn("chat", "hi").await.1);
    }
    // Three go at once; the other two wait about a minute, in the broker.
    eventually("three calls", || async {
        (seen.lock().unwrap().arrivals.len() == 3).then_some(())
    })
    .await;
    eventually("the two past the limit wait, holding no worker", || async {
        let waiting: Vec<i64> = env
            .rows(
                "SELECT count(*) FROM runs r WHERE r.status = 'queued' AND r.lease_owner IS NULL
                   AND EXISTS (SELECT 1 FROM outbox o WHERE o.delay_ms > 50000
                                 AND o.key = 'segment:' || r.id || ':' || r.segment_seq)",
                |r| r.get(0),
            )
            .await;
        (waiting == [2]).then_some(())
    })
    .await;
    for run in &runs {
        let finished = wait_long(&env, run).await;
        assert_eq!(finished, "completed");
    }
    let (refused, arrivals) = {
        let seen = seen.lock().unwrap();
        (seen.refused, seen.arrivals.clone())
    };
    assert_eq!(refused, 0, "the stand-in never had to refuse");
    assert_eq!(arrivals.len(), 5);
    for (i, at) in arrivals.iter().enumerate() {
        let in_minute = arrivals[i..]
            .iter()
            .filter(|later| later.duration_since(*at) < Duration::from_secs(60))
            .count();
        assert!(in_minute <= 3, "{in_minute} requests within a minute");
    }
    let metrics = env.metrics_text().await;
    assert!(
        metrics
            .contains(r#"agentenkit_provider_waits_total{provider="openai",cause="fleet_limit"}"#),
        "{metrics}"
    );
    for worker in workers {
        worker.stop().await.unwrap();
    }
    env.finish().await;
}

/// The run's status once it ended, waiting up to two minutes (the limit's
/// minute and the delayed messages' way back).
async fn wait_long(env: &TestEnv, run: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = env.get(&format!("/runs/{run}")).await["status"]
            .as_str()
            .unwrap()
            .to_owned();
        if ["completed", "failed", "cancelled"].contains(&status.as_str()) {
            return status;
        }
        if Instant::now() > deadline {
            let runs: Vec<String> = env
                .rows(
                    "SELECT id::text || ' ' || status || ' seq ' || segment_seq || ' attempts ' || attempts
                            || ' lease ' || coalesce(lease_owner::text, '-') || ' ' || coalesce(error, '')
                     FROM runs",
                    |r| r.get(0),
                )
                .await;
            let outbox: Vec<String> = env
                .rows(
                    "SELECT key || ' ' || delay_ms || ' ' || due_at::text FROM outbox",
                    |r| r.get(0),
                )
                .await;
            let calls: Vec<String> = env
                .rows(
                    "SELECT limit_key || ' ' || at::text FROM provider_calls",
                    |r| r.get(0),
                )
                .await;
            panic!("run {run} is still {status}: {runs:#?} {outbox:#?} {calls:#?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_tokens_per_minute_limit_counts_what_the_provider_reported() {
    let env = TestEnv::start(Registry::new()).await;
    let client = env.pg_client().await;
    let reserve = |tokens: i64| {
        let client = &client;
        async move {
            let row = client
                .query_one(
                    "SELECT reservation, wait_ms FROM reserve_provider_call('m', NULL, 100, $1)",
                    &[&tokens],
                )
                .await
                .unwrap();
            (row.get::<_, Option<i64>>(0), row.get::<_, i64>(1))
        }
    };
    let (first, _) = reserve(10).await;
    let first = first.expect("the first call goes");
    // The provider reported 90: a call estimated at 20 more waits about a
    // minute, one of 10 goes.
    client
        .execute(
            "UPDATE provider_calls SET tokens = 90 WHERE id = $1",
            &[&first],
        )
        .await
        .unwrap();
    let (none, wait_ms) = reserve(20).await;
    assert_eq!(none, None);
    assert!((59_000..=61_000).contains(&wait_ms), "{wait_ms}");
    assert!(reserve(10).await.0.is_some());
    env.finish().await;
}

#[test]
fn a_limit_of_zero_is_refused() {
    let err = Registry::from_toml(
        r#"
[agents.a]
model = { provider = "scripted", script = [ { text = "hi" } ], requests_per_minute = 0 }
"#,
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(err.contains("must be at least 1"), "{err}");
}

#[tokio::test]
async fn a_run_the_provider_keeps_deferring_fails_with_a_reason() {
    let (url, seen) = strict_provider(1).await;
    let registry = Registry::from_toml(&format!(
        r#"
[agents.chat]
system = "You answer."
model = {{ provider = "openai", model = "gpt-deferred", base_url = "{url}" }}
"#
    ))
    .unwrap();
    let env = TestEnv::start(registry).await;
    // The stand-in's one call a minute goes to another client first: every
    // call of the run is answered 429 (retry-after: 1).
    seen.lock().unwrap().arrivals.push(Instant::now());
    let (_, run) = env.start_turn("chat", "hi").await;
    let worker = env.spawn_worker();
    eventually("a first deferral", || async {
        let deferrals: Vec<i32> = env
            .rows(
                &format!("SELECT deferrals FROM runs WHERE id = '{run}'"),
                |r| r.get(0),
            )
            .await;
        (deferrals == [1]).then_some(())
    })
    .await;
    // As if it had been deferred a hundred times: the next segment ends it.
    env.sql(&format!(
        "UPDATE runs SET deferrals = 100 WHERE id = '{run}'"
    ))
    .await;
    let finished = env.wait_run_finished(&run).await;
    assert_eq!(finished["status"], "failed", "{finished}");
    assert_eq!(
        finished["error"],
        "the model provider asked to wait 100 times in a row without progress"
    );
    worker.stop().await.unwrap();
    env.finish().await;
}
