//! A message that steers a run (`onActive: "steer"`) reaches the model's
//! next call exactly once, with real worker processes SIGKILLed while that
//! call is in flight: the next worker reads the message again (it left the
//! queue only in the commit that journals it) and the model sees it once.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentenkit_core::{Owner, RunStatus};
use agentenkit_store::{Arrival, ReadBound};
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use support::{sigkill, Fleet};

/// An OpenAI-compatible model: calls `lookup` first; once it has read a
/// tool result, says "Done." (the first such call hangs until the worker
/// making it is killed). Keeps every request's messages.
#[derive(Clone, Default)]
struct Model {
    requests: Arc<Mutex<Vec<Vec<Value>>>>,
}

async fn complete(State(model): State<Model>, Json(body): Json<Value>) -> Json<Value> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let read_result = messages.iter().any(|m| m["role"] == "tool");
    let first_after_tool = {
        let mut requests = model.requests.lock().unwrap();
        requests.push(messages);
        requests
            .iter()
            .filter(|m| m.iter().any(|m| m["role"] == "tool"))
            .count()
            == 1
    };
    if !read_result {
        return Json(json!({
            "choices": [{ "index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [{ "id": "c1", "type": "function",
                    "function": { "name": "lookup", "arguments": "{}" } }] } }],
            "usage": { "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15 },
        }));
    }
    if read_result && read_result == first_after_tool {
        // The worker making this call dies while it waits.
        tokio::time::sleep(Duration::from_secs(120)).await;
    }
    Json(json!({
        "choices": [{ "index": 0, "finish_reason": "stop",
            "message": { "role": "assistant", "content": "Done." } }],
        "usage": { "prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22 },
    }))
}

/// A tool that answers after a moment, long enough to steer the run.
async fn lookup() -> Json<Value> {
    tokio::time::sleep(Duration::from_millis(800)).await;
    Json(json!({ "found": 3 }))
}

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{address}")
}

/// How many times `text` is a user message of `messages`.
fn times(messages: &[Value], text: &str) -> usize {
    messages
        .iter()
        .filter(|m| m["role"] == "user" && m["content"] == text)
        .count()
}

#[tokio::test]
async fn a_steering_message_reaches_the_next_model_call_once_when_its_worker_is_killed_during_it() {
    let fleet = Fleet::new("steer-kill").await;
    let model = Model::default();
    let model_url = serve(
        Router::new()
            .route("/v1/chat/completions", post(complete))
            .with_state(model.clone()),
    )
    .await;
    let tool_url = serve(Router::new().route("/", post(lookup))).await;
    let file = fleet.agent_file(&format!(
        r#"
[agents.agent]
tools = ["lookup"]
model = {{ provider = "openai", model = "m", base_url = "{model_url}/v1", api_key_env = "AGENTENKIT_TEST_KEY_NOBODY_SETS" }}

[tools.lookup]
type = "http"
url = "{tool_url}/"
read_only = true
"#
    ));
    let env = vec![("AGENTENKIT_LEASE_TTL", "1s".to_owned())];
    let owner = Owner("alice".into());
    let mut doomed = fleet.spawn_worker(&file, &env);
    let (thread, run) = fleet.start_turn(&owner, "agent", "find the tickets").await;
    fleet
        .until("the first model call", || async {
            (!model.requests.lock().unwrap().is_empty()).then_some(())
        })
        .await;
    // While the step's tool runs: the message joins the next model call.
    let steered = fleet
        .store
        .post_turn(thread, &owner, "also cc Dana", Arrival::Steer, None)
        .await
        .unwrap();
    assert!(steered.steered);
    assert_eq!(steered.run_id, run);
    fleet
        .until("the model call after the tool", || async {
            let requests = model.requests.lock().unwrap();
            requests
                .iter()
                .any(|m| m.iter().any(|m| m["role"] == "tool"))
                .then_some(())
        })
        .await;
    sigkill(&mut doomed).await;

    let _rescuer = fleet.spawn_worker(&file, &env);
    assert_eq!(fleet.finished(&owner, run).await, RunStatus::Completed);
    let requests = model.requests.lock().unwrap().clone();
    let after_tool: Vec<&Vec<Value>> = requests
        .iter()
        .filter(|m| m.iter().any(|m| m["role"] == "tool"))
        .collect();
    assert_eq!(after_tool.len(), 2, "made again by the next worker");
    for messages in &after_tool {
        assert_eq!(times(messages, "also cc Dana"), 1, "{messages:?}");
        // After the step's results.
        assert_eq!(messages.last().unwrap()["content"], "also cc Dana");
    }
    assert_eq!(times(&requests[0], "also cc Dana"), 0);
    let conversation: Vec<Value> = fleet
        .store
        .list_messages(thread, &owner, 0, ReadBound::new(100, 1 << 20))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    assert_eq!(times(&conversation, "also cc Dana"), 1, "{conversation:?}");
    let journal: Vec<String> = fleet
        .store
        .get_journal(run, &owner, None, ReadBound::new(100, 1 << 20))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|entry| entry.name)
        .collect();
    assert_eq!(
        journal,
        [
            "model:0",
            "persist:toolcall:c1",
            "exec:c1",
            "steer:1",
            "model:1"
        ]
    );
    let view = fleet.store.get_thread(thread, &owner).await.unwrap();
    assert!(view.queued_messages.is_empty(), "taken out of the queue");
    fleet.clean_up().await;
}
