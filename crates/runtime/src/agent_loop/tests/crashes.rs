//! A worker dies at each named point of a segment; the next one carries on
//! from the journal without repeating an effect it recorded.

use std::sync::atomic::{AtomicUsize, Ordering};

use agentenkit_core::{EventType, RunStatus};

use super::*;
use crate::model::{Model, ModelError, ModelRequest};
use crate::{Agent, ScriptedModel};

/// Segments of `run` until one crashes at the harness's crash point.
async fn crash_once(h: &Harness, run: RunId) {
    match h.segment(run).await {
        Some(Err(SegmentError::Crashed)) => {}
        other => panic!("expected the crash point, got {other:?}"),
    }
}

/// After the crash: the crash point gone, the next workers carry on.
async fn recover(mut h: Harness, run: RunId) -> (Harness, Memory) {
    h.crash = None;
    let memory = h.drive(run).await;
    (h, memory)
}

#[tokio::test]
async fn a_crash_before_the_tool_runs_runs_it_once_on_the_next_lease() {
    let mut h = harness(Does::Answer, false, SEND_THEN_DONE, "", "");
    let run = h.engine.start_turn("agent", "send it");
    h.crash_at("invoke:c1");
    crash_once(&h, run).await;
    assert_eq!(h.tool.runs(), 0);
    let (h, memory) = recover(h, run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(h.tool.runs(), 1);
    assert_eq!(
        memory.run(run).unwrap().takeovers,
        0,
        "the taken-over step's progress cleared its count"
    );
}

#[tokio::test]
async fn workers_dying_at_different_steps_with_progress_between_do_not_fail_the_run() {
    let script = r#"
      { tool_calls = [ { id = "c1", name = "send", arguments = { to = "a" } } ] },
      { tool_calls = [ { id = "c2", name = "send", arguments = { to = "b" } } ] },
      { tool_calls = [ { id = "c3", name = "send", arguments = { to = "c" } } ] },
      { text = "Done." },
    "#;
    let mut h = harness(Does::Answer, false, script, "", "");
    let run = h.engine.start_turn("agent", "send three");
    // Each point kills a worker once: as many deaths as the limit allows,
    // each at a step after the last one's progress.
    let died = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = died.clone();
    h.crash = Some(Arc::new(move |at: &str| {
        let fatal = matches!(at, "invoke:c1" | "invoke:c2" | "invoke:c3");
        let mut died = seen.lock().unwrap();
        let first = fatal && !died.iter().any(|d| d == at);
        if first {
            died.push(at.to_owned());
        }
        first
    }));
    for _ in 0..3 {
        crash_once(&h, run).await;
    }
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(died.lock().unwrap().len(), 3, "three workers died");
    assert_eq!(h.tool.runs(), 3, "each call ran once");
}

#[tokio::test]
async fn a_crash_after_the_tools_result_committed_does_not_run_it_again() {
    let mut h = harness(Does::Answer, false, SEND_THEN_DONE, "", "");
    let run = h.engine.start_turn("agent", "send it");
    h.crash_at("exec:c1");
    crash_once(&h, run).await;
    assert_eq!(h.tool.runs(), 1);
    let (h, memory) = recover(h, run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(h.tool.runs(), 1, "the result came from the journal");
    assert_eq!(tool_results(&memory, run), [json!({ "ran": 1 })]);
}

#[tokio::test]
async fn a_crash_between_the_tool_and_its_commit_runs_it_again_under_the_same_key() {
    let mut h = harness(Does::Answer, false, SEND_THEN_DONE, "", "");
    let run = h.engine.start_turn("agent", "send it");
    h.crash_at("before:exec:c1");
    crash_once(&h, run).await;
    let (h, memory) = recover(h, run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(
        h.tool.runs(),
        2,
        "at least once: nothing recorded the first"
    );
    let keys = h.tool.keys();
    assert_eq!(keys[0], keys[1], "both runs carry one idempotency key");
    assert_eq!(
        tool_results(&memory, run),
        [json!({ "ran": 2 })],
        "one result is kept"
    );
}

#[tokio::test]
async fn a_crash_before_the_models_answer_committed_asks_the_model_again() {
    let mut h = harness(Does::Answer, false, SEND_THEN_DONE, "", "");
    let run = h.engine.start_turn("agent", "send it");
    h.crash_at("before:model:0");
    crash_once(&h, run).await;
    assert!(h.engine.snapshot().journal_names(run).is_empty());
    let (h, memory) = recover(h, run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(h.tool.runs(), 1);
}

#[tokio::test]
async fn a_crash_right_after_the_park_leaves_one_open_request() {
    let mut h = harness(Does::Answer, true, SEND_THEN_DONE, "", "");
    let run = h.engine.start_turn("agent", "send it");
    h.crash_at("park");
    crash_once(&h, run).await;
    h.crash = None;
    assert!(
        h.segment(run).await.is_none(),
        "the park committed: the run waits"
    );
    let memory = h.engine.snapshot();
    let thread = memory.run(run).unwrap().thread;
    let asked = memory
        .event_types(thread)
        .into_iter()
        .filter(|t| *t == EventType::InputRequired)
        .count();
    assert_eq!(asked, 1);
    h.answer(run, "c1", Verdict::approve());
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(h.tool.runs(), 1);
}

#[tokio::test]
async fn a_crash_before_the_run_finishes_finishes_it_once() {
    let mut h = harness(Does::Answer, false, SEND_THEN_DONE, "", "");
    let run = h.engine.start_turn("agent", "send it");
    h.crash_at("before:finish");
    crash_once(&h, run).await;
    assert_eq!(status(&h.engine.snapshot(), run), RunStatus::Running);
    let (h, memory) = recover(h, run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(h.tool.runs(), 1);
    let thread = memory.run(run).unwrap().thread;
    let completed = memory
        .event_types(thread)
        .into_iter()
        .filter(|t| *t == EventType::RunCompleted)
        .count();
    assert_eq!(completed, 1);
}

#[tokio::test]
async fn a_step_that_kills_every_worker_fails_the_run_after_the_takeovers() {
    let mut h = harness(Does::Answer, false, SEND_THEN_DONE, "", "");
    let run = h.engine.start_turn("agent", "send it");
    h.crash_at("invoke:c1");
    for _ in 0..h.retry.max_takeovers {
        crash_once(&h, run).await;
    }
    h.segment(run)
        .await
        .expect("runnable")
        .expect("the failure is recorded");
    let memory = h.engine.snapshot();
    assert_eq!(status(&memory, run), RunStatus::Failed);
    assert_eq!(h.tool.runs(), 0);
}

#[tokio::test]
async fn a_worker_whose_lease_was_taken_over_writes_nothing() {
    let h = harness(Does::Answer, false, SEND_THEN_DONE, "", "");
    let run = h.engine.start_turn("agent", "send it");
    let stale = h.engine.lease(run).expect("queued");
    // Its lease ran out: another worker took the run over.
    let _current = h.engine.lease(run).expect("taken over");
    let before = h.engine.snapshot();
    let mut cp = Checkpointer::new(&h.engine, &stale, None);
    let advanced = segment::advance(&h.registry, &h.retry, &stale, &mut cp).await;
    assert!(
        matches!(advanced, Err(SegmentError::LeaseLost)),
        "{advanced:?}"
    );
    let after = h.engine.snapshot();
    assert_eq!(after.commits, before.commits);
    assert!(after.refused_commits > before.refused_commits);
    assert!(after.journal_names(run).is_empty());
}

/// A model that counts how often it is asked.
struct Counted {
    inner: ScriptedModel,
    calls: Arc<AtomicUsize>,
}

#[async_trait]
impl Model for Counted {
    async fn complete(
        &self,
        request: ModelRequest<'_>,
    ) -> Result<agentenkit_core::conversation::ModelResponse, ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.complete(request).await
    }
}

#[tokio::test]
async fn a_resumed_run_replays_the_models_answers_from_the_journal() {
    let script: Vec<crate::model::ScriptEntry> = vec![
        serde_json::from_value(json!({
            "tool_calls": [ { "id": "c1", "name": "send", "arguments": { "to": "a" } } ]
        }))
        .unwrap(),
        serde_json::from_value(json!({ "text": "Done." })).unwrap(),
    ];
    let calls = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Counted {
        inner: ScriptedModel::new(script),
        calls: calls.clone(),
    });
    let mut h = harness(Does::Answer, true, SEND_THEN_DONE, "", "");
    let send = h.registry.tool("send").expect("send").tool.clone();
    h.registry = Registry::new()
        .with_tool(send)
        .unwrap()
        .with_agent(Agent::new("agent", model).tool("send"));
    let (run, _) = h.turn("send it").await;
    h.answer(run, "c1", Verdict::approve());
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(calls.load(Ordering::SeqCst), 2, "model:0 was read back");
}
