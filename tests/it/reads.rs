//! Reads are bounded as they are made: a page of large rows stops being
//! read once it is large enough, the journal is read from the position
//! asked for, and a thread's open requests come a page at a time.

use agentenkit_core::{Owner, ThreadId};
use agentenkit_runtime::Registry;
use agentenkit_store::ReadBound;
use agentenkit_tests::*;
use serde_json::{json, Value};

/// Thirty messages of 300 KiB: a read bounded at 1 MiB stops after the
/// message that passes it, and says more may follow.
#[tokio::test]
async fn a_read_of_large_rows_stops_at_its_byte_bound() {
    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    let thread = env.post("/threads", json!({ "agent": "agent" })).await;
    let thread_id = thread["id"].as_str().unwrap().to_owned();
    let id: ThreadId = thread_id.parse().unwrap();
    let big = "m".repeat(300 * 1024);
    env.sql(&format!(
        "INSERT INTO runs (id, thread_id, root_run_id, name, status)
           SELECT gen_random_uuid(), '{thread_id}', gen_random_uuid(), 'agent', 'completed';
         INSERT INTO messages (thread_id, run_id, body)
           SELECT '{thread_id}', r.id, jsonb_build_object('role', 'user', 'content', '{big}')
           FROM runs r, generate_series(1, 30)"
    ))
    .await;
    let owner = Owner("alice".into());
    let page = env
        .store
        .list_messages(id, &owner, 0, ReadBound::new(1000, 1 << 20))
        .await
        .unwrap();
    assert_eq!(page.items.len(), 4, "3 × 300 KiB < 1 MiB ≤ 4 × 300 KiB");
    assert!(page.more);
    let all = env
        .store
        .list_messages(id, &owner, 0, ReadBound::new(1000, usize::MAX))
        .await
        .unwrap();
    assert_eq!((all.items.len(), all.more), (30, false));
    // Through the API every page is whole and they chain to the end.
    let pages = env
        .get_pages(&format!("/threads/{thread_id}/messages"), 1000)
        .await;
    assert_eq!(pages.iter().map(Vec::len).sum::<usize>(), 30);
    assert!(pages.len() >= 3, "4 MiB pages of 300 KiB messages");
    env.finish().await;
}

/// Paging the journal from every position gives the entries that reading
/// it whole does, packed ones included (a persist entry is stored without
/// what its model entry holds, and read back with it).
#[tokio::test]
async fn the_journal_read_from_any_position_is_the_journal_read_whole() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(TWO_CALLS, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send both").await;
    env.wait_pending(&thread_id, 2).await;
    for call in ["c1", "c2"] {
        env.reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": call }),
        )
        .await;
    }
    env.wait_run_finished(&run_id).await;
    let whole = env.get(&format!("/runs/{run_id}/journal")).await;
    let whole = whole.as_array().unwrap();
    assert!(whole.len() > 5, "{whole:?}");
    let persist = whole
        .iter()
        .position(|e| e["name"].as_str().unwrap().starts_with("persist:"))
        .expect("a persist entry");
    assert!(
        whole[persist]["value"]["arguments"].is_object(),
        "read back whole"
    );
    for (i, entry) in whole.iter().enumerate() {
        let after = entry["position"].as_u64().unwrap();
        let rest = env
            .get(&format!("/runs/{run_id}/journal?after={after}&limit=2"))
            .await;
        let expected: Vec<&Value> = whole[i + 1..].iter().take(2).collect();
        let got: Vec<&Value> = rest.as_array().unwrap().iter().collect();
        assert_eq!(got, expected, "after {after}");
    }
    let paged: Vec<Value> = env
        .get_pages(&format!("/runs/{run_id}/journal"), 1)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(paged.as_slice(), whole);
    worker.stop().await.unwrap();
    env.finish().await;
}

/// A thread with more open requests than its view shows says so, and
/// `GET /threads/{id}/pending-inputs` pages them all.
#[tokio::test]
async fn a_threads_open_requests_past_its_view_are_paged() {
    let count = agentenkit_store::THREAD_PENDING_INPUTS + 1;
    let calls: Vec<String> = (0..count)
        .map(|n| format!(r#"{{ id = "c{n}", name = "tool", arguments = {{ to = "a{n}" }} }}"#))
        .collect();
    let registry = Registry::from_toml(&format!(
        r#"
max_tool_calls_per_step = {count}

[agents.agent]
system = "test agent"
tools = ["tool"]
model = {{ provider = "scripted", script = [ {{ tool_calls = [ {} ] }}, {{ text = "Done." }} ] }}

[tools.tool]
type = "http"
url = "http://127.0.0.1:9/"
requires_confirmation = true
"#,
        calls.join(", ")
    ))
    .expect("test registry");
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (thread_id, _) = env.start_turn("agent", "many").await;
    let thread = eventually("every request is open", || async {
        let thread = env.get(&format!("/threads/{thread_id}")).await;
        (thread["status"] == "WAITING_FOR_INPUT").then_some(thread)
    })
    .await;
    assert_eq!(
        thread["pendingInputs"].as_array().unwrap().len(),
        agentenkit_store::THREAD_PENDING_INPUTS
    );
    assert_eq!(thread["morePendingInputs"], true);
    let pages = env
        .get_pages(&format!("/threads/{thread_id}/pending-inputs"), 40)
        .await;
    let ids: Vec<String> = pages
        .iter()
        .flatten()
        .map(|p| p["toolCallId"].as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<String> = (0..count).map(|n| format!("c{n}")).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    let mut expected_sorted = expected.clone();
    expected_sorted.sort();
    assert_eq!(sorted, expected_sorted, "each once");
    assert_eq!(ids.len(), count);
    worker.stop().await.unwrap();
    env.finish().await;
}
