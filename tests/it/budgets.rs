//! Budgets that park (docs/budgets.md): a run that would pass its budget
//! asks a person for more, on real Postgres and RabbitMQ.

use agentenkit_runtime::Registry;
use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::{json, Value};

/// An agent that never stops: each model call makes one `echo` call (ids
/// c0, c1, …), within `budget` (a TOML inline table of `run`).
fn looping(budget: &str) -> Registry {
    let script: Vec<String> = (0..20)
        .map(|i| {
            format!(r#"{{ tool_calls = [ {{ id = "c{i}", name = "echo", arguments = {{}} }} ] }}"#)
        })
        .collect();
    Registry::from_toml(&format!(
        r#"
[agents.loop]
system = "test agent"
tools = ["echo"]
model = {{ provider = "scripted", script = [ {} ] }}
budget = {{ run = {budget} }}

[tools.echo]
type = "echo"
"#,
        script.join(", ")
    ))
    .expect("agent file")
}

/// The budget requests of the run's thread, as the inbox lists them.
async fn budget_request(env: &TestEnv, thread: &str) -> Value {
    let pending = env.wait_pending(thread, 1).await;
    assert_eq!(pending[0]["toolName"], "budget", "{pending:?}");
    pending[0].clone()
}

/// The thread's open request after `asked`, once the run has asked again.
async fn next_request(env: &TestEnv, thread: &str, asked: &Value) -> Value {
    eventually("the next budget request", || async {
        let pending = env.get(&format!("/threads/{thread}")).await["pendingInputs"].clone();
        pending
            .as_array()
            .and_then(|p| p.first())
            .filter(|p| p["toolCallId"] != asked["toolCallId"])
            .cloned()
    })
    .await
}

async fn model_calls(env: &TestEnv, run: &str) -> usize {
    env.journal_names(run)
        .await
        .iter()
        .filter(|n| n.starts_with("model:"))
        .count()
}

#[tokio::test]
async fn a_looping_agent_parks_at_its_budget_gets_half_more_once_and_ends_at_the_second() {
    let env = TestEnv::start(looping("{ model_calls = 4 }")).await;
    let worker = env.spawn_worker();
    let (thread, run) = env.start_turn("loop", "go").await;

    let asked = budget_request(&env, &thread).await;
    assert_eq!(asked["reason"], "budget");
    assert_eq!(asked["arguments"]["measure"], "model_calls");
    assert_eq!(asked["arguments"]["used"], 4);
    assert_eq!(asked["arguments"]["limit"], 4);
    assert_eq!(
        asked["arguments"]["question"],
        "used 4 of 4 model calls; allow more?"
    );
    assert_eq!(
        model_calls(&env, &run).await,
        4,
        "it asked before the fifth"
    );
    let view = env.get(&format!("/threads/{thread}")).await;
    assert_eq!(view["status"], "WAITING_FOR_INPUT");

    // 50 % more, once.
    let (status, body) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run, "toolCallId": asked["toolCallId"], "payload": { "add": { "model_calls": 2 } } }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["delivered"], true, "{body}");
    let again = next_request(&env, &thread, &asked).await;
    assert_eq!(again["arguments"]["used"], 6);
    assert_eq!(again["arguments"]["limit"], 6);
    assert_eq!(model_calls(&env, &run).await, 6);

    // No more: the run fails, naming the budget.
    let (status, body) = env
        .reply(
            "/agent/tool-call/reject",
            ALICE,
            json!({ "runId": run, "toolCallId": again["toolCallId"], "reason": "enough" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let ended = env.wait_run_finished(&run).await;
    assert_eq!(ended["status"], "failed");
    assert_eq!(
        ended["error"],
        "budget run.model_calls used up (6 of 6) and more was refused"
    );
    // The model never saw the requests: only its own calls' results.
    let messages = env.get(&format!("/threads/{thread}/messages")).await;
    assert!(messages
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["name"] != "budget"
            && m["toolCallId"]
                .as_str()
                .is_none_or(|id| !id.starts_with("budget"))));
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_worker_killed_at_the_budget_boundary_neither_overspends_nor_asks_twice() {
    for crash_at in ["model:2", "budget:3", "before:park"] {
        let env = TestEnv::start(looping("{ model_calls = 3 }")).await;
        let doomed = env.spawn_crashing_worker(crash_at);
        let (thread, run) = env.start_turn("loop", "go").await;
        assert!(
            doomed.died().await.is_err(),
            "{crash_at}: the crash point fired"
        );
        let worker = env.spawn_worker();
        let asked = budget_request(&env, &thread).await;
        assert_eq!(asked["arguments"]["used"], 3, "{crash_at}");
        assert_eq!(model_calls(&env, &run).await, 3, "{crash_at}");
        let events = env.event_types(&thread).await;
        assert_eq!(
            events.iter().filter(|e| *e == "INPUT_REQUIRED").count(),
            1,
            "{crash_at}: asked once: {events:?}"
        );
        // Granted without amounts: the budget's own size more.
        let body = approve(&env, &run, asked["toolCallId"].as_str().unwrap()).await;
        assert_eq!(body["delivered"], true, "{body}");
        let again = next_request(&env, &thread, &asked).await;
        assert_eq!(again["arguments"]["limit"], 6, "{crash_at}");
        assert_eq!(model_calls(&env, &run).await, 6, "{crash_at}");
        worker.stop().await.unwrap();
        env.finish().await;
    }
}

#[tokio::test]
async fn a_token_budget_is_spent_by_what_the_model_reported_and_a_bad_budget_is_refused() {
    // The scripted model reports about a token per four characters sent:
    // a first call's prompt passes 1 input token.
    let env = TestEnv::start(looping("{ input_tokens = 1 }")).await;
    let worker = env.spawn_worker();
    let (thread, run) = env.start_turn("loop", "go").await;
    let asked = budget_request(&env, &thread).await;
    assert_eq!(asked["arguments"]["measure"], "input_tokens");
    assert_eq!(model_calls(&env, &run).await, 1, "one call used it up");
    let journal = env.get(&format!("/runs/{run}/journal")).await;
    let reported = journal[0]["value"]["usage"]["inputTokens"]
        .as_u64()
        .unwrap();
    assert_eq!(asked["arguments"]["used"], reported);
    worker.stop().await.unwrap();
    env.finish().await;

    for (budget, says) in [
        ("{ model_calls = 0 }", "model_calls must be more than 0"),
        ("{ dollars = 1 }", "unknown field"),
        ("{ cost_usd = 1 }", "give the model a price"),
    ] {
        let error = Registry::from_toml(&format!(
            "[agents.a]\nmodel = {{ provider = \"scripted\", script = [] }}\nbudget = {{ run = {budget} }}\n"
        ))
        .err()
        .expect("refused")
        .to_string();
        assert!(error.contains(says), "{budget}: {error}");
    }
    let error = Registry::from_toml(
        "[agents.a]\nmodel = { provider = \"scripted\", script = [] }\nbudget = { thread = { cost_usd = 1 } }\n",
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(
        error.contains("budget.thread counts calls and tokens"),
        "{error}"
    );
}

#[tokio::test]
async fn a_thread_budget_counts_the_threads_earlier_turns_and_a_cost_budget_the_price() {
    let registry = Registry::from_toml(
        r#"
[agents.thread]
tools = ["echo"]
model = { provider = "scripted", script = [
  { tool_calls = [ { id = "c1", name = "echo", arguments = {} } ] },
  { text = "Done." },
] }
budget = { thread = { model_calls = 3 } }

[agents.priced]
tools = ["echo"]
model = { provider = "scripted", price = { input_per_mtok = 1000000, output_per_mtok = 0 }, script = [
  { tool_calls = [ { id = "c1", name = "echo", arguments = {} } ] },
  { text = "Done." },
] }
budget = { run = { cost_usd = 2 } }

[tools.echo]
type = "echo"
"#,
    )
    .unwrap();
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();

    // Two model calls in the first turn: the second turn's first makes
    // three, and it asks before another.
    let (thread, first) = env.start_turn("thread", "one").await;
    assert_eq!(env.wait_run_finished(&first).await["status"], "completed");
    let (status, body) = env
        .call(
            "POST",
            &format!("/threads/{thread}/messages"),
            Some(ALICE),
            Some(json!({ "content": "two" })),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let second = body["runId"].as_str().unwrap().to_owned();
    let asked = budget_request(&env, &thread).await;
    assert_eq!(asked["runId"], second.as_str());
    assert_eq!(asked["arguments"]["budget"], "thread");
    assert_eq!(
        asked["arguments"]["question"],
        "the thread used 3 of 3 model calls; allow more?"
    );
    assert_eq!(model_calls(&env, &second).await, 1);
    let body = approve(&env, &second, asked["toolCallId"].as_str().unwrap()).await;
    assert_eq!(body["delivered"], true, "{body}");
    assert_eq!(env.wait_run_finished(&second).await["status"], "completed");
    // The grant is the thread's: a third turn spends it without asking
    // (the thread at 4, then 5, of 6).
    let post = |thread: String, content: &'static str| {
        let env = &env;
        async move {
            let (status, body) = env
                .call(
                    "POST",
                    &format!("/threads/{thread}/messages"),
                    Some(ALICE),
                    Some(json!({ "content": content })),
                )
                .await;
            assert_eq!(status, StatusCode::ACCEPTED, "{body}");
            body["runId"].as_str().unwrap().to_owned()
        }
    };
    let third = post(thread.clone(), "three").await;
    assert_eq!(env.wait_run_finished(&third).await["status"], "completed");
    // A fork counts what the thread spent before it: at 6 of 6, its first
    // turn asks before its first model call.
    let (status, body) = env
        .call(
            "POST",
            &format!("/threads/{thread}/fork"),
            Some(ALICE),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let forked = body["id"].as_str().unwrap().to_owned();
    let fourth = post(forked.clone(), "four").await;
    let asked = budget_request(&env, &forked).await;
    assert_eq!(asked["runId"], fourth.as_str());
    assert_eq!(asked["arguments"]["used"], 6);
    assert_eq!(model_calls(&env, &fourth).await, 0);

    // A dollar a token in: the first call's prompt costs more than $2.
    let (thread, run) = env.start_turn("priced", "go").await;
    let asked = budget_request(&env, &thread).await;
    assert_eq!(asked["arguments"]["measure"], "cost_usd");
    let reported = env.get(&format!("/runs/{run}")).await["usage"][0]["inputTokens"]
        .as_f64()
        .unwrap();
    assert_eq!(asked["arguments"]["used"].as_f64().unwrap(), reported);
    assert_eq!(asked["arguments"]["limit"], 2.0);
    let (status, body) = env
        .reply(
            "/agent/tool-call/reject",
            ALICE,
            json!({ "runId": run, "toolCallId": asked["toolCallId"] }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let ended = env.wait_run_finished(&run).await;
    assert_eq!(ended["status"], "failed");
    assert!(ended["error"]
        .as_str()
        .unwrap()
        .starts_with("budget run.cost_usd used up ($"));
    worker.stop().await.unwrap();
    env.finish().await;
}

#[test]
fn a_tool_named_budget_is_refused_when_the_file_loads() {
    let error = Registry::from_toml(
        "[agents.a]\ntools = [\"budget\"]\nmodel = { provider = \"scripted\", script = [] }\n[tools.budget]\ntype = \"echo\"\n",
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(
        error.contains("taken by the requests for more budget"),
        "{error}"
    );
}

#[tokio::test]
async fn a_thread_shows_what_its_runs_spent() {
    let env = TestEnv::start(looping("{ model_calls = 3 }")).await;
    let fresh = env.post("/threads", json!({ "agent": "loop" })).await;
    let fresh = env
        .get(&format!("/threads/{}", fresh["id"].as_str().unwrap()))
        .await;
    assert_eq!(
        fresh["spent"],
        json!({ "modelCalls": 0, "toolCalls": 0, "inputTokens": 0, "outputTokens": 0 })
    );
    let worker = env.spawn_worker();
    let (thread, run) = env.start_turn("loop", "go").await;
    budget_request(&env, &thread).await;
    let journal = env.get(&format!("/runs/{run}/journal")).await;
    let reported = |key: &str| -> u64 {
        journal
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"].as_str().is_some_and(|n| n.starts_with("model:")))
            .map(|e| e["value"]["usage"][key].as_u64().unwrap())
            .sum()
    };
    let spent = env.get(&format!("/threads/{thread}")).await["spent"].clone();
    assert_eq!(spent["modelCalls"], 3, "{spent}");
    assert_eq!(spent["toolCalls"], 3, "{spent}");
    assert_eq!(spent["inputTokens"], reported("inputTokens"), "{spent}");
    assert_eq!(spent["outputTokens"], reported("outputTokens"), "{spent}");
    assert!(reported("inputTokens") > 0);
    worker.stop().await.unwrap();
    env.finish().await;
}
