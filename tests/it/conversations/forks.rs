//! Forks of a thread (`POST /threads/{id}/fork`), over HTTP.

use super::*;

async fn fork(env: &TestEnv, thread: &str, body: Value) -> (StatusCode, Value) {
    env.call(
        "POST",
        &format!("/threads/{thread}/fork"),
        Some(ALICE),
        Some(body),
    )
    .await
}

/// Forks `thread` at message `at` going on with `content`: the fork, and
/// its run, once that run has completed.
async fn fork_going_on(env: &TestEnv, thread: &str, at: &Value, content: &str) -> (String, String) {
    let (status, body) = fork(
        env,
        thread,
        json!({ "atMessageId": at, "content": content }),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let forked = body["id"].as_str().unwrap().to_owned();
    let run = body["runId"].as_str().unwrap().to_owned();
    assert_eq!(env.wait_run_finished(&run).await["status"], "completed");
    (forked, run)
}

/// The journal's names with run `run`'s id written as `<run>`, so that
/// two runs' journals compare.
async fn journal_of(env: &TestEnv, run: &str) -> Vec<String> {
    env.journal_names(run)
        .await
        .into_iter()
        .map(|name| name.replace(run, "<run>"))
        .collect()
}

/// An agent whose one step calls `lookup` (http, at `url`), then answers.
fn looking_up(url: &str) -> Registry {
    Registry::from_toml(&format!(
        r#"
[agents.agent]
system = "test agent"
tools = ["lookup"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "lookup", arguments = {{ to = "a@b.c" }} }} ] }},
  {{ text = "Done." }},
] }}

[tools.lookup]
type = "http"
url = "{url}"
"#
    ))
    .expect("agent file")
}

#[tokio::test]
async fn a_fork_at_a_parked_approval_asks_again_and_leaves_the_original_as_it_was() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(lookup_then_gate(&tool.url, false)).await;
    let worker = env.spawn_worker();
    let (thread, first) = env.start_turn("agent", "look it up").await;
    env.wait_pending(&thread, 1).await;
    assert_eq!(tool.calls(), 1);
    let before = (
        env.get(&format!("/threads/{thread}/messages")).await,
        env.get(&format!("/threads/{thread}/events")).await,
        env.get(&format!("/threads/{thread}")).await["pendingInputs"].clone(),
    );

    let (status, body) = fork(&env, &thread, json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let forked = body["id"].as_str().unwrap().to_owned();
    assert_ne!(forked, thread);
    assert_eq!(body["forkedFrom"], thread.as_str());
    assert_eq!(body["agent"], "agent");
    let run = body["runId"].as_str().unwrap().to_owned();
    assert_ne!(run, first);

    // The approval is asked again in the fork, of the fork's run.
    let pending = env.wait_pending(&forked, 1).await;
    assert_eq!(pending[0]["toolCallId"], "c2");
    assert_eq!(pending[0]["runId"], run.as_str());
    let view = env.get(&format!("/threads/{forked}")).await;
    assert_eq!(view["forkedFrom"], thread.as_str());
    assert_eq!(view["status"], "WAITING_FOR_INPUT");
    let events = env.get(&format!("/threads/{forked}/events")).await;
    let forked_event = &events.as_array().unwrap()[0];
    assert_eq!(forked_event["type"], "THREAD_FORKED");
    assert_eq!(forked_event["data"]["forkedFrom"], thread.as_str());
    assert_eq!(
        first_event(&events, "INPUT_REQUIRED")["data"]["toolCallId"],
        "c2"
    );
    // The conversation up to the fork point, and no tool ran again.
    let messages = env.get(&format!("/threads/{forked}/messages")).await;
    let contents = |m: &Value| {
        m.as_array()
            .unwrap()
            .iter()
            .map(|m| (m["role"].clone(), m["content"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(contents(&messages), contents(&before.0));
    assert_eq!(tool.calls(), 1, "the lookup before the fork point ran once");
    // The original is untouched.
    assert_eq!(
        env.get(&format!("/threads/{thread}/messages")).await,
        before.0
    );
    assert_eq!(
        env.get(&format!("/threads/{thread}/events")).await,
        before.1
    );
    assert_eq!(
        env.get(&format!("/threads/{thread}")).await["pendingInputs"],
        before.2
    );

    // An answer in the fork settles the fork's request only.
    assert_eq!(approve_call(&env, &run, "c2").await["delivered"], true);
    assert_eq!(env.wait_run_finished(&run).await["status"], "completed");
    let view = env.get(&format!("/threads/{thread}")).await;
    assert_eq!(view["status"], "WAITING_FOR_INPUT");
    assert_eq!(approve_call(&env, &first, "c2").await["delivered"], true);
    assert_eq!(env.wait_run_finished(&first).await["status"], "completed");
    assert_eq!(tool.calls(), 1);
    // The fork's run replayed the original's journal, then went on alike.
    assert_eq!(journal_of(&env, &run).await, journal_of(&env, &first).await);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_fork_at_an_earlier_step_goes_on_from_there_with_a_new_message() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(looking_up(&tool.url)).await;
    let worker = env.spawn_worker();
    let (thread, first) = env.start_turn("agent", "first").await;
    assert_eq!(env.wait_run_finished(&first).await["status"], "completed");
    let (status, body) = post_message(&env, &thread, json!({ "content": "second" })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let second = body["runId"].as_str().unwrap().to_owned();
    assert_eq!(env.wait_run_finished(&second).await["status"], "completed");
    assert_eq!(tool.calls(), 2);
    let before = env.get(&format!("/threads/{thread}/messages")).await;
    // The first turn's call: its step is kept, with the lookup's result.
    let call = before
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant" && m["runId"] == first.as_str())
        .unwrap()["id"]
        .clone();

    let (forked, run) = fork_going_on(&env, &thread, &call, "instead").await;
    assert_eq!(user_messages(&env, &forked).await, ["first", "instead"]);
    let messages = env.get(&format!("/threads/{forked}/messages")).await;
    let roles: Vec<&str> = messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "user", "assistant"]);
    assert_eq!(tool.calls(), 2, "the lookup before the fork point ran once");
    let names = env.journal_names(&run).await;
    assert_eq!(
        names,
        [
            "model:0",
            "persist:toolcall:c1",
            "exec:c1",
            "steer:1",
            "model:1"
        ]
    );
    // The original goes on as it was.
    assert_eq!(
        env.get(&format!("/threads/{thread}/messages")).await,
        before
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_fork_of_an_ended_thread_copies_it_and_a_message_starts_a_turn() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(looking_up(&tool.url)).await;
    let worker = env.spawn_worker();
    let (thread, first) = env.start_turn("agent", "first").await;
    assert_eq!(env.wait_run_finished(&first).await["status"], "completed");
    let before = env.get(&format!("/threads/{thread}/messages")).await;

    // The whole thread, nothing going on.
    let (status, body) = fork(&env, &thread, json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(body.get("runId").is_none(), "{body}");
    assert_eq!(body["status"], "IDLE");
    let forked = body["id"].as_str().unwrap().to_owned();
    let copied = env.get(&format!("/threads/{forked}/messages")).await;
    assert_eq!(
        copied.as_array().unwrap().len(),
        before.as_array().unwrap().len()
    );

    // With a message: a turn of its own after the copied one.
    let (status, body) = fork(&env, &thread, json!({ "content": "again" })).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let forked = body["id"].as_str().unwrap().to_owned();
    let run = body["runId"].as_str().unwrap().to_owned();
    assert_eq!(env.wait_run_finished(&run).await["status"], "completed");
    assert_eq!(user_messages(&env, &forked).await, ["first", "again"]);
    assert_eq!(tool.calls(), 2, "only the new turn's lookup ran");
    // A fork of a fork names its own origin.
    let (status, body) = fork(&env, &forked, json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["forkedFrom"], forked.as_str());
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_fork_at_a_message_not_in_the_conversation_is_refused_and_makes_nothing() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(looking_up(&tool.url)).await;
    let worker = env.spawn_worker();
    let (thread, first) = env.start_turn("agent", "first").await;
    assert_eq!(env.wait_run_finished(&first).await["status"], "completed");
    let messages = env.get(&format!("/threads/{thread}/messages")).await;
    let user = messages[0]["id"].clone();
    // Cut away by an edit: no longer in the conversation.
    let (status, body) = env
        .call(
            "POST",
            &format!("/threads/{thread}/messages/{user}/edit"),
            Some(ALICE),
            Some(json!({ "content": "edited" })),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let threads = || env.rows("SELECT count(*) FROM threads", |r| r.get::<_, i64>(0));
    let count = threads().await;

    for (body, expected) in [
        (
            json!({ "atMessageId": user }),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({ "atMessageId": 999_999_999 }),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (json!({ "atMessageId": 0 }), StatusCode::BAD_REQUEST),
        (json!({ "content": " " }), StatusCode::BAD_REQUEST),
        (json!({ "at": 1 }), StatusCode::BAD_REQUEST),
    ] {
        let (status, answer) = fork(&env, &thread, body.clone()).await;
        assert_eq!(status, expected, "{body}: {answer}");
    }
    // Another owner's thread is not found.
    let (status, _) = env
        .call(
            "POST",
            &format!("/threads/{thread}/fork"),
            Some(BOB),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(threads().await, count, "a refused fork makes no thread");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_fork_while_a_sub_agent_waits_starts_it_again_and_refuses_its_messages() {
    let tool = ToolServer::ok().await;
    let registry = Registry::from_toml(&format!(
        r#"
[agents.root]
subagents = ["child"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "d1", name = "child", arguments = {{ task = "mail it" }} }} ] }},
  {{ text = "root done" }},
] }}

[agents.child]
tools = ["tool"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "tool", arguments = {{ to = "a@b.c" }} }} ] }},
  {{ text = "child done" }},
] }}

[tools.tool]
type = "http"
url = "{}"
requires_confirmation = true
"#,
        tool.url
    ))
    .unwrap();
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (thread, root) = env.start_turn("root", "go").await;
    let asked = env.wait_pending(&thread, 1).await;
    let child = asked[0]["runId"].as_str().unwrap().to_owned();
    let messages = env.get(&format!("/threads/{thread}/messages")).await;
    let task = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["runId"] == child.as_str())
        .unwrap()["id"]
        .clone();
    let (status, body) = fork(&env, &thread, json!({ "atMessageId": task })).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "SubAgentMessage");

    // The delegation was open: the fork starts its sub-agent again, whose
    // request is the fork's.
    let (status, body) = fork(&env, &thread, json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let forked = body["id"].as_str().unwrap().to_owned();
    let run = body["runId"].as_str().unwrap().to_owned();
    let pending = env.wait_pending(&forked, 1).await;
    assert_eq!(pending[0]["toolCallId"], "c1");
    assert_eq!(pending[0]["runName"], "child");
    let forked_child = pending[0]["runId"].as_str().unwrap().to_owned();
    assert_ne!(forked_child, child);
    assert_eq!(
        approve_call(&env, &forked_child, "c1").await["delivered"],
        true
    );
    let ended = env.wait_run_finished(&run).await;
    assert_eq!(ended["status"], "completed");
    assert_eq!(ended["output"], "root done");
    assert_eq!(tool.calls(), 1, "the fork's approved call ran, once");
    // The original still waits for its own answer.
    let original = env.get(&format!("/threads/{thread}")).await;
    assert_eq!(original["pendingInputs"][0]["runId"], child.as_str());
    assert_eq!(approve_call(&env, &child, "c1").await["delivered"], true);
    assert_eq!(env.wait_run_finished(&root).await["status"], "completed");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_fork_keeps_a_denial_and_an_answered_intake_as_they_were() {
    let registry = Registry::from_toml(
        r#"
[agents.agent]
tools = ["gate"]
model = { provider = "scripted", script = [
  { tool_calls = [ { id = "c1", name = "gate", arguments = {} } ] },
  { text = "Done." },
] }
[agents.agent.intake]
questions = [ { id = "scope", prompt = "How wide?", options = [ { value = "all", label = "All" } ], defaults = ["all"] } ]

[tools.gate]
type = "echo"
requires_confirmation = true
"#,
    )
    .unwrap();
    let env = TestEnv::start(registry).await;
    let worker = env.spawn_worker();
    let (thread, first) = env.start_turn("agent", "first").await;
    let intake = env.wait_pending(&thread, 1).await.remove(0);
    let (_, body) = env
        .reply(
            "/agent/tool-call/skip",
            ALICE,
            json!({ "runId": first, "toolCallId": intake["toolCallId"] }),
        )
        .await;
    assert_eq!(body["delivered"], true, "{body}");
    eventually("the gate asked", || async {
        let view = env.get(&format!("/threads/{thread}")).await;
        (view["pendingInputs"][0]["toolCallId"] == "c1").then_some(())
    })
    .await;
    let (_, body) = env
        .reply(
            "/agent/tool-call/reject",
            ALICE,
            json!({ "runId": first, "toolCallId": "c1", "reason": "no" }),
        )
        .await;
    assert_eq!(body["delivered"], true, "{body}");
    assert_eq!(env.wait_run_finished(&first).await["status"], "completed");
    let original = env.get(&format!("/threads/{thread}/messages")).await;

    // The whole thread: an ended turn, nothing asked again.
    let (status, body) = fork(&env, &thread, json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(body.get("runId").is_none(), "{body}");
    let whole = body["id"].as_str().unwrap().to_owned();
    let copied = env.get(&format!("/threads/{whole}/messages")).await;
    let shape = |messages: &Value| {
        messages
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["role"].clone(),
                    m["toolCallId"].clone(),
                    m["content"].clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&copied), shape(&original));
    let view = env.get(&format!("/threads/{whole}")).await;
    assert_eq!(
        view["forkedAtMessageId"],
        original.as_array().unwrap().last().unwrap()["id"]
    );
    // The fork's next turn does not ask the intake again (asked on the
    // thread before the fork point).
    let (status, body) = post_message(&env, &whole, json!({ "content": "next" })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let next = body["runId"].as_str().unwrap().to_owned();
    eventually("the next turn's gate", || async {
        let view = env.get(&format!("/threads/{whole}")).await;
        view["pendingInputs"][0]["toolCallId"]
            .as_str()
            .map(str::to_owned)
    })
    .await;
    let asked = env.get(&format!("/threads/{whole}")).await["pendingInputs"].clone();
    assert_eq!(asked[0]["toolCallId"], "c1", "no intake: {asked}");
    assert_eq!(asked[0]["runId"], next.as_str());

    // At the model's call: the denial is its outcome, carried over.
    let call = original
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant" && m["toolCalls"][0]["id"] == "c1")
        .unwrap()["id"]
        .clone();
    let (forked, run) = fork_going_on(&env, &thread, &call, "instead").await;
    let names = journal_of(&env, &run).await;
    assert_eq!(
        names,
        [
            "intake:ask",
            "intake:answers",
            "model:0",
            "persist:toolcall:c1",
            "tool:<run>:c1",
            "steer:1",
            "model:1"
        ]
    );
    assert!(!env
        .event_types(&forked)
        .await
        .contains(&"INPUT_REQUIRED".to_owned()));
    worker.stop().await.unwrap();
    env.finish().await;
}
