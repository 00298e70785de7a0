//! Real model providers (SPEC §12) through the worker fleet, against local
//! servers that speak the OpenAI and Anthropic wire formats and refuse what
//! the real services refuse.

use std::sync::Arc;
use std::time::Duration;

use agentenkit_runtime::model::{
    AnthropicConfig, AnthropicModel, OpenAiConfig, OpenAiModel, ProviderSettings,
};
use agentenkit_runtime::{Agent, ApiKey, Model, Registry};
use agentenkit_tests::providers::*;
use agentenkit_tests::*;
use serde_json::{json, Value};

const KEY: &str = "sk-test-0123456789secret";

fn settings(url: &str, key: Option<&str>) -> ProviderSettings {
    let mut settings = ProviderSettings::new(url, key.and_then(ApiKey::new));
    settings.backoff = Duration::from_millis(10);
    settings.timeout = Duration::from_secs(10);
    settings
}

fn openai(url: &str, key: Option<&str>) -> Arc<dyn Model> {
    Arc::new(
        OpenAiModel::new(OpenAiConfig {
            model: "gpt-test".into(),
            temperature: Some(0.2),
            max_tokens: Some(256),
            provider: settings(url, key),
        })
        .unwrap(),
    )
}

fn anthropic(url: &str, key: Option<&str>) -> Arc<dyn Model> {
    Arc::new(
        AnthropicModel::new(AnthropicConfig {
            model: "claude-test".into(),
            max_tokens: 512,
            provider: settings(url, key),
        })
        .unwrap(),
    )
}

/// The harness's approval registry (`tool` needs confirmation) with an
/// agent `llm` on `model`.
fn registry_with(model: Arc<dyn Model>, tool_url: &str, ask: bool) -> Registry {
    approval_registry(CALL_THEN_DONE, tool_url).with_agent(
        Agent::new("llm", model)
            .system("You send email.")
            .tool("tool")
            .ask(ask),
    )
}

fn approve(run_id: &str, call: &str) -> Value {
    json!({ "runId": run_id, "toolCallId": call })
}

async fn journal_names(env: &TestEnv, run_id: &str) -> Vec<String> {
    env.journal_names(run_id)
        .await
        .into_iter()
        .map(|n| n.replace(run_id, "<runId>"))
        .collect()
}

#[tokio::test]
async fn an_openai_approval_turn_goes_end_to_end() {
    let tool = ToolServer::ok().await;
    let fake = FakeProvider::start(
        Wire::OpenAi,
        vec![
            openai_calls(&[("call_1", "tool", r#"{"to":"a@b.c"}"#)]),
            openai_text("Sent."),
        ],
    )
    .await;
    let env = TestEnv::start(registry_with(
        openai(&fake.url, Some(KEY)),
        &tool.url,
        false,
    ))
    .await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("llm", "mail a@b.c").await;
    let pending = env.wait_pending(&thread_id, 1).await;
    assert_eq!(pending[0]["arguments"], json!({ "to": "a@b.c" }));
    env.reply(
        "/agent/tool-call/approve",
        ALICE,
        approve(&run_id, "call_1"),
    )
    .await;
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed");
    assert_eq!(run["output"], "Sent.");
    assert_eq!(tool.calls(), 1);

    let sent = fake.accepted();
    assert_eq!(sent.len(), 2, "{sent:#?}");
    let first = &sent[0];
    assert_eq!(first.headers["authorization"], format!("Bearer {KEY}"));
    assert_eq!(first.body["model"], "gpt-test");
    assert_eq!(first.body["temperature"], 0.2);
    assert_eq!(first.body["max_tokens"], 256);
    assert_eq!(
        first.body["messages"],
        json!([
            { "role": "system", "content": "You send email." },
            { "role": "user", "content": "mail a@b.c" },
        ])
    );
    assert_eq!(first.body["tools"][0]["type"], "function");
    assert_eq!(first.body["tools"][0]["function"]["name"], "tool");
    assert_eq!(
        first.body["tools"][0]["function"]["parameters"]["required"],
        json!(["to"])
    );
    let second = &sent[1].body["messages"];
    assert_eq!(
        second[2]["tool_calls"][0]["function"]["arguments"],
        r#"{"to":"a@b.c"}"#
    );
    assert_eq!(second[3]["role"], "tool");
    assert_eq!(second[3]["tool_call_id"], "call_1");
    let result: Value = serde_json::from_str(second[3]["content"].as_str().unwrap()).unwrap();
    assert_eq!(result, json!({ "ok": true, "n": 1 }));
    // Usage as the provider reported it; the journal's names as always.
    assert_eq!(
        run["usage"],
        json!([
            { "modelCall": 0, "inputTokens": 31, "outputTokens": 9 },
            { "modelCall": 1, "inputTokens": 52, "outputTokens": 3 },
        ])
    );
    assert_eq!(
        journal_names(&env, &run_id).await,
        [
            "model:0",
            "persist:toolcall:call_1",
            "tool:<runId>:call_1",
            "exec:call_1",
            "model:1"
        ]
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn an_anthropic_step_with_two_calls_answers_both_in_one_user_message() {
    let tool = ToolServer::ok().await;
    let fake = FakeProvider::start(
        Wire::Anthropic,
        vec![
            anthropic_calls(&[
                ("toolu_1", "tool", json!({ "to": "a@b.c" })),
                ("toolu_2", "tool", json!({ "to": "d@e.f" })),
            ]),
            anthropic_text("Both sent."),
        ],
    )
    .await;
    let env = TestEnv::start(registry_with(
        anthropic(&fake.url, Some(KEY)),
        &tool.url,
        false,
    ))
    .await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("llm", "mail both").await;
    env.wait_pending(&thread_id, 2).await;
    for call in ["toolu_1", "toolu_2"] {
        env.reply("/agent/tool-call/approve", ALICE, approve(&run_id, call))
            .await;
    }
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(tool.calls(), 2);
    let sent = fake.accepted();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].headers["x-api-key"], KEY);
    assert_eq!(sent[0].headers["anthropic-version"], "2023-06-01");
    assert!(!sent[0].headers.contains_key("authorization"));
    assert_eq!(sent[0].body["system"], "You send email.");
    assert_eq!(sent[0].body["max_tokens"], 512);
    assert_eq!(
        sent[0].body["tools"][0]["input_schema"]["required"],
        json!(["to"])
    );
    let messages = sent[1].body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    let results = messages[2]["content"].as_array().unwrap();
    let ids: Vec<&str> = results
        .iter()
        .map(|b| b["tool_use_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["toolu_1", "toolu_2"]);
    assert_eq!(run["usage"][1]["inputTokens"], 77);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_429_with_retry_after_waits_in_a_delayed_message_holding_no_worker() {
    let tool = ToolServer::ok().await;
    let fake = FakeProvider::start(
        Wire::OpenAi,
        vec![
            Reply::error(429, "Rate limit reached").with_header("retry-after-ms", "1500"),
            Reply::error(503, "overloaded").with_header("retry-after", "0"),
            openai_text("Hello."),
        ],
    )
    .await;
    let env = TestEnv::start(registry_with(openai(&fake.url, None), &tool.url, false)).await;
    let worker = env.spawn_worker();
    let (_, run_id) = env.start_turn("llm", "hi").await;
    // While it waits, the run is queued and nobody holds it: no worker
    // sleeps on it, and no attempt was spent.
    eventually("the run waits for the provider", || async {
        let rows: Vec<(String, bool, i32)> = env
            .rows(
                &format!(
                    "SELECT status, lease_owner IS NULL, attempts FROM runs WHERE id = '{run_id}'"
                ),
                |r| (r.get(0), r.get(1), r.get(2)),
            )
            .await;
        (fake.requests().len() == 1 && rows[0] == ("queued".to_owned(), true, 0)).then_some(())
    })
    .await;
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    // The 503 that followed is still retried inside the call.
    assert_eq!(fake.requests().len(), 3);
    // One model call as the run sees it: waits and retries do not reach
    // the journal.
    assert_eq!(journal_names(&env, &run_id).await, ["model:0"]);
    let metrics = env.metrics_text().await;
    assert!(
        metrics.contains(
            r#"agentenkit_provider_waits_total{provider="openai",cause="retry_after"} 1"#
        ),
        "{metrics}"
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_401_fails_the_run_once_with_the_providers_message_and_the_key_nowhere() {
    let tool = ToolServer::ok().await;
    let fake = FakeProvider::start(
        Wire::OpenAi,
        vec![Reply::error(
            401,
            &format!("Incorrect API key provided: {KEY}. You can find your API key at https://platform.openai.com/account/api-keys."),
        )],
    )
    .await;
    let env = TestEnv::start(registry_with(
        openai(&fake.url, Some(KEY)),
        &tool.url,
        false,
    ))
    .await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("llm", "hi").await;
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "failed");
    assert_eq!(fake.requests().len(), 1, "a refusal is not retried");
    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let failed = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "RUN_FAILED")
        .expect("RUN_FAILED")
        .clone();
    assert_eq!(failed["data"]["error"], "model");
    assert_eq!(failed["data"]["status"], 401);
    let message = failed["data"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Incorrect API key provided"),
        "{message}"
    );
    let everything = format!(
        "{run}{events}{}",
        env.get(&format!("/runs/{run_id}/journal")).await
    );
    assert!(!everything.contains(KEY), "the key leaked: {everything}");
    assert!(everything.contains("[redacted]"));
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn arguments_that_are_not_json_are_a_tool_failure_the_model_sees() {
    let tool = ToolServer::ok().await;
    let fake = FakeProvider::start(
        Wire::OpenAi,
        vec![
            openai_calls(&[("call_1", "tool", r#"{"to": "a@b.c""#)]),
            openai_text("Sorry."),
        ],
    )
    .await;
    // A function tool (no confirmation), so the failure comes at once.
    let registry = registry(CALL_THEN_DONE, &tool.url)
        .with_agent(Agent::new("llm", openai(&fake.url, None)).tool("tool"));
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (_, run_id) = env.start_turn("llm", "mail").await;
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(tool.calls(), 0);
    let sent = fake.accepted();
    let result = &sent[1].body["messages"][2];
    assert_eq!(result["role"], "tool");
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("invalid arguments"),
        "{result}"
    );
    // What the model wrote goes back as it wrote it.
    assert_eq!(
        sent[1].body["messages"][1]["tool_calls"][0]["function"]["arguments"],
        r#"{"to": "a@b.c""#
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn no_key_configured_sends_no_authorization_header() {
    let fake = FakeProvider::start(Wire::OpenAi, vec![openai_text("Hi.")]).await;
    // From the agent file, naming a variable nobody sets.
    let registry = Registry::from_toml(&format!(
        r#"
[agents.local]
model = {{ provider = "openai", model = "llama3", base_url = "{}", api_key_env = "AGENTENKIT_TEST_KEY_NOBODY_SETS" }}
"#,
        fake.url
    ))
    .unwrap();
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (_, run_id) = env.start_turn("local", "hi").await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let sent = fake.accepted();
    assert!(!sent[0].headers.contains_key("authorization"));
    assert_eq!(sent[0].body["model"], "llama3");
    assert!(sent[0].body.get("tools").is_none());
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_stopped_turn_then_a_new_one_is_accepted_by_a_strict_provider() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let tool = ToolServer::ok().await;
        let (first, then) = match wire {
            Wire::OpenAi => (
                openai_calls(&[("c1", "tool", r#"{"to":"a@b.c"}"#)]),
                openai_text("Fine."),
            ),
            Wire::Anthropic => (
                anthropic_calls(&[("c1", "tool", json!({ "to": "a@b.c" }))]),
                anthropic_text("Fine."),
            ),
        };
        let fake = FakeProvider::start(wire, vec![first, then]).await;
        let model = match wire {
            Wire::OpenAi => openai(&fake.url, None),
            Wire::Anthropic => anthropic(&fake.url, None),
        };
        let env = TestEnv::start(registry_with(model, &tool.url, false)).await;
        let worker = env.spawn_worker();
        let (thread_id, run_id) = env.start_turn("llm", "mail").await;
        env.wait_pending(&thread_id, 1).await;
        env.post(&format!("/threads/{thread_id}/stop"), json!({}))
            .await;
        assert_eq!(env.wait_run_finished(&run_id).await["status"], "cancelled");
        let next = env
            .post(
                &format!("/threads/{thread_id}/messages"),
                json!({ "content": "never mind" }),
            )
            .await;
        let next_run = next["runId"].as_str().unwrap();
        let run = env.wait_run_finished(next_run).await;
        assert_eq!(run["status"], "completed", "{wire:?}: {run}");
        let refused: Vec<_> = fake
            .requests()
            .into_iter()
            .filter_map(|r| r.refused)
            .collect();
        assert!(refused.is_empty(), "{wire:?}: {refused:?}");
        let last = fake.accepted().pop().unwrap().body.to_string();
        assert!(last.contains(r#"{\"cancelled\":true}"#), "{wire:?}: {last}");
        assert_eq!(tool.calls(), 0);
        worker.stop().await.unwrap();
        env.finish().await;
    }
}

#[tokio::test]
async fn ask_offers_the_ask_tool_with_its_schema() {
    let tool = ToolServer::ok().await;
    let fake = FakeProvider::start(Wire::Anthropic, vec![anthropic_text("No questions.")]).await;
    let env = TestEnv::start(registry_with(anthropic(&fake.url, None), &tool.url, true)).await;
    let worker = env.spawn_worker();
    let (_, run_id) = env.start_turn("llm", "scope it").await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let tools = fake.accepted()[0].body["tools"].clone();
    let ask = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ask")
        .unwrap_or_else(|| panic!("no ask tool in {tools}"))
        .clone();
    assert_eq!(ask["input_schema"]["type"], "object");
    assert!(
        ask["input_schema"]["properties"]["questions"].is_object(),
        "{ask}"
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_worker_killed_after_the_park_never_calls_the_model_for_that_step_again() {
    let tool = ToolServer::ok().await;
    let fake = FakeProvider::start(
        Wire::OpenAi,
        vec![
            openai_calls(&[("c1", "tool", r#"{"to":"a@b.c"}"#)]),
            openai_text("Sent."),
        ],
    )
    .await;
    let env = TestEnv::start(registry_with(openai(&fake.url, None), &tool.url, false)).await;
    let doomed = env.spawn_crashing_worker("park");
    let (thread_id, run_id) = env.start_turn("llm", "mail").await;
    doomed.died().await.unwrap_err();
    let worker = env.spawn_worker();
    env.wait_pending(&thread_id, 1).await;
    env.reply("/agent/tool-call/approve", ALICE, approve(&run_id, "c1"))
        .await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    // model:0 was answered once (before the kill) and replayed after it.
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(tool.calls(), 1);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_provider_is_reached_over_tls_with_a_certificate_the_test_made() {
    let tool = ToolServer::ok().await;
    let (fake, ca_pem) =
        FakeProvider::start_tls(Wire::Anthropic, vec![anthropic_text("Secure.")]).await;
    assert!(fake.url.starts_with("https://localhost:"));
    let mut trusted = settings(&fake.url, Some(KEY));
    trusted.extra_roots_pem = vec![ca_pem];
    let model: Arc<dyn Model> = Arc::new(
        AnthropicModel::new(AnthropicConfig {
            model: "claude-test".into(),
            max_tokens: 64,
            provider: trusted,
        })
        .unwrap(),
    );
    // The same server, not trusted: the handshake fails, which is retried
    // as a connection error and then fails the step; never a plain-text
    // fallback.
    let mut untrusted = settings(&fake.url, Some(KEY));
    untrusted.max_retries = 0;
    let stranger: Arc<dyn Model> = Arc::new(
        AnthropicModel::new(AnthropicConfig {
            model: "claude-test".into(),
            max_tokens: 64,
            provider: untrusted,
        })
        .unwrap(),
    );
    let registry =
        registry_with(model, &tool.url, false).with_agent(Agent::new("stranger", stranger));
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (_, run_id) = env.start_turn("llm", "hi").await;
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], "Secure.");
    assert_eq!(fake.accepted().len(), 1);
    let (_, refused_run) = env.start_turn("stranger", "hi").await;
    let run = env.wait_run_finished(&refused_run).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"].as_str().unwrap().contains("could not connect"),
        "{run}"
    );
    assert_eq!(fake.requests().len(), 1, "no request passed without trust");
    worker.stop().await.unwrap();
    env.finish().await;
}

/// A provider whose answer is past `max_response_bytes` is read no further:
/// the run fails at once, saying so, instead of holding the body in memory
/// or retrying for the same; an error answer's message is quoted only so
/// far; and a `retry-after-ms` no duration holds ends the call, no panic.
#[tokio::test]
async fn a_providers_answer_is_read_only_so_far_and_its_message_quoted_only_so_long() {
    let tool = ToolServer::ok().await;
    let huge = "x".repeat(256 * 1024);
    let fake = FakeProvider::start(
        Wire::OpenAi,
        vec![
            // a 503 with an endless wait, then a body past the cap
            Reply::error(503, &huge).with_header("retry-after-ms", "1e300"),
            openai_text(&huge),
        ],
    )
    .await;
    let mut capped = settings(&fake.url, None);
    capped.max_response_bytes = 64 * 1024;
    capped.max_retries = 1;
    let model: Arc<dyn Model> = Arc::new(
        OpenAiModel::new(OpenAiConfig {
            model: "gpt-test".into(),
            temperature: None,
            max_tokens: None,
            provider: capped,
        })
        .unwrap(),
    );
    let first = model
        .complete(agentenkit_runtime::model::ModelRequest {
            call_index: 0,
            system: "s",
            messages: &[],
            tools: &[],
        })
        .await
        .expect_err("a 503");
    let first = first.to_string();
    assert!(first.len() < 2_000, "quoted whole: {} bytes", first.len());
    let env = TestEnv::start(registry_with(model, &tool.url, false)).await;
    let worker = env.spawn_worker();
    let (_, run_id) = env.start_turn("llm", "hi").await;
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap_or_default();
    assert!(error.contains("max_response_bytes"), "{error}");
    assert_eq!(
        fake.requests().len(),
        2,
        "the oversized answer is not retried"
    );
    worker.stop().await.unwrap();
    env.finish().await;
}
