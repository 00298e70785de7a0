//! The load: runs of six kinds, each driven by a client that answers its
//! requests the way people and webhooks do — late, twice at once, or for
//! and against in the same moment — and records every answer it sent.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::task::JoinSet;

use super::client::{Api, Rng};

/// How often a client reads its thread while waiting.
const POLL: Duration = Duration::from_millis(200);

/// What a run does, by its agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scenario {
    /// One approval.
    Single,
    /// Two approvals in one step.
    Siblings,
    /// A job that parks itself; a webhook answers with `respond`.
    Job,
    /// Two sub-agents in one step, each waiting for an approval.
    SubAgents,
    /// A question set before the work starts.
    Questions,
    /// An approval nobody answers: it expires.
    Expiry,
}

/// The mix, repeated: 6 single, 3 siblings, 3 jobs, 3 sub-agent pairs, 2
/// question sets, 3 expiries in every 20 runs.
const MIX: [Scenario; 20] = {
    use Scenario::*;
    [
        Single, Siblings, Job, SubAgents, Expiry, Single, Questions, Single, Siblings, Job, Single,
        SubAgents, Expiry, Single, Job, Questions, Siblings, Single, SubAgents, Expiry,
    ]
};

impl Scenario {
    pub fn of_run(index: usize) -> Scenario {
        MIX[index % MIX.len()]
    }

    pub fn agent(self) -> &'static str {
        match self {
            Scenario::Single => "single",
            Scenario::Siblings => "siblings",
            Scenario::Job => "job",
            Scenario::SubAgents => "parent",
            Scenario::Questions => "asker",
            Scenario::Expiry => "expiring",
        }
    }
}

/// The agent file of the chaos run.
pub fn agent_file(tool_base: &str, expiry_ttl: Duration) -> String {
    let expiry_ms = expiry_ttl.as_millis();
    format!(
        r#"# Written by agentenkit-chaos for one run.
[agents.single]
hitl_ttl_ms = 600000
tools = ["send"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "send", arguments = {{ to = "single" }} }} ] }},
  {{ text = "Done." }},
] }}

[agents.siblings]
hitl_ttl_ms = 600000
tools = ["send"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [
      {{ id = "c1", name = "send", arguments = {{ to = "first" }} }},
      {{ id = "c2", name = "send", arguments = {{ to = "second" }} }},
  ] }},
  {{ text = "Done." }},
] }}

[agents.job]
hitl_ttl_ms = 600000
tools = ["job"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "j1", name = "job", arguments = {{ frame = 1 }} }} ] }},
  {{ text = "Done." }},
] }}

[agents.parent]
subagents = ["left", "right"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [
      {{ id = "d1", name = "left", arguments = {{ task = "left" }} }},
      {{ id = "d2", name = "right", arguments = {{ task = "right" }} }},
  ] }},
  {{ text = "Done." }},
] }}

[agents.left]
hitl_ttl_ms = 600000
tools = ["send"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "l1", name = "send", arguments = {{ to = "left" }} }} ] }},
  {{ text = "left done" }},
] }}

[agents.right]
hitl_ttl_ms = 600000
tools = ["send"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "r1", name = "send", arguments = {{ to = "right" }} }} ] }},
  {{ text = "right done" }},
] }}

[agents.asker]
model = {{ provider = "scripted", script = [ {{ text = "Done." }} ] }}

[agents.asker.intake]
preamble = "Two questions before I start."
when = "thread-start"
questions = [
  {{ id = "scope", prompt = "How wide?", options = [ {{ value = "module", label = "This module" }}, {{ value = "repo", label = "The repository" }} ], defaults = ["module"] }},
  {{ id = "depth", prompt = "How deep?", options = [ {{ value = "quick", label = "Quick" }}, {{ value = "thorough", label = "Thorough" }} ], defaults = ["quick"] }},
]

[agents.expiring]
hitl_ttl_ms = {expiry_ms}
tools = ["send"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "send", arguments = {{ to = "nobody" }} }} ] }},
  {{ text = "Done." }},
] }}

[tools.send]
type = "http"
url = "{tool_base}/send"
requires_confirmation = true
timeout_ms = 10000

[tools.job]
type = "http"
url = "{tool_base}/job"
timeout_ms = 10000
"#
    )
}

/// What a client sent for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    Approve,
    Reject,
    Answer,
    Skip,
}

impl Sent {
    /// Whether the settled reply should say `approved: true`.
    pub fn approves(self) -> bool {
        matches!(self, Sent::Approve | Sent::Answer)
    }
}

/// One answer a client sent, and what came back.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub run_id: String,
    pub tool_call_id: String,
    pub sent: Sent,
    /// The HTTP status, `None` when the client gave up.
    pub status: Option<u16>,
    pub delivered: Option<bool>,
}

/// One run as its client saw it.
#[derive(Debug, Clone)]
pub struct RunRecord {
    pub index: usize,
    pub scenario: Scenario,
    pub thread_id: Option<String>,
    pub run_id: Option<String>,
    /// The requests as first seen in `pendingInputs`.
    pub seen: Vec<Value>,
    pub attempts: Vec<Attempt>,
    /// The root run's final status, when it reached one.
    pub finished: Option<String>,
    /// Why the client stopped early (it gave up on the API).
    pub error: Option<String>,
}

/// Drives run `index` from the new thread to its end (or `deadline`).
pub async fn drive(api: Arc<Api>, index: usize, seed: u64, deadline: Instant) -> RunRecord {
    let scenario = Scenario::of_run(index);
    let mut record = RunRecord {
        index,
        scenario,
        thread_id: None,
        run_id: None,
        seen: Vec::new(),
        attempts: Vec::new(),
        finished: None,
        error: None,
    };
    let mut answering = JoinSet::new();
    let outcome = follow(&api, &mut record, seed, deadline, &mut answering).await;
    while let Some(attempts) = answering.join_next().await {
        record.attempts.extend(attempts.unwrap_or_default());
    }
    if let Err(e) = outcome {
        record.error = Some(format!("{e:#}"));
    }
    record
}

async fn follow(
    api: &Arc<Api>,
    record: &mut RunRecord,
    seed: u64,
    deadline: Instant,
    answering: &mut JoinSet<Vec<Attempt>>,
) -> anyhow::Result<()> {
    let (status, thread) = api
        .post("/threads", &json!({ "agent": record.scenario.agent() }))
        .await?;
    anyhow::ensure!(status == 201, "POST /threads: {status} {thread}");
    let thread_id = text(&thread["id"])?;
    record.thread_id = Some(thread_id.clone());
    let (status, started) = api
        .post(
            &format!("/threads/{thread_id}/messages"),
            &json!({ "content": "go" }),
        )
        .await?;
    let run_id = match status {
        202 => text(&started["runId"])?,
        // A retry of a start that had gone through (its answer was lost).
        409 => text(&api.get(&format!("/threads/{thread_id}")).await?.1["currentRunId"])?,
        _ => anyhow::bail!("POST /threads/{thread_id}/messages: {status} {started}"),
    };
    record.run_id = Some(run_id.clone());
    let mut handled = HashSet::new();
    let mut rng = Rng::new(seed ^ (record.index as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
    while Instant::now() < deadline {
        let (_, view) = api.get(&format!("/threads/{thread_id}")).await?;
        for input in view["pendingInputs"].as_array().into_iter().flatten() {
            let key = (
                input["runId"].as_str().unwrap_or_default().to_owned(),
                input["toolCallId"].as_str().unwrap_or_default().to_owned(),
            );
            if handled.insert(key) {
                record.seen.push(input.clone());
                let plan = Plan::choose(record.scenario, input, &mut rng);
                if !plan.is_empty() {
                    answering.spawn(answer(api.clone(), thread_id.clone(), input.clone(), plan));
                }
            }
        }
        if view["status"] == "IDLE" {
            let (_, run) = api.get(&format!("/runs/{run_id}")).await?;
            let status = run["status"].as_str().unwrap_or_default();
            if matches!(status, "completed" | "failed" | "cancelled") {
                record.finished = Some(status.to_owned());
                return Ok(());
            }
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

fn text(value: &Value) -> anyhow::Result<String> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("expected a string, got {value}"))
}

/// How a request will be answered: each entry is sent at the same moment
/// (after `delay`), by a different client; `by_thread` uses the webhook's
/// `respond` instead of the `/agent/tool-call/*` route.
#[derive(Debug, Clone)]
struct Plan {
    delay: Duration,
    sends: Vec<Sent>,
    by_thread: bool,
}

impl Plan {
    fn is_empty(&self) -> bool {
        self.sends.is_empty()
    }

    fn choose(scenario: Scenario, input: &Value, rng: &mut Rng) -> Plan {
        // Most people answer soon; some much later, so that answers also
        // land while the broker or the database is away.
        let delay = if rng.chance(80) {
            rng.between(Duration::ZERO, Duration::from_millis(400))
        } else {
            rng.between(Duration::from_secs(1), Duration::from_secs(5))
        };
        let twice = rng.chance(25);
        let mut sends = match input["kind"].as_str().unwrap_or_default() {
            _ if scenario == Scenario::Expiry => Vec::new(),
            "ask" => vec![if rng.chance(80) {
                Sent::Answer
            } else {
                Sent::Skip
            }],
            // A job's webhook reports success.
            "park" => vec![Sent::Approve],
            _ => match rng.below(100) {
                0..=69 => vec![Sent::Approve],
                70..=84 => vec![Sent::Reject],
                // For and against in the same moment: one wins.
                _ => vec![Sent::Approve, Sent::Reject],
            },
        };
        if twice && sends.len() == 1 {
            sends.push(sends[0]);
        }
        let by_thread = input["kind"] == "park" || (input["kind"] == "approval" && rng.chance(30));
        Plan {
            delay,
            sends,
            by_thread,
        }
    }
}

async fn answer(api: Arc<Api>, thread_id: String, input: Value, plan: Plan) -> Vec<Attempt> {
    tokio::time::sleep(plan.delay).await;
    let run_id = input["runId"].as_str().unwrap_or_default().to_owned();
    let call = input["toolCallId"].as_str().unwrap_or_default().to_owned();
    let sends = plan.sends.iter().map(|&sent| {
        let (path, body) = request(&thread_id, &run_id, &call, sent, plan.by_thread);
        let api = api.clone();
        let (run_id, call) = (run_id.clone(), call.clone());
        async move {
            let outcome = api.post(path, &body).await;
            let (status, delivered) = match outcome {
                Ok((status, body)) => (Some(status), body["delivered"].as_bool()),
                Err(_) => (None, None),
            };
            Attempt {
                run_id,
                tool_call_id: call,
                sent,
                status,
                delivered,
            }
        }
    });
    futures::future::join_all(sends).await
}

fn request(
    thread_id: &str,
    run_id: &str,
    call: &str,
    sent: Sent,
    by_thread: bool,
) -> (&'static str, Value) {
    match sent {
        Sent::Answer => (
            "/agent/tool-call/answer",
            json!({ "runId": run_id, "toolCallId": call,
                    "answers": { "scope": ["repo"], "depth": ["thorough"] } }),
        ),
        Sent::Skip => (
            "/agent/tool-call/skip",
            json!({ "runId": run_id, "toolCallId": call }),
        ),
        Sent::Approve | Sent::Reject if by_thread => (
            "/agent/hitl/respond",
            json!({ "threadId": thread_id, "toolCallId": call,
                    "approved": sent == Sent::Approve, "payload": { "url": "s3://done" } }),
        ),
        Sent::Approve => (
            "/agent/tool-call/approve",
            json!({ "runId": run_id, "toolCallId": call }),
        ),
        Sent::Reject => (
            "/agent/tool-call/reject",
            json!({ "runId": run_id, "toolCallId": call, "reason": "no" }),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_file_loads_and_has_every_scenarios_agent() {
        let file = agent_file("http://127.0.0.1:9", Duration::from_millis(1500));
        let registry = agentenkit_runtime::Registry::from_toml(&file).expect("loads");
        for index in 0..MIX.len() {
            let agent = Scenario::of_run(index).agent();
            assert!(registry.agent(agent).is_some(), "{agent}");
        }
    }

    #[test]
    fn an_expiring_request_is_never_answered_and_a_question_never_approved() {
        let mut rng = Rng::new(3);
        for _ in 0..200 {
            let approval = json!({ "kind": "approval" });
            assert!(Plan::choose(Scenario::Expiry, &approval, &mut rng).is_empty());
            let ask = json!({ "kind": "ask" });
            let plan = Plan::choose(Scenario::Questions, &ask, &mut rng);
            assert!(plan
                .sends
                .iter()
                .all(|s| matches!(s, Sent::Answer | Sent::Skip)));
            assert!(!plan.by_thread);
        }
    }
}
