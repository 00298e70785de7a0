//! Events sent by the process that committed them: the transaction that
//! writes the event claims its first attempt, and the process sends it at
//! once, without the notifications queue; one too busy to gives it to a
//! worker through the queue, as the next attempt.

use super::*;
use agentenkit_store::{ClaimedEvent, LocalSender, SentHere};

/// An API that answers and then has a worker-less deployment still tells
/// the targets: the answer's own process sends `INPUT_RESOLVED`.
#[tokio::test]
async fn the_api_that_commits_an_answer_tells_it_with_no_worker_up() {
    let setup = setup(
        |_| StatusCode::OK,
        |tool, receiver| {
            with_targets(
                approval_registry(CALL_THEN_DONE, tool),
                vec![target("ops", &receiver.url)
                    .events([EventType::InputRequired, EventType::InputResolved])],
            )
        },
    )
    .await;
    let (receiver, env) = (&setup.receiver, &setup.env);
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    receiver.wait_for("INPUT_REQUIRED", 1).await;
    let Setup {
        receiver,
        env,
        worker,
        _tool,
    } = setup;
    worker.expect("a worker").stop().await.unwrap();

    let (status, _) = env
        .reply("/agent/tool-call/approve", ALICE, approve(&run_id))
        .await;
    assert_eq!(status, StatusCode::OK);
    let resolved = receiver.wait_for("INPUT_RESOLVED", 1).await;
    assert_eq!(resolved[0].attempt, "1");
    assert_eq!(resolved[0].signed, Some(true));
    eventually("recorded by the API", || async {
        let rows = deliveries(&env, &resolved[0].event_id).await;
        (rows == [("ops".to_owned(), 1, true, false, Some(200))]).then_some(())
    })
    .await;
    all_consumed(&env).await;
    // The run itself goes on once a worker is back.
    let worker = env.spawn_worker();
    env.wait_run_finished(&run_id).await;
    worker.stop().await.unwrap();
    env.finish().await;
}

/// A sender that is always busy.
struct Busy;

impl LocalSender for Busy {
    fn offer(&self, _: Arc<ClaimedEvent>) -> bool {
        false
    }
}

/// A committer too busy to send publishes the event's message delayed by
/// its claim; a worker then claims the next attempt and sends it under the
/// same id.
#[tokio::test]
async fn an_event_its_committer_cannot_send_reaches_the_target_through_a_worker() {
    let tool = ToolServer::ok().await;
    let receiver = Receiver::start(|_| StatusCode::OK).await;
    let registry = with_targets(
        approval_registry(CALL_THEN_DONE, &tool.url),
        vec![target("ops", &receiver.url).events([EventType::InputResolved])],
    );
    let env = TestEnv::start_with(
        registry,
        |_| {},
        |mut state| {
            state.store = state.store.clone().with_sent_here(SentHere::new(
                [("ops".to_owned(), vec![EventType::InputResolved])],
                Duration::from_millis(300),
                Arc::new(Busy),
            ));
            state
        },
    )
    .await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    let (status, _) = env
        .reply("/agent/tool-call/approve", ALICE, approve(&run_id))
        .await;
    assert_eq!(status, StatusCode::OK);
    let resolved = receiver.wait_for("INPUT_RESOLVED", 1).await;
    // The first attempt was claimed in the answer's transaction.
    assert_eq!(resolved[0].attempt, "2");
    eventually("recorded by the worker", || async {
        let rows = deliveries(&env, &resolved[0].event_id).await;
        (rows == [("ops".to_owned(), 2, true, false, Some(200))]).then_some(())
    })
    .await;
    env.wait_run_finished(&run_id).await;
    all_consumed(&env).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.got().len(), 1, "sent once");
    worker.stop().await.unwrap();
    env.finish().await;
}
