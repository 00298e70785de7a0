//! A provider whose tool names forbid `/` is shown `SERVER__TOOL`, and its
//! calls are mapped back to the server's tool.

use std::sync::Arc;
use std::time::Duration;

use agentenkit_runtime::model::{OpenAiConfig, OpenAiModel, ProviderSettings};
use agentenkit_runtime::{Agent, ApiKey};
use agentenkit_tests::providers::*;
use agentenkit_tests::*;
use serde_json::json;

use super::*;

#[tokio::test]
async fn an_openai_model_calls_an_mcp_tool_by_its_wire_name() {
    let log = CallLog::new();
    let fake = FakeProvider::start(
        Wire::OpenAi,
        vec![
            openai_calls(&[("call_1", "tickets__search_tickets", r#"{"query":"fire"}"#)]),
            openai_text("Found it."),
        ],
    )
    .await;
    let mut settings = ProviderSettings::new(&fake.url, ApiKey::new("sk-test-0123456789secret"));
    settings.backoff = Duration::from_millis(10);
    let model = OpenAiModel::new(OpenAiConfig {
        model: "gpt-test".into(),
        temperature: None,
        max_tokens: None,
        provider: settings,
    })
    .unwrap();
    let registry = load(&agent_file(
        "\"tickets/search_tickets\"",
        "",
        &tickets_stdio(&log, ""),
    ))
    .await
    .with_agent(Agent::new("llm", Arc::new(model)).tool("tickets/search_tickets"));
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (_, run_id) = env.start_turn("llm", "find the fire ticket").await;
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], "Found it.");
    let searches = log.calls_of("search_tickets");
    assert_eq!(searches.len(), 1);
    assert_eq!(searches[0]["arguments"], json!({ "query": "fire" }));

    let sent = fake.accepted();
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(
        sent[0].body["tools"][0]["function"]["name"],
        "tickets__search_tickets"
    );
    let replayed = &sent[1].body["messages"];
    let call = replayed
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .expect("the assistant's turn");
    assert_eq!(
        call["tool_calls"][0]["function"]["name"], "tickets__search_tickets",
        "the call goes back under the name the provider knows"
    );
    // The journal and the conversation name the server's tool.
    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    assert!(
        journal.to_string().contains("tickets/search_tickets"),
        "{journal}"
    );
    worker.stop().await.unwrap();
    env.finish().await;
}
