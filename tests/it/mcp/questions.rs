//! A server's questions (`input_required`) as parked question sets: each
//! round waits as its own `ask` row, is answered like any question set,
//! and sends the call again with the answers; a skip declines, an expiry
//! cancels, and a worker that dies after a round was asked carries on
//! from the journal without asking the server (or the person) again.

use agentenkit_tests::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::*;

const ESCALATE: &str = r#"
  { tool_calls = [ { id = "c1", name = "tickets/escalate_ticket", arguments = { id = "T-7" } } ] },
  { text = "Done." },
"#;

/// The agent file with `ttl` as the agent's `hitl_ttl_ms`, when given.
async fn escalating(log: &CallLog, ttl: Option<u64>) -> Registry {
    let mut text = agent_file(
        "\"tickets/escalate_ticket\"",
        ESCALATE,
        &tickets_stdio(log, ""),
    );
    if let Some(ttl) = ttl {
        text = text.replacen(
            "[agents.agent]\n",
            &format!("[agents.agent]\nhitl_ttl_ms = {ttl}\n"),
            1,
        );
    }
    load(&text).await
}

async fn answer(env: &TestEnv, run_id: &str, call: &str, answers: Value) -> (StatusCode, Value) {
    env.reply(
        "/agent/tool-call/answer",
        ALICE,
        json!({ "runId": run_id, "toolCallId": call, "answers": answers }),
    )
    .await
}

/// What the model read of `c1`: the server's text (its structured
/// `result`), parsed when it is JSON.
async fn result_of_c1(env: &TestEnv, thread_id: &str) -> Value {
    let content = tool_message(env, thread_id).await;
    let text = content.get("result").cloned().unwrap_or(content);
    match text.as_str() {
        Some(text) => serde_json::from_str(text).unwrap_or(Value::String(text.to_owned())),
        None => text,
    }
}

#[tokio::test]
async fn a_servers_two_rounds_of_questions_are_asked_answered_and_sent_back() {
    let log = CallLog::new();
    let env = TestEnv::start(escalating(&log, None).await).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "escalate T-7").await;

    // Round 1: the form, as a question set of every kind.
    let first = waiting_on(&env, &thread_id, "c1~1").await;
    assert_eq!(first["kind"], "ask", "{first}");
    let inbox = env.get("/agent/inbox").await;
    let asked = inbox
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["toolCallId"] == "c1~1")
        .unwrap_or_else(|| panic!("not in the inbox: {inbox}"))
        .clone();
    assert_eq!(asked["toolName"], "tickets/escalate_ticket", "{asked}");
    let questions = &asked["request"]["questions"];
    let ids: Vec<&str> = questions
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|q| q["id"].as_str())
        .collect();
    // In the order the server wrote them.
    assert_eq!(ids, ["team", "reason", "hours", "page", "tags"], "{asked}");
    assert_eq!(asked["request"]["preamble"], "Escalating T-7.");
    assert!(
        asked["expiresAt"].is_string(),
        "a server's question expires: {asked}"
    );

    // Answers that do not fit the server's schema change nothing.
    let (status, refused) = answer(
        &env,
        &run_id,
        "c1~1",
        json!({ "team": ["qa"], "reason": ["?"] }),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(log.calls_of("escalate_ticket").len(), 1);

    let (status, delivered) = answer(
        &env,
        &run_id,
        "c1~1",
        json!({ "team": ["dev"], "reason": ["the printer is on fire"], "hours": ["4"] }),
    )
    .await;
    assert_eq!(
        (status, delivered),
        (StatusCode::OK, json!({ "delivered": true }))
    );

    // Round 2: the server asks again, with the state it sent.
    waiting_on(&env, &thread_id, "c1~2").await;
    let (_, delivered) = answer(&env, &run_id, "c1~2", json!({ "go": ["true"] })).await;
    assert_eq!(delivered, json!({ "delivered": true }));
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");

    assert_eq!(
        result_of_c1(&env, &thread_id).await,
        json!({ "escalated": "T-7", "team": "dev", "reason": "the printer is on fire",
                "hours": 4, "page": false, "tags": ["printer"] })
    );
    let calls = log.calls_of("escalate_ticket");
    let rounds: Vec<&Value> = calls.iter().map(|c| &c["arguments"]["round"]).collect();
    assert_eq!(rounds, [&json!(0), &json!(1), &json!(2)], "{calls:?}");
    let key = json!(format!("{run_id}:c1"));
    assert!(calls
        .iter()
        .all(|c| c["meta"]["dev.agentenkit/idempotencyKey"] == key));
    assert_eq!(
        calls[1]["arguments"]["responses"]["details"]["content"]["hours"], 4,
        "typed as the schema asked: {calls:?}"
    );

    let journal = env.journal_names(&run_id).await;
    let expected = [
        "model:0".to_owned(),
        "persist:toolcall:c1".to_owned(),
        "asked:c1:1".to_owned(),
        format!("tool:{run_id}:c1~1"),
        "asked:c1:2".to_owned(),
        format!("tool:{run_id}:c1~2"),
        "exec:c1".to_owned(),
        "model:1".to_owned(),
    ];
    assert_eq!(journal, expected);
    // The model read one result: the rounds are not in the conversation.
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    let tool_messages = messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .count();
    assert_eq!(tool_messages, 1, "{messages}");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_skip_declines_and_an_expiry_cancels_the_servers_question() {
    // Skipped: the server is told `decline`, and decides what that means.
    let log = CallLog::new();
    let env = TestEnv::start(escalating(&log, None).await).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "escalate T-7").await;
    waiting_on(&env, &thread_id, "c1~1").await;
    let (status, skipped) = env
        .reply(
            "/agent/tool-call/skip",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1~1" }),
        )
        .await;
    assert_eq!(
        (status, skipped),
        (StatusCode::OK, json!({ "delivered": true }))
    );
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(
        result_of_c1(&env, &thread_id).await,
        "not escalated: the person chose decline"
    );
    worker.stop().await.unwrap();
    env.finish().await;

    // Nobody answered within the agent's `hitl_ttl_ms`: `cancel`.
    let log = CallLog::new();
    let env = TestEnv::start(escalating(&log, Some(1_500)).await).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "escalate T-7").await;
    waiting_on(&env, &thread_id, "c1~1").await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(
        result_of_c1(&env, &thread_id).await,
        "not escalated: the person chose cancel"
    );
    let calls = log.calls_of("escalate_ticket");
    assert_eq!(
        calls[1]["arguments"]["responses"]["details"],
        json!({ "action": "cancel" })
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_worker_that_dies_after_a_round_was_asked_carries_on_without_asking_again() {
    let log = CallLog::new();
    let env = TestEnv::start(escalating(&log, None).await).await;
    // Dies right after the round's questions were journaled, before the
    // park: the next worker parks them from the journal.
    let doomed = env.spawn_crashing_worker("asked:c1:1");
    let (thread_id, run_id) = env.start_turn("agent", "escalate T-7").await;
    assert!(doomed.died().await.is_err(), "the crash point fired");
    let rescuer = env.spawn_worker();
    waiting_on(&env, &thread_id, "c1~1").await;
    assert_eq!(
        log.calls_of("escalate_ticket").len(),
        1,
        "the server was asked once"
    );
    rescuer.stop().await.unwrap();

    // Dies right after the park of round 2: the answer wakes another.
    let doomed = env.spawn_crashing_worker("park");
    answer(
        &env,
        &run_id,
        "c1~1",
        json!({ "team": ["ops"], "reason": ["smoke"] }),
    )
    .await;
    assert!(doomed.died().await.is_err(), "the crash point fired");
    waiting_on(&env, &thread_id, "c1~2").await;
    let rescuer = env.spawn_worker();
    let (_, delivered) = answer(&env, &run_id, "c1~2", json!({ "go": ["true"] })).await;
    assert_eq!(delivered, json!({ "delivered": true }));
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(result_of_c1(&env, &thread_id).await["team"], "ops");
    let rounds: Vec<Value> = log
        .calls_of("escalate_ticket")
        .iter()
        .map(|c| c["arguments"]["round"].clone())
        .collect();
    assert_eq!(
        rounds,
        [json!(0), json!(1), json!(2)],
        "each round sent once"
    );
    let pending_rows = env
        .journal_names(&run_id)
        .await
        .iter()
        .filter(|n| n.starts_with("asked:"))
        .count();
    assert_eq!(pending_rows, 2);
    rescuer.stop().await.unwrap();
    env.finish().await;
}

/// An `input_required` with a state and no requests asks nobody: the call
/// is sent again with the state at once, and the run never waits.
#[tokio::test]
async fn a_server_that_asks_only_to_be_called_again_is_called_again_at_once() {
    let log = CallLog::new();
    let script = r#"
  { tool_calls = [ { id = "c1", name = "tickets/settle", arguments = {} } ] },
  { text = "Done." },
"#;
    let registry = load(&agent_file(
        "\"tickets/settle\"",
        script,
        &tickets_stdio(&log, ""),
    ))
    .await;
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "settle").await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(result_of_c1(&env, &thread_id).await, "settled after warmed");
    let states: Vec<Value> = log
        .calls_of("settle")
        .iter()
        .map(|c| c["arguments"]["state"].clone())
        .collect();
    assert_eq!(states, [Value::Null, json!("warmed")]);
    assert!(!env
        .event_types(&thread_id)
        .await
        .contains(&"ELICITATION".to_owned()));
    worker.stop().await.unwrap();
    env.finish().await;
}

/// Stopping the thread while a server's question waits cancels the run and
/// the round's row: a late answer is not delivered and the server is not
/// called again.
#[tokio::test]
async fn stopping_the_thread_while_a_servers_question_waits_cancels_it() {
    let log = CallLog::new();
    let env = TestEnv::start(escalating(&log, None).await).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "escalate T-7").await;
    waiting_on(&env, &thread_id, "c1~1").await;
    env.post(&format!("/threads/{thread_id}/stop"), json!({}))
        .await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "cancelled");
    let (status, late) = answer(
        &env,
        &run_id,
        "c1~1",
        json!({ "team": ["ops"], "reason": ["smoke"] }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{late}");
    assert_eq!(late["delivered"], false, "{late}");
    assert_eq!(
        log.calls_of("escalate_ticket").len(),
        1,
        "sent once, before the stop"
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_servers_url_request_is_a_link_the_person_opens_then_confirms() {
    let log = CallLog::new();
    let registry = load(&agent_file(
        "\"tickets/sign_in\"",
        r#"
  { tool_calls = [ { id = "c1", name = "tickets/sign_in", arguments = {} } ] },
  { text = "Done." },
"#,
        &tickets_stdio(&log, ""),
    ))
    .await;
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "sign me in").await;
    let asked = waiting_on(&env, &thread_id, "c1~1").await;
    let question = &asked["request"]["questions"][0];
    assert_eq!(question["id"], "sso", "{asked}");
    assert_eq!(
        question["link"], "https://sso.example.com/start?client=tickets",
        "{asked}"
    );
    assert_eq!(question["prompt"], "Sign in to the ticket system.");
    assert_eq!(question["required"], true, "{asked}");
    // Nothing is pre-picked: submitting without saying Done is refused.
    let (status, refused) = answer(&env, &run_id, "c1~1", json!({})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    let (_, delivered) = answer(&env, &run_id, "c1~1", json!({ "sso": ["done"] })).await;
    assert_eq!(delivered, json!({ "delivered": true }));
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(
        result_of_c1(&env, &thread_id).await,
        json!("sign-in: accept")
    );
    let calls = log.calls_of("sign_in");
    assert_eq!(
        calls[1]["arguments"]["responses"],
        json!({ "sso": { "action": "accept" } })
    );
    worker.stop().await.unwrap();
    env.finish().await;
}
