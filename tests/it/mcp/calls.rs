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

#[tokio::test]
async fn over_streamable_http_a_destructive_call_waits_for_approval_and_runs_once() {
    let log = CallLog::new();
    let server = HttpTickets::start(&log).await;
    // Each test is a process of its own: this variable is this test's.
    std::env::set_var("AEK_TEST_TICKETS_TOKEN", "s3cret-token");
    let servers = format!(
        "[mcp.tickets]\ntransport = \"http\"\nurl = {:?}\nheaders = {{ X-Tickets-Token = \"AEK_TEST_TICKETS_TOKEN\" }}\n",
        server.url
    );
    search_then_close(&servers, &log).await;
    // The header's value is read from the variable the table names.
    let calls = log.calls();
    assert!(
        calls.iter().all(|c| c["token"] == "s3cret-token"),
        "{calls:?}"
    );
}

/// A turn calling `tool` of the tickets server (`timeout_ms = 3000`) as
/// call `c1`, then `search_tickets` as `c2`: the error the model read of
/// `c1`, what the server logged, and the process's metrics.
async fn fails_then_goes_on(tool: &str, arguments: &str) -> (String, CallLog, String) {
    let log = CallLog::new();
    let script = format!(
        r#"
  {{ tool_calls = [ {{ id = "c1", name = "tickets/{tool}", arguments = {arguments} }} ] }},
  {{ tool_calls = [ {{ id = "c2", name = "tickets/search_tickets", arguments = {{ query = "after" }} }} ] }},
  {{ text = "Done." }},
"#
    );
    let registry = load(&agent_file(
        "\"tickets/*\"",
        &script,
        &tickets_stdio(&log, "timeout_ms = 3000"),
    ))
    .await;
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "try it").await;
    // Three attempts of a call that times out take a while on a busy
    // machine: longer than `eventually` waits.
    let run = tokio::time::timeout(std::time::Duration::from_secs(90), async {
        loop {
            let run = env.get(&format!("/runs/{run_id}")).await;
            if run["status"] == "completed" || run["status"] == "failed" {
                return run;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the run finishes");
    assert_eq!(run["status"], "completed");
    let failure = tool_result(&env, &thread_id, "c1").await;
    assert!(
        tool_result(&env, &thread_id, "c2").await["tickets"].is_array(),
        "the server is used again after {tool}"
    );
    let metrics = env.metrics_text().await;
    worker.stop().await.unwrap();
    env.finish().await;
    let error = failure["error"].as_str().unwrap_or_default().to_owned();
    // Each attempt of c1 carried c1's key.
    let key = json!(format!("{run_id}:c1"));
    assert!(log
        .calls_of(tool)
        .iter()
        .filter(|c| c["arguments"]["query"] != "after")
        .all(|c| c["meta"]["dev.agentenkit/idempotencyKey"] == key));
    (error, log, metrics)
}

#[tokio::test]
async fn a_tool_error_reaches_the_model_and_is_counted() {
    let (error, log, metrics) = fails_then_goes_on("flaky", "{}").await;
    assert!(error.contains("read-only today"), "isError: {error}");
    assert_eq!(
        log.calls_of("flaky").len(),
        1,
        "a tool error is not tried again"
    );
    for line in [
        r#"agentenkit_mcp_calls_total{server="tickets",outcome="tool_error"} 1"#,
        r#"agentenkit_mcp_calls_total{server="tickets",outcome="ok"} 1"#,
        r#"agentenkit_mcp_call_duration_seconds_count{server="tickets"} 2"#,
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
}

#[tokio::test]
async fn arguments_the_servers_schema_refuses_never_leave() {
    let (error, log, _) = fails_then_goes_on("search_tickets", "{ query = 7 }").await;
    assert_eq!(error, "invalid arguments");
    assert_eq!(log.calls_of("search_tickets").len(), 1, "only c2's");
}

#[tokio::test]
async fn a_server_that_hangs_is_tried_three_times_then_the_model_is_told() {
    let (error, log, metrics) = fails_then_goes_on("hang", "{}").await;
    assert!(
        error.contains("timed out") && error.contains("after 3 attempts"),
        "{error}"
    );
    // An attempt whose new child was slow to start never reached it.
    assert!((1..=3).contains(&log.calls_of("hang").len()));
    assert!(
        metrics.contains(r#"agentenkit_mcp_calls_total{server="tickets",outcome="unreachable"} 3"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_server_that_exits_mid_call_is_started_again() {
    let (error, log, _) = fails_then_goes_on("exit_now", "{}").await;
    assert!(
        error.contains("mcp server tickets") && error.contains("after 3 attempts"),
        "{error}"
    );
    assert_eq!(
        log.calls_of("exit_now").len(),
        3,
        "a new child each attempt"
    );
}

#[tokio::test]
async fn a_server_that_writes_garbage_is_given_up_on() {
    let (error, log, _) = fails_then_goes_on("garbage", "{}").await;
    assert!(
        error.contains("mcp server tickets") && error.contains("after 3 attempts"),
        "{error}"
    );
    assert!((1..=3).contains(&log.calls_of("garbage").len()));
}

/// A call whose answer is larger than the server's `max_response_bytes`
/// over `servers`: the model's failure message.
async fn too_large(servers: &str) -> String {
    let script = r#"
  { tool_calls = [ { id = "c1", name = "tickets/big", arguments = { size = 200000 } } ] },
  { tool_calls = [ { id = "c2", name = "tickets/big", arguments = { size = 10 } } ] },
  { text = "Done." },
"#;
    let registry = load(&agent_file("\"tickets/big\"", script, servers)).await;
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "big").await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let refused = tool_result(&env, &thread_id, "c1").await;
    assert_eq!(
        tool_result(&env, &thread_id, "c2").await,
        json!({ "result": "xxxxxxxxxx" }),
        "a small answer after a large one"
    );
    worker.stop().await.unwrap();
    env.finish().await;
    refused["error"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn an_answer_over_max_response_bytes_is_a_failure_the_model_sees() {
    let log = CallLog::new();
    let stdio = too_large(&tickets_stdio(&log, "max_response_bytes = 65536")).await;
    assert!(
        stdio.contains("mcp server tickets: answered more than 65536 bytes"),
        "{stdio}"
    );
    let server = HttpTickets::start(&log).await;
    let http = too_large(&format!(
        "[mcp.tickets]\ntransport = \"http\"\nurl = {:?}\nmax_response_bytes = 65536\n",
        server.url
    ))
    .await;
    // Over HTTP the transport cannot tell a hang-up from an answer past
    // the cap: the message says both.
    assert!(http.contains("mcp server tickets"), "{http}");
    assert!(http.contains("more than 65536 bytes"), "{http}");
}
