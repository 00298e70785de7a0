//! The events of one commit share one `events` row (migration 0018), and
//! every reader serves them one by one, each with its own id.

use agentenkit_core::EventType;
use agentenkit_store::StorageFormat;
use agentenkit_tests::*;
use serde_json::json;

/// `(id, type)` of every event the API serves after `after`.
async fn served(env: &TestEnv, thread_id: &str, after: i64) -> Vec<(i64, String)> {
    let events = env
        .get(&format!("/threads/{thread_id}/events?after={after}"))
        .await;
    events
        .as_array()
        .expect("an array of events")
        .iter()
        .map(|e| {
            (
                e["id"].as_i64().unwrap(),
                e["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// `(id, layout length, types stored)` of every `events` row.
async fn stored_rows(env: &TestEnv) -> Vec<(i64, Option<usize>, Vec<String>)> {
    env.rows(
        "SELECT e.id, length(e.layout), array_agg(i.type ORDER BY i.id)
         FROM events e JOIN event_items i ON i.row_id = e.id
         GROUP BY e.id ORDER BY e.id",
        |r| {
            (
                r.get(0),
                r.get::<_, Option<i32>>(1).map(|n| n as usize),
                r.get(2),
            )
        },
    )
    .await
}

#[tokio::test]
async fn a_parks_three_events_share_one_row_and_are_served_with_their_own_ids() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let _worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;

    let rows = stored_rows(&env).await;
    assert_eq!(rows.len(), 2, "the start's row and the park's: {rows:?}");
    let (started_row, started_layout, started_types) = &rows[0];
    assert_eq!(*started_layout, None, "an event alone is stored as before");
    assert_eq!(started_types, &["RUN_STARTED"]);
    let (park_row, park_layout, park_types) = &rows[1];
    assert_eq!(*park_layout, Some(6), "two bytes per event");
    assert_eq!(park_types, &["MESSAGE", "TOOL_CALL", "INPUT_REQUIRED"]);
    assert_eq!((park_row - started_row) % 16, 0, "row ids are 16 apart");

    let all = served(&env, &thread_id, 0).await;
    assert_eq!(
        all,
        vec![
            (*started_row, "RUN_STARTED".to_owned()),
            (*park_row, "MESSAGE".to_owned()),
            (park_row + 1, "TOOL_CALL".to_owned()),
            (park_row + 2, "INPUT_REQUIRED".to_owned()),
        ]
    );
    // A reader that stopped inside the shared row resumes inside it.
    assert_eq!(
        served(&env, &thread_id, park_row + 1).await,
        vec![(park_row + 2, "INPUT_REQUIRED".to_owned())]
    );
    assert_eq!(served(&env, &thread_id, park_row + 2).await, vec![]);

    // The answer's commit and the finish's each add a row; every event is
    // served once, in order, whole.
    let (status, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1" }),
        )
        .await;
    assert_eq!(status.as_u16(), 200, "{answer}");
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let all = served(&env, &thread_id, 0).await;
    let types: Vec<&str> = all.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        types,
        [
            "RUN_STARTED",
            "MESSAGE",
            "TOOL_CALL",
            "INPUT_REQUIRED",
            "INPUT_RESOLVED",
            "TOOL_RESULT",
            "MESSAGE",
            "RUN_COMPLETED"
        ]
    );
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0), "{all:?}");
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let last_message = events
        .as_array()
        .unwrap()
        .iter()
        .rfind(|e| e["type"] == "MESSAGE")
        .unwrap();
    assert_eq!(last_message["data"]["message"]["role"], "assistant");
    assert!(
        last_message["data"]["message"]["content"].is_string(),
        "{last_message}"
    );
}

/// `AGENTENKIT_STORAGE_FORMAT=unbatched`, for a rolling upgrade from the
/// versions of migrations 0015-0017: packed events, one row each, ids still
/// handed out by the sequence, served the same; every journal entry in
/// `journal`.
#[tokio::test]
async fn an_unbatched_store_writes_one_row_per_event() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start_with(
        approval_registry(CALL_THEN_DONE, &tool.url),
        |config| config.storage_format = StorageFormat::Unbatched,
        |state| state,
    )
    .await;
    let _worker = env.spawn_worker();
    let (thread_id, _run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;

    let rows: Vec<(String, i16, bool)> = env
        .rows(
            "SELECT type, packed, layout IS NULL FROM events ORDER BY id",
            |r| (r.get(0), r.get(1), r.get(2)),
        )
        .await;
    let types: Vec<&str> = rows.iter().map(|(t, _, _)| t.as_str()).collect();
    assert_eq!(
        types,
        ["RUN_STARTED", "MESSAGE", "TOOL_CALL", "INPUT_REQUIRED"]
    );
    assert!(
        rows.iter()
            .all(|(_, packed, alone)| *packed & 1 == 1 && *alone),
        "packed, one row each: {rows:?}"
    );
    // and its journal as 0015-0017 wrote it: the persist entry in `journal`
    let persisted: Vec<(String, Option<i32>)> = env
        .rows(
            "SELECT j.name, tc.persist_position FROM tool_calls tc
             LEFT JOIN journal j ON j.run_id = tc.run_id AND j.name = 'persist:toolcall:' || tc.id",
            |r| (r.get(0), r.get(1)),
        )
        .await;
    assert_eq!(persisted, vec![("persist:toolcall:c1".to_owned(), None)]);
    let required = first_event(
        &env.get(&format!("/threads/{thread_id}/events")).await,
        "INPUT_REQUIRED",
    )
    .clone();
    assert_eq!(required["data"]["arguments"], json!({ "to": "a@b.c" }));
}

/// The stored codes are the domain's, and never renumbered.
#[tokio::test]
async fn the_stored_event_type_codes_are_the_domains() {
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, "http://127.0.0.1:9")).await;
    let stored: Vec<(i16, String)> = env
        .rows(
            "SELECT code, type FROM event_type_codes ORDER BY code",
            |r| (r.get(0), r.get(1)),
        )
        .await;
    let mut domain: Vec<(i16, String)> = EventType::ALL
        .iter()
        .map(|e| (i16::from(e.code()), e.as_str().to_owned()))
        .collect();
    domain.sort();
    assert_eq!(stored, domain);
}

/// A shared row holding a code this version does not know (written by a
/// newer one) is refused by name, not served as some other type.
#[tokio::test]
async fn an_unknown_event_code_is_refused_not_guessed() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let _worker = env.spawn_worker();
    let (thread_id, _run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;
    assert_eq!(served(&env, &thread_id, 0).await.len(), 4);

    env.sql("UPDATE events SET layout = set_byte(layout, 2, 200) WHERE layout IS NOT NULL")
        .await;
    let unknown: Vec<Option<String>> = env
        .rows(
            "SELECT i.type FROM event_items i JOIN events e ON e.id = i.row_id
             WHERE e.layout IS NOT NULL ORDER BY i.id",
            |r| r.get(0),
        )
        .await;
    assert_eq!(
        unknown,
        vec![
            Some("MESSAGE".to_owned()),
            None,
            Some("INPUT_REQUIRED".to_owned())
        ],
        "the view reads an unknown code as null"
    );
    let (status, body) = env
        .call(
            "GET",
            &format!("/threads/{thread_id}/events"),
            Some(ALICE),
            None,
        )
        .await;
    assert_eq!(status.as_u16(), 500, "{body}");
}
