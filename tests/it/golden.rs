//! Golden journals: the checkpoint names and values of a turn are a
//! contract (SPEC §4). A turn of an agent that declares neither intake nor
//! ask must journal byte-identically as the runtime grows; this test pins
//! the journal of a plain approval turn. `UPDATE_GOLDEN=1` rewrites it,
//! which is a change to review, never a fix.

use std::path::PathBuf;

use agentenkit_tests::*;
use serde_json::{json, Value};

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(name)
}

/// Replaces what differs on every run (the run id, the answer time).
fn normalize(journal: &Value, run_id: &str) -> String {
    let text = serde_json::to_string_pretty(journal).expect("json");
    let mut value: Value = serde_json::from_str(&text.replace(run_id, "<runId>")).expect("json");
    for entry in value.as_array_mut().expect("array") {
        if let Some(at) = entry["value"].get_mut("answeredAt") {
            *at = json!("<answeredAt>");
        }
    }
    serde_json::to_string_pretty(&value).expect("json") + "\n"
}

#[tokio::test]
async fn the_journal_of_a_plain_approval_turn_is_pinned() {
    let tool = ToolServer::start(|_, _| {
        (
            axum::http::StatusCode::OK,
            json!({ "sent": true, "id": "m-1" }),
        )
    })
    .await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send the golden mail").await;
    env.wait_pending(&thread_id, 1).await;
    let (_, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1", "payload": { "ok": true } }),
        )
        .await;
    assert_eq!(answer["delivered"], true);
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    let actual = normalize(&journal, &run_id);

    let path = golden_path("approval_turn.journal.json");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &actual).expect("write golden");
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(
        actual, expected,
        "the journal of a plain approval turn changed"
    );
    // What is served is the journal as written; what is stored leaves out
    // what the model entry already holds (the store's format::journal).
    let stored: Vec<(String, i16, bool)> = env
        .rows(
            "SELECT name, packed, value ? 'arguments' FROM journal ORDER BY position",
            |r| (r.get(0), r.get(1), r.get(2)),
        )
        .await;
    assert_eq!(
        stored[1],
        ("persist:toolcall:c1".into(), 1, false),
        "{stored:?}"
    );
    assert!(
        stored
            .iter()
            .all(|(name, packed, _)| name.starts_with("persist:") || *packed == 0),
        "{stored:?}"
    );
    worker.stop().await.unwrap();
    env.finish().await;
}
