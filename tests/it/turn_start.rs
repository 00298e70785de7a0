//! How a turn starts: in one round trip on a thread whose agent the process
//! knows (it created the thread, or started a turn on it), in two on any
//! other, with the same refusals either way.

use agentenkit_core::Owner;
use agentenkit_store::{Error, PreparedPlan, Store, StoreConfig};
use agentenkit_tests::*;
use serde_json::json;

/// The two-round-trip start's lock: prepared by a session only when a
/// start took that path.
const READ_THEN_WRITE_LOCK: &str =
    "SELECT agent FROM threads WHERE id = $1 AND owner = $2 FOR NO KEY UPDATE";

fn prepared(plans: &[PreparedPlan], sql: &str) -> bool {
    plans.iter().any(|p| p.statement.contains(sql))
}

#[tokio::test]
async fn a_thread_this_process_knows_starts_its_turn_in_one_round_trip() {
    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    let alice = Owner("alice".into());
    let bob = Owner("bob".into());
    let known = env
        .store
        .create_thread(&alice, "agent", &json!({}))
        .await
        .unwrap();
    let first = env
        .store
        .start_run(known.id, &alice, "hi", None)
        .await
        .unwrap();
    let plans = env.store.prepared_plans().await.unwrap();
    assert!(
        !prepared(&plans, READ_THEN_WRITE_LOCK),
        "the turn was read before it was written"
    );
    assert!(prepared(&plans, "AND agent = $3"), "no known-agent lock");

    // Refused as before: the failed check rolls the writes back, and the
    // two-round-trip path says why.
    let err = env
        .store
        .start_run(known.id, &bob, "mine?", None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::NotFound { what: "thread", .. }),
        "{err}"
    );
    let err = env
        .store
        .start_run(known.id, &alice, "again", None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::RunActive { run_id, .. } if *run_id == first.run_id.to_string()),
        "{err}"
    );
    let runs: Vec<i64> = env
        .rows(
            &format!("SELECT count(*) FROM runs WHERE thread_id = '{}'", known.id),
            |r| r.get(0),
        )
        .await;
    assert_eq!(runs, [1]);
    assert_eq!(
        env.event_types(&known.id.to_string()).await,
        ["RUN_STARTED"]
    );

    // Another process (its own store) has not seen the thread: it reads
    // first, then remembers the agent.
    let mut config = StoreConfig::new(database_url());
    config.schema = env.store.schema().map(str::to_owned);
    let other = Store::connect(&config).unwrap();
    let unseen = env
        .store
        .create_thread(&alice, "agent", &json!({}))
        .await
        .unwrap();
    other
        .start_run(unseen.id, &alice, "hi", None)
        .await
        .unwrap();
    let plans = other.prepared_plans().await.unwrap();
    assert!(prepared(&plans, READ_THEN_WRITE_LOCK));
    assert!(!prepared(&plans, "AND agent = $3"));
    let err = other
        .start_run(unseen.id, &alice, "again", None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::RunActive { .. }), "{err}");
    // The read taught it the agent: its next turn tried the one round trip.
    assert!(prepared(
        &other.prepared_plans().await.unwrap(),
        "AND agent = $3"
    ));
    env.finish().await;
}
