//! The agent loop on the in-memory engine: each test drives segments the
//! way a worker does (lease, advance, end) with a scripted model and tools
//! in code, and reads what the engine holds after. No Postgres, no broker:
//! these run in milliseconds, and the integration tests run the same loop
//! on the real ones.

mod approvals;
mod budgets;
mod crashes;
mod delegation;
mod rounds;
mod steering;
mod turns;
mod waits;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentenkit_core::canonical::arguments_hash;
use agentenkit_core::questions::QuestionSet;
use agentenkit_core::reply::{reduce, SettledReply, Verdict};
use agentenkit_core::{RunId, RunStatus, ToolCallId, ToolKind};
use agentenkit_store::memory::{Memory, MemoryCall};
use agentenkit_store::MemoryEngine;
use async_trait::async_trait;
use serde_json::{json, Value};

use super::segment::{self, RetryPolicy};
use super::{Checkpointer, CrashPoint, SegmentError};
use crate::tool::{
    ask_questions, await_work, mark_requires_confirmation, park_for_input, Approval, ToolSpec,
};
use crate::{Registry, Tool, ToolContext, ToolError};

/// What a test tool does when it runs.
#[derive(Clone, Copy)]
enum Does {
    /// Answers `{"ran": n}` (its n-th run).
    Answer,
    /// Fails; the model sees the failure.
    Fail,
    /// Cannot run the first `n` times (its service is down), then answers.
    Unavailable(usize),
    /// Parks for a job the first time; answers with the job's payload once
    /// it is answered.
    ParkForJob,
    /// Asks a person one text question a round, `n` rounds, then answers
    /// with the rounds it saw and the last reply.
    Asks(u32),
    /// Waits for work elsewhere (`await_work`, checked first after 500
    /// ms); once woken, answers with how it was woken and its state.
    Awaits,
}

/// What one run of a test tool was given: its arguments and its approval.
type Seen = (Value, Option<Approval>);

/// A tool in code that counts its runs and keeps what it was given.
struct TestTool {
    name: &'static str,
    does: Does,
    runs: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
    keys: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl Tool for TestTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.into(),
            description: String::new(),
            input_schema: json!({
                "type": "object",
                "properties": { "to": { "type": "string" } },
            }),
        }
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<Value, ToolError> {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let approval = ctx.approval().cloned();
        self.keys.lock().unwrap().push(ctx.idempotency_key());
        self.seen
            .lock()
            .unwrap()
            .push((arguments.clone(), approval.clone()));
        match self.does {
            Does::Answer => Ok(json!({ "ran": n })),
            Does::Fail => Err(ToolError::Failed("the mail server said no".into())),
            Does::Unavailable(times) if n <= times => {
                Err(ToolError::Transient("the mail server is down".into()))
            }
            Does::Unavailable(_) => Ok(json!({ "ran": n })),
            Does::ParkForJob => match approval {
                None => Err(park_for_input("render", json!({ "job": 7 }), None)),
                Some(answer) => Ok(json!({ "rendered": answer.payload })),
            },
            Does::Asks(rounds) => {
                let answered = ctx.answers.as_ref().map_or(0, |a| a.round);
                if answered < rounds {
                    return Err(ask_questions(
                        "test",
                        text_question(),
                        json!({ "asked": answered + 1 }),
                    ));
                }
                let last = ctx
                    .answers
                    .as_ref()
                    .map(|a| (format!("{:?}", a.outcome), a.state.clone()));
                Ok(json!({ "rounds": answered, "last": last }))
            }
            Does::Awaits => match &ctx.answers {
                None => Err(await_work(
                    "render",
                    json!({ "job": 7 }),
                    json!({ "waited": 1 }),
                    500,
                    None,
                )),
                Some(woken) => Ok(json!({
                    "woken": format!("{:?}", woken.outcome),
                    "state": woken.state,
                })),
            },
        }
    }
}

/// One required text question, `q`.
fn text_question() -> QuestionSet {
    QuestionSet::parse(&json!({ "questions": [
        { "id": "q", "prompt": "Why?", "kind": "text", "required": true, "options": [], "defaults": [] } ] }))
    .expect("a valid set")
}

/// A tool's counters, as a test reads them.
#[derive(Clone, Default)]
struct Counters {
    runs: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
    keys: Arc<Mutex<Vec<String>>>,
}

impl Counters {
    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    /// The arguments and the approval of each run, in order.
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The idempotency key of each run, in order.
    fn keys(&self) -> Vec<String> {
        self.keys.lock().unwrap().clone()
    }

    fn tool(&self, name: &'static str, does: Does) -> TestTool {
        TestTool {
            name,
            does,
            runs: self.runs.clone(),
            seen: self.seen.clone(),
            keys: self.keys.clone(),
        }
    }
}

/// The engine, the registry and the tools' counters of one test.
struct Harness {
    engine: MemoryEngine,
    registry: Registry,
    tool: Counters,
    /// Where the next segment's worker dies, if anywhere.
    crash: Option<CrashPoint>,
    retry: RetryPolicy,
}

/// An agent `agent` with the tool `send` (doing `does`, needing approval
/// when `approval`), playing `script` (TOML items), with `extra` added to
/// its table (`ask = true`, an intake, sub-agents …) and `more` after it.
fn harness(does: Does, approval: bool, script: &str, extra: &str, more: &str) -> Harness {
    let tool = Counters::default();
    let send: Arc<dyn Tool> = Arc::new(tool.tool("send", does));
    let send = if approval {
        mark_requires_confirmation(send)
    } else {
        send
    };
    let registry = Registry::from_toml_with_tools(
        &format!(
            r#"
[agents.agent]
system = "test agent"
tools = ["send"]
model = {{ provider = "scripted", script = [ {script} ] }}
{extra}
{more}
"#
        ),
        vec![send],
    )
    .expect("the test's agent file");
    Harness {
        engine: MemoryEngine::new(),
        registry,
        tool,
        crash: None,
        retry: RetryPolicy {
            max_attempts: 3,
            backoff: Duration::ZERO,
            max_takeovers: 3,
        },
    }
}

/// The script: call `send` as `c1`, then say "Done.".
const SEND_THEN_DONE: &str = r#"
  { tool_calls = [ { id = "c1", name = "send", arguments = { to = "a@b.c" } } ] },
  { text = "Done." },
"#;

impl Harness {
    /// One segment of `run`, as a worker runs it: `None` when the run was
    /// not runnable (waiting or finished).
    async fn segment(&self, run: RunId) -> Option<Result<(), SegmentError>> {
        let ctx = self.engine.lease(run)?;
        let mut cp = Checkpointer::new(&self.engine, &ctx, self.crash.as_ref());
        let advanced = segment::advance(&self.registry, &self.retry, &ctx, &mut cp).await;
        Some(segment::end(&self.registry, &ctx, &mut cp, advanced).await)
    }

    /// Segments of `run` until it waits or ends; each must succeed.
    async fn drive(&self, run: RunId) -> Memory {
        while let Some(ended) = self.segment(run).await {
            ended.expect("the segment ends cleanly");
        }
        self.engine.snapshot()
    }

    /// A new thread's turn with `content`, driven until it waits or ends.
    async fn turn(&self, content: &str) -> (RunId, Memory) {
        let run = self.engine.start_turn("agent", content);
        (run, self.drive(run).await)
    }

    /// A person answers `call` of `run` with `verdict`, as the store
    /// would record it.
    fn answer(&self, run: RunId, call: &str, verdict: Verdict) {
        let memory = self.engine.snapshot();
        let open = memory.call(run, call).expect("the call");
        self.engine
            .answer(run, &ToolCallId(call.into()), reply(open, &verdict))
            .expect("the answer settles the call");
    }

    /// Sets where the next segments' worker dies.
    fn crash_at(&mut self, point: &'static str) {
        self.crash = Some(Arc::new(move |at: &str| at == point));
    }
}

/// The reply `verdict` settles `call` with, as the store records it.
fn reply(call: &MemoryCall, verdict: &Verdict) -> SettledReply {
    let mut reply = reduce(call.kind, verdict, &call.arguments).expect("a reply of its shape");
    reply.answered_by = Some("owner".into());
    reply.answered_at = Some(chrono::Utc::now());
    reply.arguments_hash = Some(arguments_hash(&call.arguments));
    reply
}

fn status(memory: &Memory, run: RunId) -> RunStatus {
    memory.run(run).expect("the run").status
}

fn output(memory: &Memory, run: RunId) -> Option<String> {
    memory.run(run).expect("the run").output.clone()
}

/// The tool messages `run` wrote, their content parsed.
fn tool_results(memory: &Memory, run: RunId) -> Vec<Value> {
    memory
        .messages
        .iter()
        .filter(|(_, from, _)| *from == run)
        .filter_map(|(_, _, message)| match message {
            agentenkit_core::conversation::Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

fn kind_of(memory: &Memory, run: RunId, call: &str) -> ToolKind {
    memory.call(run, call).expect("the call").kind
}

/// What the model read of `call`, which must have failed.
fn failure_of(memory: &Memory, run: RunId, call: &str) -> String {
    let state = &memory.call(run, call).expect("the call").state;
    assert!(
        matches!(state, agentenkit_core::CallState::Failed { .. }),
        "{state:?}"
    );
    state.result().map(Value::to_string).unwrap_or_default()
}
