//! Messages sent to a run while it works (`onActive: "steer"`) join it at
//! its next model call, once, whatever crashes; a run nobody steers
//! journals what it did before.

use std::sync::atomic::{AtomicUsize, Ordering};

use agentenkit_core::conversation::{Message, ModelResponse};
use agentenkit_core::{EventType, RunStatus};

use super::*;
use crate::model::{Model, ModelError, ModelRequest};
use crate::{Agent, ScriptedModel};

/// A scripted model that keeps what each call was sent.
struct Recording {
    inner: ScriptedModel,
    sent: Sent,
    calls: Arc<AtomicUsize>,
}

#[async_trait]
impl Model for Recording {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.sent.lock().unwrap().push(request.messages.to_vec());
        self.inner.complete(request).await
    }
}

/// What each model call was sent, in order.
type Sent = Arc<Mutex<Vec<Vec<Message>>>>;

/// A call of `send` for each of `calls`, then "Done.", by a model that
/// records what it is sent.
fn recorded(h: &mut Harness, calls_made: &[&str]) -> (Sent, Arc<AtomicUsize>) {
    let mut script: Vec<crate::model::ScriptEntry> = calls_made
        .iter()
        .map(|id| {
            serde_json::from_value(json!({
                "tool_calls": [ { "id": id, "name": "send", "arguments": { "to": "a" } } ]
            }))
            .unwrap()
        })
        .collect();
    script.push(serde_json::from_value(json!({ "text": "Done." })).unwrap());
    let sent = Arc::new(Mutex::new(Vec::new()));
    let calls = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Recording {
        inner: ScriptedModel::new(script),
        sent: sent.clone(),
        calls: calls.clone(),
    });
    let send = h.registry.tool("send").expect("send").tool.clone();
    h.registry = Registry::new()
        .with_tool(send)
        .unwrap()
        .with_agent(Agent::new("agent", model).tool("send"));
    (sent, calls)
}

fn user(content: &str) -> Message {
    Message::User {
        content: content.into(),
    }
}

#[tokio::test]
async fn a_parked_run_takes_the_messages_sent_to_it_at_its_next_model_call() {
    let mut h = harness(Does::Answer, true, SEND_THEN_DONE, "", "");
    let (sent, _) = recorded(&mut h, &["c1"]);
    let (run, memory) = h.turn("send it").await;
    assert_eq!(status(&memory, run), RunStatus::Waiting);
    h.engine.steer(run, "also cc Dana");
    h.engine.steer(run, "and Bo");
    h.answer(run, "c1", Verdict::approve());
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(
        memory.journal_names(run),
        [
            "model:0",
            "persist:toolcall:c1",
            &format!("tool:{run}:c1"),
            "exec:c1",
            "steer:1",
            "model:1"
        ]
    );
    // After the step's results, in the order sent, once.
    let last = sent.lock().unwrap().last().cloned().unwrap();
    let n = last.len();
    assert!(matches!(last[n - 3], Message::Tool { .. }), "{last:?}");
    assert_eq!(last[n - 2..], [user("also cc Dana"), user("and Bo")]);
    assert!(memory.steering.is_empty(), "taken out of the queue");
    let joined: Vec<&Message> = memory
        .messages
        .iter()
        .filter(|(_, from, m)| *from == run && matches!(m, Message::User { .. }))
        .map(|(_, _, m)| m)
        .collect();
    assert_eq!(
        joined,
        [&user("send it"), &user("also cc Dana"), &user("and Bo")]
    );
    let thread = memory.run(run).unwrap().thread;
    let messages = memory
        .event_types(thread)
        .into_iter()
        .filter(|t| *t == EventType::Message)
        .count();
    assert_eq!(messages, 4, "two answers and two steering messages");
}

#[tokio::test]
async fn a_worker_dying_before_the_steering_commit_leaves_it_to_the_next_once() {
    let mut h = harness(Does::Answer, true, SEND_THEN_DONE, "", "");
    let (sent, _) = recorded(&mut h, &["c1"]);
    let (run, _) = h.turn("send it").await;
    h.engine.steer(run, "also cc Dana");
    h.answer(run, "c1", Verdict::approve());
    // The steering joins in the run's last commit, with its model call.
    // (Two deaths: a third at one step would fail the run as poison.)
    for point in ["before:steer:1", "before:finish"] {
        h.crash_at(point);
        match h.segment(run).await {
            Some(Err(SegmentError::Crashed)) => {}
            other => panic!("expected the crash at {point}, got {other:?}"),
        }
        assert_eq!(
            h.engine.snapshot().steering.len(),
            1,
            "nothing taken at {point}"
        );
    }
    h.crash = None;
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(h.tool.runs(), 1);
    let last = sent.lock().unwrap().last().cloned().unwrap();
    let steered = last.iter().filter(|m| **m == user("also cc Dana")).count();
    assert_eq!(steered, 1, "{last:?}");
    assert!(memory.steering.is_empty());
}

#[tokio::test]
async fn a_replay_reads_the_steering_back_and_asks_the_model_nothing_again() {
    let mut h = harness(Does::Answer, true, SEND_THEN_DONE, "", "");
    let (sent, calls) = recorded(&mut h, &["c1", "c2"]);
    let (run, _) = h.turn("send it").await;
    h.engine.steer(run, "also cc Dana");
    h.answer(run, "c1", Verdict::approve());
    // The steering joins at model call 1, which asks for c2: parked again.
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Waiting);
    h.answer(run, "c2", Verdict::approve());
    // The next segment replays `steer:1` and `model:1` from the journal.
    let memory = h.drive(run).await;
    assert_eq!(status(&memory, run), RunStatus::Completed);
    assert_eq!(calls.load(Ordering::SeqCst), 3, "each model call made once");
    let last = sent.lock().unwrap().last().cloned().unwrap();
    let steered = last.iter().filter(|m| **m == user("also cc Dana")).count();
    assert_eq!(
        steered, 1,
        "the replayed conversation holds it once: {last:?}"
    );
    let names = memory.journal_names(run);
    assert_eq!(names.iter().filter(|n| n.starts_with("steer:")).count(), 1);
}

#[tokio::test]
async fn a_run_nobody_steers_journals_and_commits_as_before() {
    let h = harness(Does::Answer, true, SEND_THEN_DONE, "", "");
    let (run, _) = h.turn("send it").await;
    h.answer(run, "c1", Verdict::approve());
    let memory = h.drive(run).await;
    assert!(!memory
        .journal_names(run)
        .iter()
        .any(|n| n.starts_with("steer:")));
    // A message steering another run is not this one's.
    let other = h.engine.start_turn("agent", "other");
    h.engine.steer(other, "for the other one");
    assert_eq!(h.engine.snapshot().steering.len(), 1);
}
