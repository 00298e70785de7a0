//! A server's long work (a task, SEP-2663) as a self-parking call: the
//! thread waits (`WAITING_FOR_INPUT`, the run `waiting`) on a row of kind
//! `park` with reason `task` while workers check on the task through
//! delayed messages; the task's questions are a question set; its end
//! resumes the run; a stop cancels it; a worker that dies while it runs
//! leaves it to the next.

use agentenkit_core::QueueMessage;
use agentenkit_tests::*;
use serde_json::{json, Value};

use super::*;

fn researching(arguments: &str) -> String {
    format!(
        r#"
  {{ tool_calls = [ {{ id = "c1", name = "tickets/research", arguments = {arguments} }} ] }},
  {{ text = "Done." }},
"#
    )
}

async fn registry(log: &CallLog, arguments: &str, servers: Option<String>) -> Registry {
    let servers = servers.unwrap_or_else(|| tickets_stdio(log, ""));
    load(&agent_file(
        "\"tickets/research\"",
        &researching(arguments),
        &servers,
    ))
    .await
}

/// The lines of the server's log for `method` (`tasks/get`, …).
fn methods(log: &CallLog, method: &str) -> Vec<Value> {
    log.calls()
        .into_iter()
        .filter(|c| c["method"] == method)
        .collect()
}

/// What the model read of `c1`, parsed when it is JSON.
async fn read_by_model(env: &TestEnv, thread_id: &str) -> Value {
    let content = tool_message(env, thread_id).await;
    let text = content.get("result").cloned().unwrap_or(content);
    match text.as_str() {
        Some(text) => serde_json::from_str(text).unwrap_or(Value::String(text.to_owned())),
        None => text,
    }
}

/// A test's env of the stdio tickets server, a worker, and a turn of the
/// agent calling `research` with `arguments`.
async fn researching_turn(
    log: &CallLog,
    arguments: &str,
) -> (TestEnv, WorkerHandle, String, String) {
    let env = TestEnv::start(registry(log, arguments, None).await).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "research").await;
    (env, worker, thread_id, run_id)
}

/// The `tasks/cancel` the server got, once it got one.
async fn cancels(log: &CallLog) -> Vec<Value> {
    eventually("the task is cancelled", || async {
        let cancels = methods(log, "tasks/cancel");
        (!cancels.is_empty()).then_some(cancels)
    })
    .await
}

/// The `research` calls that started a task.
fn tasks_started(log: &CallLog) -> Vec<Value> {
    log.calls()
        .into_iter()
        .filter(|c| c["tool"] == "research" && c["task"].is_string())
        .collect()
}

#[tokio::test]
async fn a_task_parks_the_thread_and_its_end_resumes_the_run() {
    let log = CallLog::new();
    let (env, worker, thread_id, run_id) =
        researching_turn(&log, r#"{ topic = "printers", seconds = 1.5 }"#).await;

    let wait = waiting_on(&env, &thread_id, "c1~1").await;
    assert_eq!(wait["kind"], "park", "{wait}");
    assert_eq!(wait["reason"], "task", "{wait}");
    assert_eq!(wait["arguments"]["server"], "tickets", "{wait}");
    assert_eq!(wait["arguments"]["status"], "working", "{wait}");
    assert!(wait["expiresAt"].is_string(), "{wait}");
    let task = wait["arguments"]["taskId"].as_str().unwrap().to_owned();
    let run = env.get(&format!("/runs/{run_id}")).await;
    assert_eq!(run["status"], "waiting", "no worker holds it: {run}");

    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(
        read_by_model(&env, &thread_id).await,
        json!({ "topic": "printers", "sources": null, "action": null })
    );
    assert_eq!(log.calls_of("research").len(), 1, "called once");
    let checks = methods(&log, "tasks/get");
    assert!(
        checks.len() >= 2 && checks.iter().all(|c| c["task"] == task.as_str()),
        "checked on while it worked, then read once more: {checks:?}"
    );
    // The run's journal holds the wait as a round of the call.
    let names = env.journal_names(&run_id).await;
    assert!(names.contains(&"asked:c1:1".to_owned()), "{names:?}");
    assert_eq!(names.iter().filter(|n| *n == "exec:c1").count(), 1);
    let metrics = env.metrics_text().await;
    assert!(
        metrics.contains("agentenkit_mcp_tasks_total{server=\"tickets\"}"),
        "{metrics}"
    );
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_tasks_question_is_a_question_set_and_the_answer_goes_back_by_update() {
    let log = CallLog::new();
    let (env, worker, thread_id, run_id) =
        researching_turn(&log, r#"{ topic = "lasers", seconds = 0.3, ask = true }"#).await;

    let asked = waiting_on(&env, &thread_id, "c1~2").await;
    assert_eq!(asked["kind"], "ask", "{asked}");
    let (status, delivered) = env
        .reply(
            "/agent/tool-call/answer",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1~2", "answers": { "sources": ["news"] } }),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{delivered}");
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(
        read_by_model(&env, &thread_id).await,
        json!({ "topic": "lasers", "sources": "news", "action": "accept" })
    );
    let updates = methods(&log, "tasks/update");
    assert_eq!(updates.len(), 1, "{updates:?}");
    assert_eq!(
        updates[0]["responses"],
        json!({ "sources": { "action": "accept", "content": { "sources": "news" } } })
    );
    assert_eq!(log.calls_of("research").len(), 1, "called once");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_failed_task_is_a_failure_the_model_reads() {
    let log = CallLog::new();
    let (env, worker, thread_id, run_id) =
        researching_turn(&log, r#"{ topic = "fail", seconds = 0.2 }"#).await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let read = tool_message(&env, &thread_id).await;
    let error = read["error"].as_str().unwrap_or_default();
    assert!(error.contains("failed: the library is closed"), "{read}");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn stopping_the_thread_while_a_task_runs_cancels_the_task() {
    let log = CallLog::new();
    let (env, worker, thread_id, run_id) =
        researching_turn(&log, r#"{ topic = "slow", seconds = 600 }"#).await;
    let wait = waiting_on(&env, &thread_id, "c1~1").await;
    let task = wait["arguments"]["taskId"].clone();
    env.post(&format!("/threads/{thread_id}/stop"), json!({}))
        .await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "cancelled");
    let cancelled = cancels(&log).await;
    assert_eq!(cancelled.len(), 1, "{cancelled:?}");
    assert_eq!(cancelled[0]["task"], task);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_task_outlives_the_worker_that_started_it() {
    let log = CallLog::new();
    let server = HttpTickets::start(&log).await;
    let servers = format!(
        "[mcp.tickets]\ntransport = \"http\"\nurl = {:?}\n",
        server.url
    );
    let env = TestEnv::start(
        registry(
            &log,
            r#"{ topic = "durable", seconds = 1.5 }"#,
            Some(servers),
        )
        .await,
    )
    .await;
    // The first worker dies right after the wait was journaled, before
    // the park: the next one parks it, without starting another task.
    let doomed = env.spawn_crashing_worker("asked:c1:1");
    let (thread_id, run_id) = env.start_turn("agent", "research").await;
    assert!(doomed.died().await.is_err(), "the crash point fired");
    let rescuer = env.spawn_worker();
    waiting_on(&env, &thread_id, "c1~1").await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    assert_eq!(
        read_by_model(&env, &thread_id).await,
        json!({ "topic": "durable", "sources": null, "action": null })
    );
    let started = tasks_started(&log);
    assert_eq!(started.len(), 1, "one task: {started:?}");
    rescuer.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn stopping_the_thread_while_a_tasks_question_waits_cancels_the_task() {
    let log = CallLog::new();
    let (env, worker, thread_id, run_id) =
        researching_turn(&log, r#"{ topic = "optics", seconds = 0.2, ask = true }"#).await;
    waiting_on(&env, &thread_id, "c1~2").await;
    let task = methods(&log, "tasks/get")[0]["task"].clone();
    env.post(&format!("/threads/{thread_id}/stop"), json!({}))
        .await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "cancelled");
    let cancelled = cancels(&log).await;
    assert_eq!(cancelled.len(), 1, "{cancelled:?}");
    assert_eq!(cancelled[0]["task"], task);
    assert!(methods(&log, "tasks/update").is_empty(), "nobody answered");
    worker.stop().await.unwrap();
    env.finish().await;
}

/// The agent file of `registry` with the agent's `hitl_ttl_ms`.
async fn registry_with_ttl(log: &CallLog, arguments: &str, ttl_ms: u64) -> Registry {
    let text = agent_file(
        "\"tickets/research\"",
        &researching(arguments),
        &tickets_stdio(log, ""),
    )
    .replacen(
        "[agents.agent]\n",
        &format!("[agents.agent]\nhitl_ttl_ms = {ttl_ms}\n"),
        1,
    );
    load(&text).await
}

#[tokio::test]
async fn a_task_past_its_wait_is_cancelled_and_the_model_reads_why() {
    let log = CallLog::new();
    let env = TestEnv::start(
        registry_with_ttl(&log, r#"{ topic = "slow", seconds = 600 }"#, 1_500).await,
    )
    .await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "research slowly").await;
    let wait = waiting_on(&env, &thread_id, "c1~1").await;
    let task = wait["arguments"]["taskId"].clone();
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let read = tool_message(&env, &thread_id).await;
    let error = read["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("did not finish before its wait expired; the task was cancelled"),
        "{read}"
    );
    let cancels = methods(&log, "tasks/cancel");
    assert_eq!(cancels.len(), 1, "{cancels:?}");
    assert_eq!(cancels[0]["task"], task);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_respond_to_a_task_wait_makes_the_call_look_and_a_rejection_gives_the_task_up() {
    let log = CallLog::new();
    let (env, worker, thread_id, run_id) =
        researching_turn(&log, r#"{ topic = "slow", seconds = 600 }"#).await;
    let wait = waiting_on(&env, &thread_id, "c1~1").await;
    let task = wait["arguments"]["taskId"].clone();

    // Somebody says it is done: the call looks, finds it working, waits
    // again (a round of its own), and the model has read nothing.
    let (status, woke) = env
        .reply(
            "/agent/hitl/respond",
            ALICE,
            json!({ "threadId": thread_id, "toolCallId": "c1~1", "approved": true, "payload": { "done": true } }),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{woke}");
    let again = waiting_on(&env, &thread_id, "c1~2").await;
    assert_eq!(again["reason"], "task", "{again}");
    assert_eq!(again["arguments"]["taskId"], task, "the same task: {again}");
    assert!(methods(&log, "tasks/cancel").is_empty());

    // A rejection gives it up.
    let (status, stopped) = env
        .reply(
            "/agent/hitl/respond",
            ALICE,
            json!({ "threadId": thread_id, "toolCallId": "c1~2", "approved": false }),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{stopped}");
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    let read = tool_message(&env, &thread_id).await;
    assert!(
        read["error"]
            .as_str()
            .unwrap_or_default()
            .contains("was stopped by a person; the task was cancelled"),
        "{read}"
    );
    assert_eq!(methods(&log, "tasks/cancel").len(), 1);
    assert_eq!(log.calls_of("research").len(), 1, "one task throughout");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_duplicate_check_is_dropped_and_the_chain_of_checks_never_forks() {
    let log = CallLog::new();
    let (env, worker, thread_id, run_id) =
        researching_turn(&log, r#"{ topic = "slow", seconds = 600 }"#).await;
    waiting_on(&env, &thread_id, "c1~1").await;
    let chain = || async {
        env.rows(
            &format!("SELECT key FROM outbox WHERE key LIKE 'poll:{run_id}:%'"),
            |row| row.get::<_, String>(0),
        )
        .await
    };
    // A few checks in: one message of the chain is due at any time.
    let due = eventually("a few checks were made", || async {
        let keys = chain().await;
        (keys.len() == 1 && !keys[0].contains(":0:") && !keys[0].contains(":1:")).then_some(keys)
    })
    .await;
    // Copies of an earlier check and of the due one arrive (a reaper's
    // re-publish, a redelivery).
    let run: agentenkit_core::RunId = run_id.parse().unwrap();
    for attempt in [0, 1] {
        let copy = QueueMessage::Poll {
            run_id: run,
            tool_call_id: "c1~1".into(),
            attempt,
        };
        env.queue.publish(&copy).await.unwrap();
    }
    let dropped = eventually("the copies were dropped", || async {
        let metrics = env.metrics_text().await;
        metrics
            .lines()
            .find(|l| l.starts_with("agentenkit_tool_polls_total{outcome=\"dropped\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .filter(|n| *n >= 2.0)
    })
    .await;
    assert!(dropped >= 2.0);
    let copy = QueueMessage::from_outbox_key(&due[0]).unwrap();
    env.queue.publish(&copy).await.unwrap();
    // However many copies arrived, one check stays due.
    for _ in 0..10 {
        let keys = chain().await;
        assert!(keys.len() <= 1, "the chain forked: {keys:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_stop_before_the_wait_parked_still_cancels_the_task() {
    let log = CallLog::new();
    let env =
        TestEnv::start(registry(&log, r#"{ topic = "slow", seconds = 600 }"#, None).await).await;
    // The worker dies right after the wait was journaled, before the park;
    // the thread is stopped before another takes the run over.
    let doomed = env.spawn_crashing_worker("asked:c1:1");
    let (thread_id, run_id) = env.start_turn("agent", "research slowly").await;
    assert!(doomed.died().await.is_err(), "the crash point fired");
    env.post(&format!("/threads/{thread_id}/stop"), json!({}))
        .await;
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "cancelled");
    let worker = env.spawn_worker();
    let cancelled = cancels(&log).await;
    let started = tasks_started(&log);
    assert_eq!(cancelled[0]["task"], started[0]["task"]);
    worker.stop().await.unwrap();
    env.finish().await;
}

/// What a terminal's person would be asked: nothing, for a task's wait.
struct NobodyAsked;

#[async_trait::async_trait]
impl agentenkit_runtime::inline::Hooks for NobodyAsked {
    async fn await_approval(
        &self,
        input: &agentenkit_store::PendingInput,
    ) -> agentenkit_core::reply::Verdict {
        panic!("the person at the terminal was asked about {input:?}")
    }
}

#[tokio::test]
async fn in_one_process_a_task_ends_on_its_own_without_asking_the_terminal() {
    let log = CallLog::new();
    let loaded = registry(&log, r#"{ topic = "terminals", seconds = 0.5 }"#, None).await;
    let env = TestEnv::start(loaded.clone()).await;
    // The inline runner: an in-process queue (its delayed checks too) and
    // one worker, as `agentenkit chat` runs.
    let runner = agentenkit_runtime::inline::InlineRunner::start(
        env.store.clone(),
        std::sync::Arc::new(loaded),
        agentenkit_core::Owner("alice".into()),
    );
    let thread = runner.create_thread("agent").await.unwrap();
    let run = runner
        .run_turn(thread, "research terminals", &NobodyAsked)
        .await
        .unwrap();
    assert_eq!(run.status, agentenkit_core::RunStatus::Completed);
    assert_eq!(
        read_by_model(&env, &thread.to_string()).await,
        json!({ "topic": "terminals", "sources": null, "action": null })
    );
    assert_eq!(tasks_started(&log).len(), 1);
    runner.shutdown().await.unwrap();
    env.finish().await;
}
