//! Calls of MCP tools through the API, on real Postgres and RabbitMQ: a
//! read-only tool runs at once, a destructive one waits for a person and
//! runs once, with its idempotency key in `_meta`; failures of every kind
//! reach the model and never leave the run stuck.

use agentenkit_tests::*;
use serde_json::{json, Value};

use super::*;

const SEARCH_THEN_CLOSE: &str = r#"
  { tool_calls = [ { id = "c1", name = "tickets/search_tickets", arguments = { query = "fire" } } ] },
  { tool_calls = [ { id = "c2", name = "tickets/close_ticket", arguments = { id = "T-1" } } ] },
  { text = "Done." },
"#;

/// The content of the tool message answering call `call`.
async fn tool_result(env: &TestEnv, thread_id: &str, call: &str) -> Value {
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["toolCallId"] == call)
        .unwrap_or_else(|| panic!("no tool message for {call} in {messages}"))["content"]
        .clone()
}

/// Runs the search-then-close turn against `servers` (whose server is
/// named `tickets`), checking what reached the server through `log`.
async fn search_then_close(servers: &str, log: &CallLog) {
    let registry = load(&agent_file("\"tickets/*\"", SEARCH_THEN_CLOSE, servers)).await;
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "close the fire ticket").await;

    let pending = env.wait_pending(&thread_id, 1).await;
    assert_eq!(
        pending[0]["toolCallId"], "c2",
        "only the destructive call asks"
    );
    assert_eq!(pending[0]["toolName"], "tickets/close_ticket");
    assert_eq!(pending[0]["arguments"], json!({ "id": "T-1" }));
    assert_eq!(
        tool_result(&env, &thread_id, "c1").await,
        json!({ "tickets": [{ "id": "T-1", "title": "printer on fire (fire)" }] }),
        "structured content reaches the model"
    );
    assert!(
        log.calls_of("close_ticket").is_empty(),
        "nothing runs before the approval"
    );

    assert_eq!(
        approve(&env, &run_id, "c2").await,
        json!({ "delivered": true })
    );
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    // The server's SDK gives a string result as structured `{"result"}`.
    assert_eq!(
        tool_result(&env, &thread_id, "c2").await,
        json!({ "result": "closed T-1" })
    );
    let closes = log.calls_of("close_ticket");
    assert_eq!(closes.len(), 1, "one call per decision: {closes:?}");
    assert_eq!(
        closes[0]["meta"]["dev.agentenkit/idempotencyKey"],
        json!(format!("{run_id}:c2"))
    );
    assert_eq!(log.calls_of("search_tickets").len(), 1);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn over_stdio_a_destructive_call_waits_for_approval_and_runs_once() {
    let log = CallLog::new();
    search_then_close(&tickets_stdio(&log, "env = [\"HOME\"]"), &log).await;
    // The child got the variables its table names, and not the others.
    let env: Vec<String> = serde_json::from_value(log.calls()[0]["env"].clone()).unwrap();
    assert!(env.contains(&"HOME".to_owned()), "{env:?}");
    assert!(!env.contains(&"PATH".to_owned()), "{env:?}");
    assert!(!env.contains(&"DATABASE_URL".to_owned()), "{env:?}");
}

/// The tickets server over Streamable HTTP on a free port, until dropped.
struct HttpTickets {
    child: std::process::Child,
    url: String,
}

impl HttpTickets {
    async fn start(log: &CallLog) -> HttpTickets {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new(python())
            .args([&tickets_script(), "http", &port.to_string(), &log.path()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the tickets server");
        let url = format!("http://127.0.0.1:{port}/mcp");
        eventually("the tickets server listens", || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
        })
        .await;
        HttpTickets { child, url }
    }
}

impl Drop for HttpTickets {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn over_streamable_http_a_destructive_call_waits_for_approval_and_runs_once() {
    let log = CallLog::new();
    let server = HttpTickets::start(&log).await;
    let servers = format!(
        "[mcp.tickets]\ntransport = \"http\"\nurl = {:?}\n",
        server.url
    );
    search_then_close(&servers, &log).await;
}

#[tokio::test]
async fn failures_of_every_kind_reach_the_model_and_the_run_goes_on() {
    let log = CallLog::new();
    let script = r#"
  { tool_calls = [ { id = "c1", name = "tickets/flaky", arguments = {} } ] },
  { tool_calls = [ { id = "c2", name = "tickets/hang", arguments = {} } ] },
  { tool_calls = [ { id = "c3", name = "tickets/exit_now", arguments = {} } ] },
  { tool_calls = [ { id = "c4", name = "tickets/garbage", arguments = {} } ] },
  { tool_calls = [ { id = "c5", name = "tickets/search_tickets", arguments = { query = 7 } } ] },
  { tool_calls = [ { id = "c6", name = "tickets/search_tickets", arguments = { query = "after" } } ] },
  { text = "Done." },
"#;
    let registry = load(&agent_file(
        "\"tickets/*\"",
        script,
        &tickets_stdio(&log, "timeout_ms = 1500"),
    ))
    .await;
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "try everything").await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let error = |content: Value| content["error"].as_str().unwrap_or_default().to_owned();
    let flaky = error(tool_result(&env, &thread_id, "c1").await);
    assert!(flaky.contains("read-only today"), "isError: {flaky}");
    let hang = error(tool_result(&env, &thread_id, "c2").await);
    assert!(
        hang.contains("timed out") && hang.contains("attempts"),
        "{hang}"
    );
    let exited = error(tool_result(&env, &thread_id, "c3").await);
    assert!(exited.contains("mcp server tickets"), "{exited}");
    let garbage = error(tool_result(&env, &thread_id, "c4").await);
    assert!(garbage.contains("mcp server tickets"), "{garbage}");
    let invalid = tool_result(&env, &thread_id, "c5").await;
    assert_eq!(
        invalid["error"], "invalid arguments",
        "checked against the server's schema"
    );
    assert!(
        tool_result(&env, &thread_id, "c6").await["tickets"].is_array(),
        "the server is used again after all that"
    );
    // Each attempt is counted by its server and how it went.
    let metrics = env.metrics_text().await;
    for line in [
        r#"agentenkit_mcp_calls_total{server="tickets",outcome="tool_error"} 1"#,
        // c5's arguments never left: the schema refused them here.
        r#"agentenkit_mcp_calls_total{server="tickets",outcome="ok"} 1"#,
        // Three attempts each of hang, exit_now and garbage.
        r#"agentenkit_mcp_calls_total{server="tickets",outcome="unreachable"} 9"#,
        r#"agentenkit_mcp_call_duration_seconds_count{server="tickets"} 11"#,
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    // Each attempt of one call carried the same key.
    let hangs = log.calls_of("hang");
    assert_eq!(hangs.len(), 3, "{hangs:?}");
    assert!(hangs
        .iter()
        .all(|c| c["meta"]["dev.agentenkit/idempotencyKey"] == json!(format!("{run_id}:c2"))));
    worker.stop().await.unwrap();
    env.finish().await;
}
