//! The agent's intake: questions asked before the model is first called,
//! once per thread or every turn, across crashes, stops and deploys.

use agentenkit_runtime::reaper::{reap_once, ReaperConfig};
use agentenkit_runtime::Registry;
use agentenkit_tests::*;
use serde_json::{json, Value};

use crate::elicitation::{settled, target, with};

const QUESTIONS: &str = r#"[
  { id = "scope", prompt = "How wide?", options = [ { value = "module", label = "This module only" }, { value = "repo", label = "The whole repository" } ], defaults = ["module"] },
  { id = "langs", prompt = "Which languages?", multiple = true, options = [ { value = "rust", label = "Rust" }, { value = "go", label = "Go" }, { value = "py", label = "Python" } ], defaults = ["rust"] },
]"#;

/// An agent with an intake (`when`) whose model answers "Done.".
fn intake_agent(when: &str) -> Registry {
    Registry::from_toml(&format!(
        r#"
[agents.agent]
model = {{ provider = "scripted", script = [ {{ text = "Done." }} ] }}
[agents.agent.intake]
preamble = "Two questions before I start."
when = "{when}"
questions = {QUESTIONS}
"#
    ))
    .unwrap()
}

#[tokio::test]
async fn an_intake_asks_once_per_thread_before_any_model_call() {
    let env = TestEnv::start(intake_agent("thread-start")).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "first").await;
    let input = env.wait_pending(&thread_id, 1).await.remove(0);
    assert_eq!(input["toolName"], "ask");
    assert_eq!(input["reason"], "intake");
    assert_eq!(
        input["request"]["preamble"],
        "Two questions before I start."
    );
    assert_eq!(input["request"]["questions"].as_array().unwrap().len(), 2);
    assert_eq!(
        env.get(&format!("/runs/{run_id}")).await["usage"],
        json!([]),
        "no model call yet"
    );
    let (_, answer) = env
        .reply("/agent/tool-call/skip", ALICE, target(&input))
        .await;
    assert_eq!(answer["delivered"], true);
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(
        run["usage"].as_array().unwrap().len(),
        1,
        "the intake wrote no usage row"
    );
    assert_eq!(
        env.journal_names(&run_id).await,
        ["intake:ask", "intake:answers", "model:0"]
    );
    let (reply, seen) = settled(&env, &thread_id, &run_id, "intake:answers").await;
    assert_eq!(reply["status"], "rejected", "a skip persists as rejected");
    assert_eq!(
        reply["answers"],
        json!({ "scope": ["module"], "langs": ["rust"] })
    );
    assert_eq!(reply["defaulted"], json!(["scope", "langs"]));
    assert_eq!(seen["skipped"], true);

    // The second turn of the thread is not asked again.
    let second = env
        .post(
            &format!("/threads/{thread_id}/messages"),
            json!({ "content": "second" }),
        )
        .await;
    let second = second["runId"].as_str().unwrap().to_owned();
    assert_eq!(env.wait_run_finished(&second).await["status"], "completed");
    assert_eq!(env.journal_names(&second).await, ["intake:ask", "model:0"]);
    let journal = env.get(&format!("/runs/{second}/journal")).await;
    assert_eq!(journal[0]["value"], false);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn an_every_turn_intake_asks_each_turn() {
    let env = TestEnv::start(intake_agent("every-turn")).await;
    let worker = env.spawn_worker();
    let thread = env.post("/threads", json!({ "agent": "agent" })).await;
    let thread_id = thread["id"].as_str().unwrap().to_owned();
    for turn in 0..2 {
        let run = env
            .post(
                &format!("/threads/{thread_id}/messages"),
                json!({ "content": format!("turn {turn}") }),
            )
            .await;
        let run_id = run["runId"].as_str().unwrap().to_owned();
        let input = env.wait_pending(&thread_id, 1).await.remove(0);
        env.reply(
            "/agent/tool-call/answer",
            ALICE,
            with(target(&input), "answers", json!({ "scope": ["repo"] })),
        )
        .await;
        env.wait_run_finished(&run_id).await;
        assert_eq!(
            env.journal_names(&run_id).await,
            ["intake:ask", "intake:answers", "model:0"]
        );
    }
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_worker_killed_after_the_intake_message_does_not_ask_twice() {
    let env = TestEnv::start(intake_agent("thread-start")).await;
    let doomed = env.spawn_crashing_worker("intake:ask");
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    doomed.died().await.unwrap_err();
    let rescuer = env.spawn_worker();
    let input = env.wait_pending(&thread_id, 1).await.remove(0);
    env.reply(
        "/agent/tool-call/answer",
        ALICE,
        with(target(&input), "answers", json!({ "langs": ["go"] })),
    )
    .await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(
        env.journal_names(&run_id).await,
        ["intake:ask", "intake:answers", "model:0"]
    );
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    let roles: Vec<_> = messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "assistant"],
        "the model call lands after the answers"
    );
    assert_eq!(messages[1]["content"], "Two questions before I start.");
    let elicitations = env
        .event_types(&thread_id)
        .await
        .into_iter()
        .filter(|t| t == "ELICITATION")
        .count();
    assert_eq!(elicitations, 1, "asked once");
    rescuer.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn nobody_answering_leaves_the_questions_parked_after_the_reaper_ran() {
    let env = TestEnv::start(intake_agent("thread-start")).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;
    let config = ReaperConfig {
        default_ttl: std::time::Duration::from_millis(1),
        ..ReaperConfig::default()
    };
    let report = reap_once(&env.reaper(), &config).await.unwrap();
    assert_eq!((report.expired_requests, report.scheduled_expiries), (0, 0));
    let input = env.wait_pending(&thread_id, 1).await.remove(0);
    assert_eq!(input["expiresAt"], Value::Null);
    assert_eq!(
        env.get(&format!("/runs/{run_id}")).await["status"],
        "waiting"
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_thread_start_intake_stopped_before_an_answer_is_asked_again_next_turn() {
    let env = TestEnv::start(intake_agent("thread-start")).await;
    let worker = env.spawn_worker();
    let (thread_id, first) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;
    env.post(&format!("/threads/{thread_id}/stop"), json!({}))
        .await;
    assert_eq!(env.wait_run_finished(&first).await["status"], "cancelled");
    // Nobody answered: the next turn asks again.
    let second = env
        .post(
            &format!("/threads/{thread_id}/messages"),
            json!({ "content": "again" }),
        )
        .await["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let input = env.wait_pending(&thread_id, 1).await.remove(0);
    assert_eq!(input["runId"], second.as_str());
    env.reply("/agent/tool-call/skip", ALICE, target(&input))
        .await;
    assert_eq!(env.wait_run_finished(&second).await["status"], "completed");
    // Skipped counts as asked: the third turn does not ask.
    let third = env
        .post(
            &format!("/threads/{thread_id}/messages"),
            json!({ "content": "more" }),
        )
        .await["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(env.wait_run_finished(&third).await["status"], "completed");
    assert_eq!(env.journal_names(&third).await, ["intake:ask", "model:0"]);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_deploy_that_removes_the_intake_does_not_break_a_run_waiting_on_it() {
    let env = TestEnv::start(intake_agent("every-turn")).await;
    let old = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    let input = env.wait_pending(&thread_id, 1).await.remove(0);
    old.stop().await.unwrap();
    // The new deploy's agent has no intake any more.
    let without_intake = Registry::from_toml(
        r#"
[agents.agent]
model = { provider = "scripted", script = [ { text = "Done." } ] }
"#,
    )
    .unwrap();
    let new = env.spawn_worker_of(std::sync::Arc::new(without_intake));
    env.reply(
        "/agent/tool-call/answer",
        ALICE,
        with(target(&input), "answers", json!({ "langs": ["go"] })),
    )
    .await;
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        env.journal_names(&run_id).await,
        ["intake:ask", "intake:answers", "model:0"]
    );
    // The journal holds the set the run asked.
    let journal = env.get(&format!("/runs/{run_id}/journal")).await;
    assert_eq!(journal[0]["value"]["asks"], true);
    assert_eq!(journal[0]["value"]["set"]["questions"][1]["id"], "langs");
    new.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_deploy_that_adds_an_intake_does_not_break_a_run_already_waiting() {
    // Before the deploy: no intake; the run parks on an approval.
    let before = Registry::from_toml(
        r#"
[agents.agent]
tools = ["tool"]
model = { provider = "scripted", script = [
  { tool_calls = [ { id = "c1", name = "tool", arguments = { to = "a@b.c" } } ] },
  { text = "Done." },
] }
[tools.tool]
type = "echo"
requires_confirmation = true
"#,
    )
    .unwrap();
    let env = TestEnv::start(before).await;
    let old = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    let input = env.wait_pending(&thread_id, 1).await.remove(0);
    old.stop().await.unwrap();
    // After it: the same agent asks an intake first.
    let after = Registry::from_toml(&format!(
        r#"
[agents.agent]
tools = ["tool"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "tool", arguments = {{ to = "a@b.c" }} }} ] }},
  {{ text = "Done." }},
] }}
[agents.agent.intake]
when = "every-turn"
questions = {QUESTIONS}
[tools.tool]
type = "echo"
requires_confirmation = true
"#
    ))
    .unwrap();
    let new = env.spawn_worker_of(std::sync::Arc::new(after));
    env.reply("/agent/tool-call/approve", ALICE, target(&input))
        .await;
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert!(!env
        .journal_names(&run_id)
        .await
        .contains(&"intake:ask".to_owned()));
    new.stop().await.unwrap();
    env.finish().await;
}
