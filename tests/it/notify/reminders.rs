//! Reminders: a request still open after its tool's `remind_after` is
//! told to the escalation target; one answered in time never is.

use super::*;

/// An approval whose tool reminds the target `lead` (told of nothing else)
/// after `after`, waiting: the setup, its thread and run.
async fn waiting_with_reminder(after: Duration) -> (Setup, String, String) {
    let setup = setup(
        |_| StatusCode::OK,
        |tool, receiver| {
            with_targets(
                approval_registry(CALL_THEN_DONE, tool),
                vec![target("lead", &receiver.url).events([])],
            )
            .with_escalation(
                "tool",
                Escalation {
                    remind_after: after,
                    target: "lead".into(),
                },
            )
            .unwrap()
        },
    )
    .await;
    let (thread_id, run_id) = setup.env.start_turn("agent", "send it").await;
    setup.env.wait_pending(&thread_id, 1).await;
    (setup, thread_id, run_id)
}

#[tokio::test]
async fn a_request_still_open_is_reminded_to_the_escalation_target() {
    let (setup, thread_id, run_id) = waiting_with_reminder(Duration::from_millis(1_500)).await;
    let (receiver, env) = (&setup.receiver, &setup.env);
    let started = std::time::Instant::now();
    let got = receiver.wait_for("INPUT_REMINDER", 1).await;
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "not before its time"
    );
    assert_eq!(got.len(), 1, "the lead is told of nothing else");
    let id = format!("remind:{run_id}:c1");
    assert_eq!(got[0].event_id, id);
    assert_eq!(got[0].signed, Some(true));
    let body = got[0].json();
    assert_eq!(body["data"]["toolCallId"], "c1");
    assert_eq!(body["data"]["toolName"], "tool");
    assert_eq!(body["data"]["waited"], "1s");
    assert_eq!(body["threadId"], thread_id.as_str());
    // Still answerable as ever.
    env.reply("/agent/tool-call/approve", ALICE, approve(&run_id))
        .await;
    env.wait_run_finished(&run_id).await;
    all_consumed(env).await;
    assert_eq!(
        deliveries(env, &id).await,
        [("lead".to_owned(), 1, true, false, Some(200))]
    );
    assert!(env
        .metrics_text()
        .await
        .contains("agentenkit_reminders_total{outcome=\"sent\"} 1"));
    setup.finish().await;
}

#[tokio::test]
async fn a_request_answered_in_time_is_never_reminded() {
    let (setup, _, run_id) = waiting_with_reminder(Duration::from_millis(1_000)).await;
    let (receiver, env) = (&setup.receiver, &setup.env);
    env.reply("/agent/tool-call/approve", ALICE, approve(&run_id))
        .await;
    env.wait_run_finished(&run_id).await;
    all_consumed(env).await;
    assert!(receiver.got().is_empty());
    assert!(env
        .metrics_text()
        .await
        .contains("agentenkit_reminders_total{outcome=\"dropped\"} 1"));
    setup.finish().await;
}
