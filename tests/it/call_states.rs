//! A call's row holds only what its state has (`agentenkit_core::call`,
//! `migrations/0011_call_states.sql`): the database refuses a row whose
//! columns say two states at once, whichever code path writes it. The
//! paths that do write calls (parks, answers, votes, expiries, stops,
//! delegations, reclaims) are each exercised by their own tests, which run
//! against the same constraint.

use tokio_postgres::error::SqlState;

use crate::migrations::{fresh_store, raw_client};

/// Each row: its status, the columns set beside it, and whether some state
/// of a call has exactly that.
#[rustfmt::skip]
const ROWS: &[(&str, &str, bool)] = &[
    ("proposed", "", true),
    ("proposed", "park_request = '{}'", true),
    ("proposed", "approvals = '[]'", false),
    ("proposed", "reason = 'r'", false),
    ("pending_approval", "reason = 'r'", true),
    ("pending_approval", "reason = 'r', approvals = '[]', expires_at = now()", true),
    ("pending_approval", "", false),
    ("pending_approval", "reason = 'r', result = '1'", false),
    ("pending_approval", "reason = 'r', answered_at = now()", false),
    ("executed", "result = '1'", true),
    ("executed", "reason = 'r', answered_at = now(), answered_by = 'o'", true),
    ("executed", "reason = 'r', answered_at = now(), result = '1', decision = '{}'", true),
    ("executed", "", false),
    ("executed", "answered_at = now(), result = '1'", false),
    ("executed", "reason = 'r', result = '1'", false),
    ("rejected", "result = '1'", true),
    ("rejected", "reason = 'r', answered_at = now(), result = '1'", true),
    ("rejected", "reason = 'r', answered_at = now()", false),
    ("rejected", "result = '1', decision = '{}'", false),
    ("expired", "reason = 'r', answered_at = now(), result = '1'", true),
    ("expired", "reason = 'r', result = '1'", false),
    ("expired", "reason = 'r', answered_at = now(), result = '1', answered_by = 'o'", false),
    ("failed", "result = '1'", true),
    ("failed", "result = '1', answered_at = now()", false),
    ("failed", "", false),
    ("cancelled", "", true),
    ("cancelled", "reason = 'r', approvals = '[]'", true),
    ("cancelled", "result = '1'", false),
    ("cancelled", "answered_at = now()", false),
    ("settled", "result = '1'", false),
];

#[tokio::test]
async fn a_row_cannot_hold_what_no_call_state_has() {
    let store = fresh_store();
    store.migrate().await.expect("migrate");
    let schema = store.schema().expect("a schema").to_owned();
    let client = raw_client().await;
    client
        .batch_execute(&format!("SET search_path TO {schema}"))
        .await
        .expect("search path");
    for (n, (status, columns, allowed)) in ROWS.iter().enumerate() {
        // Inserted proposed, then moved: the update is what a writer does.
        client
            .execute(
                "INSERT INTO tool_calls (run_id, id, thread_id, name, arguments, kind, tool_type, status)
                 VALUES (gen_random_uuid(), $1, gen_random_uuid(), 'tool', '{}', 'approval', 'action', 'proposed')",
                &[&format!("c{n}")],
            )
            .await
            .expect("a proposed call");
        let set = if columns.is_empty() {
            String::new()
        } else {
            format!(", {columns}")
        };
        let written = client
            .execute(
                &format!("UPDATE tool_calls SET status = '{status}'{set} WHERE id = $1"),
                &[&format!("c{n}")],
            )
            .await;
        match (written, allowed) {
            (Ok(1), true) => {}
            (Err(e), false) if e.code() == Some(&SqlState::CHECK_VIOLATION) => {}
            (other, _) => panic!("{status} with {columns:?}: {other:?}"),
        }
    }
    store.drop_schema().await.expect("drop");
}
