//! Tests that disturb the shared broker. They are `#[ignore]`d so that the
//! parallel run never sees them, and `make test` runs them afterwards, one
//! at a time (`cargo nextest run --run-ignored only --test-threads 1`).

use std::process::Command;
use std::time::Duration;

use agentenkit_tests::*;
use serde_json::json;

fn rabbitmqctl(args: &[&str]) {
    let status = Command::new("rabbitmqctl")
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("rabbitmqctl {args:?}: {e}"));
    assert!(status.success(), "rabbitmqctl {args:?} failed");
    if args.first() == Some(&"await_startup") {
        assert_vhost_recovered();
    }
}

/// RabbitMQ 3.10 cannot recover a vhost holding a binding whose source
/// exchange is gone (rabbitmq-server#9770, fixed in 3.12): the node starts
/// but every connection is refused. Say so plainly rather than let every
/// later test fail with "vhost '/' is down".
fn assert_vhost_recovered() {
    let output = Command::new("rabbitmqctl")
        .args(["eval", "rabbit_vhost_sup_sup:is_vhost_alive(<<\"/\">>)."])
        .output()
        .expect("rabbitmqctl eval");
    let alive = String::from_utf8_lossy(&output.stdout).trim() == "true";
    assert!(
        alive,
        "RabbitMQ restarted but could not recover vhost '/' (see its log: 'Unable to recover \
         vhost'); a broker bug fixed in 3.12 (rabbitmq-server#9770). Repair this test broker with \
         `rabbitmqctl stop_app && rabbitmqctl reset && rabbitmqctl start_app`"
    );
}

#[tokio::test]
#[ignore = "restarts RabbitMQ: run alone by `make test`"]
async fn an_expiry_in_flight_survives_a_broker_restart() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry_ttl(CALL_THEN_DONE, &tool.url, 5000)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;

    // The delayed expiry is somewhere in the ladder now; restart the broker
    // under it (durable queues, persistent messages).
    rabbitmqctl(&["stop_app"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    rabbitmqctl(&["start_app"]);
    rabbitmqctl(&["await_startup", "--timeout", "60"]);

    // The worker's consumer reconnects; the expiry fires and the run ends.
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed");
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let resolved = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "INPUT_RESOLVED")
        .expect("resolved");
    assert_eq!(resolved["data"]["status"], "expired");
    assert_eq!(tool.calls(), 0);

    // Publishing and consuming work again: a new turn parks, is approved
    // and completes.
    let second = env
        .post(
            &format!("/threads/{thread_id}/messages"),
            json!({ "content": "again" }),
        )
        .await["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    env.wait_pending(&thread_id, 1).await;
    let (_, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": second, "toolCallId": "c1" }),
        )
        .await;
    assert_eq!(answer["delivered"], true);
    assert_eq!(env.wait_run_finished(&second).await["status"], "completed");
    assert_eq!(tool.calls(), 1);
    worker.stop().await.unwrap();
    env.finish().await;
}

/// Clears the memory alarm even when the test fails half-way.
struct AlarmGuard;

impl Drop for AlarmGuard {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl")
            .args(["set_vm_memory_high_watermark", "0.4"])
            .status();
    }
}

#[tokio::test]
#[ignore = "blocks every publisher of RabbitMQ: run alone by `make test`"]
async fn an_answer_is_given_when_the_broker_blocks_publishers_and_the_reaper_publishes_later() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start_with(
        approval_registry(CALL_THEN_DONE, &tool.url),
        |_| {},
        |state| {
            let relay = state.relay.clone().with_timeout(Duration::from_millis(500));
            state.with_relay(relay)
        },
    )
    .await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;

    // A memory alarm: the broker blocks every connection that publishes.
    let alarm = AlarmGuard;
    rabbitmqctl(&["set_vm_memory_high_watermark", "0"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    let (status, answer) = tokio::time::timeout(
        Duration::from_secs(10),
        env.reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1" }),
        ),
    )
    .await
    .expect("the answer does not wait for the blocked broker");
    assert_eq!(status.as_u16(), 200);
    assert_eq!(answer["delivered"], true, "the commit is the answer");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the answer did not wait for the blocked broker: {:?}",
        started.elapsed()
    );
    // The resume segment is still in the outbox, for the reaper.
    let pg = env.pg_client().await;
    let waiting: i64 = pg
        .query_one("SELECT count(*) FROM outbox", &[])
        .await
        .unwrap()
        .get(0);
    assert!(waiting >= 1, "the unpublished segment stays in the outbox");

    drop(alarm);
    let config = agentenkit_runtime::reaper::ReaperConfig {
        outbox_stale_after: Duration::ZERO,
        ..Default::default()
    };
    eventually("the reaper's publish resumes the run", || async {
        agentenkit_runtime::reaper::reap_once(&env.reaper(), &config)
            .await
            .unwrap();
        let run = env.get(&format!("/runs/{run_id}")).await;
        (run["status"] == "completed").then_some(())
    })
    .await;
    assert_eq!(tool.calls(), 1, "the tool ran once");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
#[ignore = "restarts RabbitMQ: run alone by `make test`"]
async fn an_answer_given_while_the_broker_is_down_is_published_by_its_own_process_when_it_returns()
{
    let tool = ToolServer::ok().await;
    let env = TestEnv::start_with(
        approval_registry(CALL_THEN_DONE, &tool.url),
        |_| {},
        |state| {
            let relay = state.relay.clone().with_timeout(Duration::from_secs(1));
            state.with_relay(relay)
        },
    )
    .await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;

    rabbitmqctl(&["stop_app"]);
    let answered = tokio::time::timeout(
        Duration::from_secs(15),
        env.reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1" }),
        ),
    )
    .await;
    // The broker comes back whatever the answer was.
    rabbitmqctl(&["start_app"]);
    rabbitmqctl(&["await_startup", "--timeout", "60"]);
    let (status, answer) = answered.expect("the answer does not wait for the broker");
    assert_eq!(status.as_u16(), 200);
    assert_eq!(answer["delivered"], true);

    // No reaper runs here: the API process publishes the resume segment
    // itself once the broker is back, and the worker reconnects.
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed");
    assert_eq!(tool.calls(), 1);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
#[ignore = "blocks every publisher of RabbitMQ: run alone by `make test`"]
async fn a_dead_letter_the_blocked_broker_will_not_take_does_not_hold_the_worker() {
    let mut env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    // Time to raise the alarm between the delivery and its dead letter; a
    // shutdown grace far past the settle timeout.
    env.worker_config.hand_back_delay = Duration::from_secs(4);
    env.worker_config.settle_timeout = Duration::from_secs(1);
    env.worker_config.shutdown_grace = Duration::from_secs(60);
    let worker = env.spawn_worker();
    let (_connection, channel) = env.amqp_channel().await;
    let segments = env.topology.segments_queue();
    channel
        .basic_publish(
            "".into(),
            segments.as_str().into(),
            lapin::options::BasicPublishOptions::default(),
            b"{not a message",
            lapin::BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    // The worker holds it and waits `hand_back_delay` to dead-letter it: its
    // counter moves before that wait. (A passive declare's message count
    // is no proof: it can read 0 before the message has reached the
    // queue, and a worker stopped then holds nothing.)
    eventually("the worker takes the message", || async {
        env.metrics_text()
            .await
            .contains("agentenkit_dead_letters_total")
            .then_some(())
    })
    .await;
    let alarm = AlarmGuard;
    rabbitmqctl(&["set_vm_memory_high_watermark", "0"]);

    tokio::time::timeout(Duration::from_secs(20), worker.stop())
        .await
        .expect("the worker stops: its dead letter's publish did not hold it")
        .unwrap();
    assert!(
        env.metrics_text()
            .await
            .contains("agentenkit_settle_timeouts_total{what=\"dead letter\"}"),
        "the give-up is counted"
    );

    // Nothing is lost: once the broker takes publishes again, the message
    // (requeued, or its dead letter let through) ends in the dead-letter
    // queue.
    drop(alarm);
    let worker = env.spawn_worker();
    let dead = eventually("the message is dead-lettered", || async {
        let dead = env.take_dead_letters().await;
        (!dead.is_empty()).then_some(dead)
    })
    .await;
    assert!(dead.iter().all(|body| body == b"{not a message"));
    worker.stop().await.unwrap();
    env.finish().await;
}
