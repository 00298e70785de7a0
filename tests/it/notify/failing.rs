//! Targets that fail: retried with the same body, dead after their last
//! attempt, held off by their circuit, or never answering; runs go on.

use super::*;

/// A receiver's answer that fails the first `failures` requests, then
/// takes them.
fn fails_first(failures: usize, failure: StatusCode) -> impl Fn(usize) -> StatusCode {
    move |n| {
        if n <= failures {
            failure
        } else {
            StatusCode::NO_CONTENT
        }
    }
}

#[tokio::test]
async fn a_failing_target_is_retried_with_the_same_body_until_it_takes_it() {
    let setup = setup(
        fails_first(2, StatusCode::SERVICE_UNAVAILABLE),
        |tool, receiver| {
            with_targets(
                registry(CALL_THEN_DONE, tool),
                vec![target("ops", &receiver.url).events([EventType::RunCompleted])],
            )
        },
    )
    .await;
    let (receiver, env) = (&setup.receiver, &setup.env);
    let (_, run_id) = env.start_turn("agent", "send it").await;
    env.wait_run_finished(&run_id).await;
    let got = receiver.wait_for("RUN_COMPLETED", 3).await;
    let attempts: Vec<&str> = got.iter().map(|r| r.attempt.as_str()).collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    assert!(got
        .iter()
        .all(|r| r.body == got[0].body && r.event_id == got[0].event_id));
    assert!(got.iter().all(|r| r.signed == Some(true)));
    let id = got[0].event_id.clone();
    eventually("the third attempt recorded", || async {
        let rows = deliveries(env, &id).await;
        (rows == [("ops".to_owned(), 3, true, false, Some(204))]).then_some(())
    })
    .await;
    all_consumed(env).await;
    assert_eq!(receiver.got().len(), 3, "nothing after the delivery");
    setup.finish().await;
}

#[tokio::test]
async fn a_target_that_never_answers_is_dead_after_its_last_attempt_and_runs_go_on() {
    let setup = setup(
        |_| StatusCode::INTERNAL_SERVER_ERROR,
        |tool, receiver| {
            with_targets(
                registry(CALL_THEN_DONE, tool),
                vec![target("ops", &receiver.url)
                    .events([EventType::RunCompleted])
                    .retry(RetryRule {
                        max_attempts: 3,
                        first_retry: Duration::from_millis(50),
                    })],
            )
        },
    )
    .await;
    let (receiver, env) = (&setup.receiver, &setup.env);
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    // The run does not wait for its notification.
    env.wait_run_finished(&run_id).await;
    env.wait_status(&thread_id, "IDLE").await;
    let got = receiver.wait_for("RUN_COMPLETED", 3).await;
    let id = got[0].event_id.clone();
    eventually("the delivery dead", || async {
        let rows = deliveries(env, &id).await;
        (rows == [("ops".to_owned(), 3, false, true, Some(500))]).then_some(())
    })
    .await;
    all_consumed(env).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.got().len(), 3, "no attempt after the last");
    let dead = env.store.deliveries(&id).await.unwrap();
    assert_eq!(
        dead[0].last_error.as_deref(),
        Some("the target answered 500 Internal Server Error")
    );
    assert!(env
        .metrics_text()
        .await
        .contains("agentenkit_notifications_total{outcome=\"dead\"} 1"));
    // The reaper deletes settled deliveries past their keeping.
    let keep = agentenkit_runtime::reaper::ReaperConfig::default();
    let report = agentenkit_runtime::reaper::reap_once(&env.reaper(), &keep)
        .await
        .unwrap();
    assert_eq!(report.deliveries_deleted, 0, "kept a week");
    let report = agentenkit_runtime::reaper::reap_once(
        &env.reaper(),
        &agentenkit_runtime::reaper::ReaperConfig {
            deliveries_keep_for: Duration::ZERO,
            ..keep
        },
    )
    .await
    .unwrap();
    assert_eq!(report.deliveries_deleted, 1);
    assert!(env.store.deliveries(&id).await.unwrap().is_empty());
    setup.finish().await;
}

/// A target that fails `circuit_failures` times in a row is not tried
/// while its circuit is open: its delivery waits without spending its
/// attempts, and is made (here: delivered) once the circuit lets one
/// through.
#[tokio::test]
async fn a_failing_targets_circuit_opens_and_its_deliveries_wait_without_spending_attempts() {
    use agentenkit_runtime::notify::breaker::BreakerRule;

    let setup = setup(
        fails_first(2, StatusCode::INTERNAL_SERVER_ERROR),
        |tool, receiver| {
            with_targets(
                registry(CALL_THEN_DONE, tool),
                vec![target("ops", &receiver.url)
                    .events([EventType::RunCompleted])
                    .retry(RetryRule {
                        max_attempts: 3,
                        first_retry: Duration::from_millis(50),
                    })
                    .breaker(BreakerRule {
                        failures: 2,
                        open_for: Duration::from_millis(1_500),
                    })],
            )
        },
    )
    .await;
    let (receiver, env) = (&setup.receiver, &setup.env);
    let (_, run_id) = env.start_turn("agent", "send it").await;
    env.wait_run_finished(&run_id).await;
    let got = receiver.wait_for("RUN_COMPLETED", 2).await;
    let id = got[0].event_id.clone();
    // The retry due 100 ms later finds the circuit open: given back.
    let waiting = eventually("the delivery deferred", || async {
        let rows = env.store.deliveries(&id).await.unwrap();
        let deferred = rows.len() == 1
            && rows[0].attempts == 2
            && !rows[0].delivered
            && !rows[0].dead
            && rows[0]
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("circuit is open"));
        deferred.then_some(rows)
    })
    .await;
    assert_eq!(waiting[0].attempts, 2, "no attempt spent while open");
    assert_eq!(receiver.got().len(), 2, "not tried while open");
    // Once the circuit lets one through, the third (last) attempt is made.
    eventually("delivered after the circuit closed", || async {
        let rows = deliveries(env, &id).await;
        (rows == [("ops".to_owned(), 3, true, false, Some(204))]).then_some(())
    })
    .await;
    assert_eq!(receiver.got().len(), 3);
    all_consumed(env).await;
    assert!(env
        .metrics_text()
        .await
        .contains("agentenkit_notifications_total{outcome=\"deferred\"}"));
    setup.finish().await;
}

/// A receiver that takes connections and never answers holds only the
/// notifications' own slots: runs go on, their segments never wait behind
/// notifications (which a shared queue made them do once the hanging
/// deliveries filled the worker's prefetch).
#[tokio::test]
async fn a_receiver_that_never_answers_does_not_hold_up_runs() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", silent.local_addr().unwrap());
    let held: Arc<Mutex<Vec<tokio::net::TcpStream>>> = Arc::default();
    let holding = held.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = silent.accept().await {
            holding.lock().unwrap().push(socket);
        }
    });
    let tool = ToolServer::ok().await;
    let registry = with_targets(
        approval_registry(CALL_THEN_DONE, &tool.url),
        vec![target("silent", &url).timeout(Duration::from_secs(30))],
    );
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    // More parks (each an INPUT_REQUIRED to send) than the worker's
    // segment prefetch (8).
    let mut runs = Vec::new();
    for _ in 0..10 {
        runs.push(env.start_turn("agent", "send it").await);
    }
    for (thread_id, run_id) in &runs {
        env.wait_pending(thread_id, 1).await;
        env.reply("/agent/tool-call/approve", ALICE, approve(run_id))
            .await;
    }
    tokio::time::timeout(Duration::from_secs(15), async {
        for (_, run_id) in &runs {
            env.wait_run_finished(run_id).await;
        }
    })
    .await
    .expect("every run finished while its notifications hung");
    assert!(
        !held.lock().unwrap().is_empty(),
        "the receiver was sent to (and never answered)"
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

/// Two records of the same deliveries, taking their rows in opposite
/// orders, deadlock; the one Postgres aborts runs again instead of leaving
/// what the targets answered unrecorded until the reaper's next pass.
#[tokio::test]
async fn a_record_aborted_by_a_deadlock_runs_again() {
    use agentenkit_core::{QueueMessage, RunId};
    use agentenkit_store::{Attempted, DeliveryAttempt, DeliveryResult, RecordItem};

    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    let rule = RetryRule {
        max_attempts: 5,
        first_retry: Duration::from_millis(100),
    };
    let targets = vec!["ops".to_owned()];
    let item = |delivery: &str| {
        let attempt = DeliveryAttempt {
            target: "ops".into(),
            attempt: 1,
        };
        RecordItem {
            message: QueueMessage::Remind {
                run_id: RunId(uuid::Uuid::now_v7()),
                tool_call_id: delivery.into(),
            },
            delivery_id: delivery.to_owned(),
            targets: targets.clone(),
            results: vec![Attempted {
                attempt,
                result: DeliveryResult::Delivered { status: 204 },
                rule,
            }],
        }
    };
    for delivery in ["d-a", "d-b"] {
        let claimed = env
            .store
            .claim_deliveries(delivery, &targets, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
    }
    // Another transaction holds d-b's row, and waits long before it looks
    // for a deadlock: the record is the one Postgres aborts.
    let other = env.pg_client().await;
    other
        .batch_execute(
            "SET deadlock_timeout = '20s'; BEGIN;
             UPDATE notification_deliveries SET last_error = 'held' WHERE delivery_id = 'd-b'",
        )
        .await
        .unwrap();
    let store = env.store.clone();
    let items = vec![item("d-a"), item("d-b")];
    let record = tokio::spawn(async move { store.record_many(&items).await });
    // The record holds d-a and waits for d-b; now the other waits for d-a.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let crossing = tokio::spawn(async move {
        other
            .batch_execute(
                "UPDATE notification_deliveries SET last_error = 'held' WHERE delivery_id = 'd-a';
                 COMMIT",
            )
            .await
    });
    record
        .await
        .unwrap()
        .expect("the record runs again after the deadlock");
    crossing.await.unwrap().unwrap();
    for delivery in ["d-a", "d-b"] {
        assert_eq!(
            deliveries(&env, delivery).await,
            [("ops".to_owned(), 1, true, false, Some(204))],
            "{delivery}"
        );
    }
    env.finish().await;
}
