//! Signed notifications and reminders: a local receiver checks every
//! signature and records every delivery; the deployment's events reach it
//! through the outbox, once per event id even across a worker's death.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentenkit_core::notify::{verify, SIGNATURE_HEADER};
use agentenkit_core::EventType;
use agentenkit_runtime::notify::{
    Escalation, NotificationFormat, Notifications, Target, TargetSecret,
};
use agentenkit_runtime::Registry;
use agentenkit_store::RetryRule;
use agentenkit_tests::*;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{json, Value};

mod failing;
mod here;
mod reminders;

const SECRET: &[u8] = b"whsec_test_0123456789abcdefghijklmnop";

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    event_id: String,
    event_type: String,
    attempt: String,
    /// The signature checked out against `SECRET` (None: none was sent).
    signed: Option<bool>,
    /// The signature header as sent.
    signature: String,
    body: Vec<u8>,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

type Answer = dyn Fn(usize) -> StatusCode + Send + Sync;

/// A webhook receiver on 127.0.0.1 that answers the n-th request (1-based)
/// with `answer(n)` and records each.
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start(answer: impl Fn(usize) -> StatusCode + Send + Sync + 'static) -> Receiver {
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let answer: Arc<Answer> = Arc::new(answer);
        let recorded = got.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
                let (got, answer) = (recorded.clone(), answer.clone());
                async move {
                    let header = |name: &str| {
                        headers
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned()
                    };
                    let now = chrono::Utc::now().timestamp();
                    let signed = headers
                        .get(SIGNATURE_HEADER)
                        .and_then(|v| v.to_str().ok())
                        .map(|sig| verify(SECRET, sig, &body, now, 300).is_ok());
                    let mut got = got.lock().unwrap();
                    got.push(Received {
                        event_id: header("x-agentenkit-event-id"),
                        event_type: header("x-agentenkit-event-type"),
                        attempt: header("x-agentenkit-delivery-attempt"),
                        signed,
                        signature: header("x-agentenkit-signature"),
                        body: body.to_vec(),
                    });
                    answer(got.len())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            url: format!("http://{addr}/hook"),
            got,
        }
    }

    fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// Waits until a request of `event_type` has arrived; returns them all.
    async fn wait_for(&self, event_type: &str, count: usize) -> Vec<Received> {
        eventually(&format!("{count} {event_type} at the receiver"), || async {
            let of_type: Vec<Received> = self
                .got()
                .into_iter()
                .filter(|r| r.event_type == event_type)
                .collect();
            (of_type.len() >= count).then_some(of_type)
        })
        .await
    }
}

/// A tool endpoint, a receiver answering `answer`, a test env on the
/// registry made for them (`registry(tool's url, receiver)`) and a worker.
struct Setup {
    _tool: ToolServer,
    receiver: Receiver,
    env: TestEnv,
    worker: Option<WorkerHandle>,
}

async fn setup(
    answer: impl Fn(usize) -> StatusCode + Send + Sync + 'static,
    registry: impl FnOnce(&str, &Receiver) -> Registry,
) -> Setup {
    let mut setup = setup_without_worker(answer, registry).await;
    setup.worker = Some(setup.env.spawn_worker());
    setup
}

/// [`setup`], the worker left to the test (one that crashes, say).
async fn setup_without_worker(
    answer: impl Fn(usize) -> StatusCode + Send + Sync + 'static,
    registry: impl FnOnce(&str, &Receiver) -> Registry,
) -> Setup {
    let tool = ToolServer::ok().await;
    let receiver = Receiver::start(answer).await;
    let env = TestEnv::start(registry(&tool.url, &receiver)).await;
    Setup {
        _tool: tool,
        receiver,
        env,
        worker: None,
    }
}

impl Setup {
    async fn finish(self) {
        if let Some(worker) = self.worker {
            worker.stop().await.unwrap();
        }
        self.env.finish().await;
    }
}

/// Waits until no notification or reminder is left in the outbox.
async fn all_consumed(env: &TestEnv) {
    eventually("every notification consumed", || async {
        (notify_rows_left(env).await == 0).then_some(())
    })
    .await;
}

fn target(name: &str, url: &str) -> Target {
    Target::new(name, url)
        .unwrap()
        .secret(TargetSecret::Key(SECRET.to_vec()))
        .retry(RetryRule {
            max_attempts: 5,
            first_retry: Duration::from_millis(100),
        })
        .timeout(Duration::from_millis(800))
}

fn with_targets(registry: Registry, targets: Vec<Target>) -> Registry {
    let notifications = targets.into_iter().fold(
        Notifications::default()
            .with_ui_url(Some("http://inbox.example".into()))
            .unwrap(),
        Notifications::with_target,
    );
    registry.with_notifications(notifications)
}

fn approve(run_id: &str) -> Value {
    json!({ "runId": run_id, "toolCallId": "c1" })
}

/// The rows of a delivery: `(target, attempts, delivered, dead, last_status)`.
async fn deliveries(env: &TestEnv, id: &str) -> Vec<(String, u32, bool, bool, Option<u16>)> {
    env.store
        .deliveries(id)
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.target, d.attempts, d.delivered, d.dead, d.last_status))
        .collect()
}

async fn notify_rows_left(env: &TestEnv) -> usize {
    let left = env
        .rows(
            "SELECT key, delay_ms, due_at::text FROM outbox WHERE key LIKE 'notify:%' OR key LIKE 'remind:%'",
            |r| format!("{} {} {}", r.get::<_, String>(0), r.get::<_, i64>(1), r.get::<_, String>(2)),
        )
        .await;
    if !left.is_empty() {
        eprintln!("left: {left:?}");
    }
    left.len()
}

#[tokio::test]
async fn an_approval_is_told_signed_once_per_event_with_the_stream_ids() {
    let setup = setup(
        |_| StatusCode::OK,
        |tool, receiver| {
            with_targets(
                approval_registry(CALL_THEN_DONE, tool),
                vec![target("ops", &receiver.url)],
            )
        },
    )
    .await;
    let (receiver, env) = (&setup.receiver, &setup.env);
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    let required = receiver.wait_for("INPUT_REQUIRED", 1).await;
    let body = required[0].json();
    assert_eq!(body["type"], "INPUT_REQUIRED");
    assert_eq!(body["threadId"], thread_id.as_str());
    assert_eq!(body["runId"], run_id.as_str());
    assert_eq!(body["data"]["toolCallId"], "c1");
    assert_eq!(body["data"]["arguments"], json!({ "to": "a@b.c" }));
    assert_eq!(body["link"], "http://inbox.example/ui");
    // The envelope is the one the OpenAPI document's webhook describes.
    let doc = agentenkit_api::openapi_document();
    assert!(doc["webhooks"]["notification"]["post"].is_object());
    let schema = &doc["components"]["schemas"]["Notification"];
    let validator = jsonschema::validator_for(schema).unwrap();
    assert!(validator.is_valid(&body), "{body}");
    let header = &doc["webhooks"]["notification"]["post"]["parameters"][3]["schema"]["pattern"];
    let signature =
        jsonschema::validator_for(&json!({ "type": "string", "pattern": header })).unwrap();
    assert!(signature.is_valid(&json!(required[0].signature)));

    let (status, _) = env
        .reply("/agent/tool-call/approve", ALICE, approve(&run_id))
        .await;
    assert_eq!(status, StatusCode::OK);
    env.wait_run_finished(&run_id).await;
    receiver.wait_for("RUN_COMPLETED", 1).await;
    receiver.wait_for("INPUT_RESOLVED", 1).await;

    // Each delivery is the stream's event: the same id, type and data.
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let got = receiver.got();
    assert_eq!(got.len(), 3, "one delivery per event: {got:?}");
    for received in &got {
        assert_eq!(received.signed, Some(true), "signed: {received:?}");
        assert_eq!(received.attempt, "1");
        let body = received.json();
        assert_eq!(body["id"], received.event_id.as_str());
        let event = events
            .as_array()
            .unwrap()
            .iter()
            .find(|e| {
                e["id"].as_i64().map(|id| id.to_string()).as_ref() == Some(&received.event_id)
            })
            .expect("the delivery's id is a stream event's");
        assert_eq!(event["type"], received.event_type.as_str());
        assert_eq!(event["data"], body["data"]);
        assert_eq!(event["createdAt"], body["createdAt"]);
        // The sender records a delivery a moment after the receiver has
        // it (records are batched): once recorded, it is one attempt.
        let recorded = eventually("the delivery is recorded", || async {
            let rows = deliveries(env, &received.event_id).await;
            rows.iter()
                .all(|(_, _, delivered, _, _)| *delivered)
                .then_some(rows)
        })
        .await;
        assert_eq!(recorded, [("ops".to_owned(), 1, true, false, Some(200))]);
    }
    // MESSAGE, RUN_STARTED, TOOL_CALL... are the stream's alone.
    let told: Vec<&str> = got.iter().map(|r| r.event_type.as_str()).collect();
    assert!(!told.contains(&"MESSAGE") && !told.contains(&"RUN_STARTED"));
    all_consumed(env).await;
    assert!(env
        .metrics_text()
        .await
        .contains("agentenkit_notifications_total{outcome=\"delivered\"} 3"));
    setup.finish().await;
}

/// A run whose `RUN_COMPLETED` is told to a target by a worker that died
/// at the crash point `point` of its delivery.
async fn crashed_at(point: &'static str) -> Setup {
    let setup = setup_without_worker(
        |_| StatusCode::OK,
        |tool, receiver| {
            with_targets(
                registry(CALL_THEN_DONE, tool),
                vec![target("ops", &receiver.url).events([EventType::RunCompleted])],
            )
        },
    )
    .await;
    let crashing = setup.env.spawn_crashing_worker(point);
    let (_, run_id) = setup.env.start_turn("agent", "send it").await;
    setup.env.wait_run_finished(&run_id).await;
    assert!(crashing.died().await.is_err(), "the crash point fired");
    setup
}

/// Killed after sending and before recording (the worker sent the event
/// its own commit claimed): once the claim runs out the reaper publishes
/// the event's outbox row, and a worker sends the same delivery again (the
/// same id and body, for the receiver to drop), as the next attempt.
#[tokio::test]
async fn a_worker_killed_after_sending_leaves_the_event_to_be_sent_again_under_its_id() {
    use agentenkit_runtime::reaper::{reap_once, ReaperConfig};

    let setup = crashed_at("notify:sent").await;
    let (receiver, env) = (&setup.receiver, &setup.env);
    let first = receiver.wait_for("RUN_COMPLETED", 1).await;
    let id = first[0].event_id.clone();
    assert_eq!(
        deliveries(env, &id).await,
        [("ops".to_owned(), 1, false, false, None)],
        "sent, not recorded"
    );
    let worker = env.spawn_worker();
    // Nothing was published: the message waits in the outbox, due when
    // the claim (the 800 ms timeout and 2 s) runs out.
    let reaper = ReaperConfig {
        outbox_stale_after: Duration::ZERO,
        ..ReaperConfig::default()
    };
    let early = reap_once(&env.reaper(), &reaper).await.unwrap();
    assert_eq!(early.outbox_published, 0, "not due while claimed");
    eventually(
        "the reaper published the row once the claim ran out",
        || async {
            let report = reap_once(&env.reaper(), &reaper).await.unwrap();
            (report.outbox_published == 1).then_some(())
        },
    )
    .await;
    let got = receiver.wait_for("RUN_COMPLETED", 2).await;
    assert_eq!(got[1].event_id, id);
    assert_eq!(got[1].body, got[0].body);
    assert_eq!(got[1].attempt, "2");
    eventually("recorded once delivered", || async {
        let rows = deliveries(env, &id).await;
        (rows == [("ops".to_owned(), 2, true, false, Some(200))]).then_some(())
    })
    .await;
    all_consumed(env).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.got().len(), 2);
    worker.stop().await.unwrap();
    setup.finish().await;
}

/// Killed after recording, before the ack: the redelivered message finds
/// the event delivered and sends nothing.
#[tokio::test]
async fn a_worker_killed_after_recording_sends_nothing_more() {
    let setup = crashed_at("notify:recorded").await;
    let (receiver, env) = (&setup.receiver, &setup.env);
    let worker = env.spawn_worker();
    let got = receiver.wait_for("RUN_COMPLETED", 1).await;
    let id = got[0].event_id.clone();
    all_consumed(env).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.got().len(), 1, "exactly once");
    assert_eq!(
        deliveries(env, &id).await,
        [("ops".to_owned(), 1, true, false, Some(200))]
    );
    worker.stop().await.unwrap();
    setup.finish().await;
}

#[tokio::test]
async fn a_slack_target_gets_a_message_with_the_summary_and_a_link() {
    let setup = setup(
        |_| StatusCode::OK,
        |tool, receiver| {
            with_targets(
                approval_registry(CALL_THEN_DONE, tool),
                vec![target("chat", &receiver.url)
                    .secret(TargetSecret::None)
                    .format(NotificationFormat::Slack)
                    .events([EventType::InputRequired])],
            )
        },
    )
    .await;
    let (receiver, env) = (&setup.receiver, &setup.env);
    let (thread_id, _) = env.start_turn("agent", "send it").await;
    let got = receiver.wait_for("INPUT_REQUIRED", 1).await;
    assert_eq!(got[0].signed, None, "unsigned without a secret");
    let body = got[0].json();
    assert_eq!(
        body["text"],
        "Approval needed for `tool` (agent agent): approval\n<http://inbox.example/ui|Open the inbox>"
    );
    assert_eq!(body["blocks"][0]["type"], "section");
    assert!(body["blocks"][1]["elements"][0]["text"]
        .as_str()
        .unwrap()
        .contains(&thread_id));
    setup.finish().await;
}

#[tokio::test]
async fn stops_and_expiries_are_told_too() {
    let setup = setup(
        |_| StatusCode::OK,
        |tool, receiver| {
            with_targets(
                approval_registry_ttl(CALL_THEN_DONE, tool, 1_000),
                vec![target("ops", &receiver.url)
                    .events([EventType::InputResolved, EventType::RunCancelled])],
            )
        },
    )
    .await;
    let (receiver, env) = (&setup.receiver, &setup.env);
    // Expired by its delayed message: INPUT_RESOLVED, status expired.
    let (_, run_id) = env.start_turn("agent", "send it").await;
    let resolved = receiver.wait_for("INPUT_RESOLVED", 1).await;
    assert_eq!(resolved[0].json()["data"]["status"], "expired");
    assert_eq!(resolved[0].json()["runId"], run_id.as_str());
    env.wait_run_finished(&run_id).await;
    // Stopped through the API: RUN_CANCELLED.
    let (thread_id, run_id) = env.start_turn("agent", "send it again").await;
    env.wait_pending(&thread_id, 1).await;
    env.post(&format!("/threads/{thread_id}/stop"), json!({}))
        .await;
    let cancelled = receiver.wait_for("RUN_CANCELLED", 1).await;
    assert_eq!(cancelled[0].json()["runId"], run_id.as_str());
    assert_eq!(cancelled[0].json()["data"]["reason"], "stopped");
    setup.finish().await;
}

#[tokio::test]
async fn without_targets_no_event_writes_a_notification() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    // The park's commit wrote its expiry, nothing else.
    let keys = env
        .rows("SELECT key FROM outbox ORDER BY id", |r| {
            r.get::<_, String>(0)
        })
        .await;
    assert_eq!(keys, [format!("expiry:{run_id}:c1")]);
    env.reply("/agent/tool-call/approve", ALICE, approve(&run_id))
        .await;
    env.wait_run_finished(&run_id).await;
    let made = env
        .rows("SELECT count(*) FROM notification_deliveries", |r| {
            r.get::<_, i64>(0)
        })
        .await;
    assert_eq!(made, [0]);
    assert_eq!(notify_rows_left(&env).await, 0);
    worker.stop().await.unwrap();
    env.finish().await;
}

/// Each approval of a call several people approve is told as it is
/// counted, the last with the call's resolution.
#[tokio::test]
async fn each_approval_of_several_is_told() {
    use agentenkit_core::KeyScope;
    let setup = setup(
        |_| StatusCode::OK,
        |tool, receiver| {
            with_targets(
                two_of_ops_or_security(tool),
                vec![target("ops", &receiver.url)
                    .events([EventType::ApprovalRecorded, EventType::InputResolved])],
            )
        },
    )
    .await;
    let (receiver, env) = (&setup.receiver, &setup.env);
    let scopes = [KeyScope::Read, KeyScope::RespondApprovals];
    let (first, _) = make_key(env, "alice", &scopes, &["ops"]).await;
    let (second, _) = make_key(env, "alice", &scopes, &["ops"]).await;
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    for key in [&first, &second] {
        let (status, _) = env
            .call(
                "POST",
                "/agent/tool-call/approve",
                Some(key),
                Some(approve(&run_id)),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    let recorded = receiver.wait_for("APPROVAL_RECORDED", 1).await;
    assert_eq!(recorded[0].json()["data"]["given"], 1);
    assert_eq!(recorded[0].json()["data"]["required"], 2);
    let resolved = receiver.wait_for("INPUT_RESOLVED", 1).await;
    assert_eq!(resolved[0].json()["data"]["toolCallId"], "c1");
    env.wait_run_finished(&run_id).await;
    setup.finish().await;
}
