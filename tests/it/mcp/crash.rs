//! A worker that dies after a server did a call and before the result was
//! recorded: the next worker calls again with the same idempotency key, so
//! the server can tell it is the same call; the run records it once.

use agentenkit_tests::*;
use serde_json::json;

use super::*;

const CLOSE: &str = r#"
  { tool_calls = [ { id = "c1", name = "tickets/close_ticket", arguments = { id = "T-3" } } ] },
  { text = "Done." },
"#;

#[tokio::test]
async fn a_call_sent_and_not_recorded_is_sent_again_with_the_same_key() {
    let log = CallLog::new();
    let registry = load(&agent_file(
        "\"tickets/close_ticket\"",
        CLOSE,
        &tickets_stdio(&log, ""),
    ))
    .await;
    let env = TestEnv::start(registry).await;
    let doomed = env.spawn_crashing_worker("before:exec:c1");
    let (thread_id, run_id) = env.start_turn("agent", "close T-3").await;
    env.wait_pending(&thread_id, 1).await;
    assert_eq!(
        approve(&env, &run_id, "c1").await,
        json!({ "delivered": true })
    );
    assert!(doomed.died().await.is_err(), "the crash point fired");
    assert_eq!(
        log.calls_of("close_ticket").len(),
        1,
        "sent before the crash"
    );
    assert!(!env
        .journal_names(&run_id)
        .await
        .contains(&"exec:c1".to_owned()));

    let rescuer = env.spawn_worker();
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let closes = log.calls_of("close_ticket");
    assert_eq!(closes.len(), 2, "sent again: {closes:?}");
    let key = json!(format!("{run_id}:c1"));
    assert!(
        closes
            .iter()
            .all(|c| c["meta"]["dev.agentenkit/idempotencyKey"] == key),
        "with the same key: {closes:?}"
    );
    let execs = env
        .journal_names(&run_id)
        .await
        .into_iter()
        .filter(|n| n == "exec:c1")
        .count();
    assert_eq!(execs, 1, "recorded once");
    rescuer.stop().await.unwrap();
    env.finish().await;
}
