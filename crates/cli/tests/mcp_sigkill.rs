//! Worker processes SIGKILLed at the three moments an MCP call is most
//! exposed, against the tickets server (tests/mcp/tickets_server.py, PyPI's
//! `mcp`) over Streamable HTTP: after sending a call and before recording
//! it, after a server's question parked, and while a server's task runs.
//! Another worker process carries each run on from its journal: the call
//! is sent again with the same idempotency key and recorded once; the
//! question is not asked again; the task is not started again.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentenkit_core::{Owner, RunStatus, ThreadId};
use agentenkit_runtime::{Deployment, Registry};
use agentenkit_store::ReadBound;
use serde_json::{json, Value};
use support::{sigkill, Fleet};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The python that has PyPI's `mcp` (installed by the project's script).
fn python() -> String {
    let out = std::process::Command::new("bash")
        .arg(root().join("scripts/mcp-servers.sh"))
        .arg("--python")
        .output()
        .expect("run scripts/mcp-servers.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The tickets server over Streamable HTTP, logging each call to a file.
struct Tickets {
    child: std::process::Child,
    url: String,
    log: PathBuf,
}

impl Tickets {
    async fn start(dir: &Path) -> Tickets {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = dir.join("tickets.log");
        let child = std::process::Command::new(python())
            .arg(root().join("tests/mcp/tickets_server.py"))
            .args(["http", &port.to_string()])
            .arg(&log)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the tickets server");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(tokio::time::Instant::now() < deadline, "the server listens");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Tickets {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
            log,
        }
    }

    /// The lines the server logged.
    fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect()
    }

    fn calls_of(&self, tool: &str) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|line| line["tool"] == tool)
            .collect()
    }
}

impl Drop for Tickets {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One agent calling `tool` with `arguments` once, then done.
fn agent_file(tickets: &Tickets, tool: &str, arguments: &str) -> String {
    format!(
        r#"
[agents.agent]
tools = ["tickets/{tool}"]
hitl_ttl_ms = 600000
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "tickets/{tool}", arguments = {arguments} }} ] }},
  {{ text = "Done." }},
] }}

[mcp.tickets]
transport = "http"
url = "{}"
"#,
        tickets.url
    )
}

/// Short leases: a killed worker's run is taken over within a second.
fn worker_env() -> Vec<(&'static str, String)> {
    vec![("AGENTENKIT_LEASE_TTL", "1s".into())]
}

/// The open request of `thread` once it is `call`.
async fn pending(fleet: &Fleet, owner: &Owner, thread: ThreadId, call: &str) -> Value {
    fleet
        .until(&format!("{call} waits"), || async {
            let view = fleet.store.get_thread(thread, owner).await.unwrap();
            view.pending_inputs
                .iter()
                .find(|input| input.tool_call_id == call)
                .map(|input| serde_json::to_value(input).unwrap())
        })
        .await
}

/// What the model read of `c1` (a text result as the text).
async fn read_by_model(fleet: &Fleet, owner: &Owner, thread: ThreadId) -> Value {
    let messages = fleet
        .store
        .list_messages(thread, owner, 0, ReadBound::new(100, 1 << 20))
        .await
        .unwrap();
    let message = messages
        .items
        .into_iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .find(|m| m["role"] == "tool" && m["toolCallId"] == "c1")
        .expect("the tool's message");
    let content = &message["content"];
    content.get("result").unwrap_or(content).clone()
}

#[tokio::test]
async fn sigkilled_after_sending_a_call_and_before_recording_it_the_call_is_sent_again_and_recorded_once(
) {
    let fleet = Fleet::new("mcp-kill-call").await;
    let tickets = Tickets::start(&fleet.dir).await;
    let file = fleet.agent_file(&agent_file(&tickets, "slow", "{ seconds = 1.0 }"));
    let owner = Owner("alice".into());
    let mut doomed = fleet.spawn_worker(&file, &worker_env());
    let (thread, run) = fleet.start_turn(&owner, "agent", "go").await;
    fleet
        .until("the call reached the server", || async {
            (!tickets.calls_of("slow").is_empty()).then_some(())
        })
        .await;
    sigkill(&mut doomed).await;

    let _rescuer = fleet.spawn_worker(&file, &worker_env());
    assert_eq!(fleet.finished(&owner, run).await, RunStatus::Completed);
    let calls = tickets.calls_of("slow");
    assert_eq!(calls.len(), 2, "sent again: {calls:?}");
    let key = json!(format!("{run}:c1"));
    assert!(
        calls
            .iter()
            .all(|c| c["meta"]["dev.agentenkit/idempotencyKey"] == key),
        "with the same key: {calls:?}"
    );
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
        journal.iter().filter(|n| *n == "exec:c1").count(),
        1,
        "recorded once: {journal:?}"
    );
    assert_eq!(
        read_by_model(&fleet, &owner, thread).await,
        json!("slept 1.0s")
    );
    drop(tickets);
    fleet.clean_up().await;
}

#[tokio::test]
async fn sigkilled_after_a_servers_question_parked_the_question_is_not_asked_again() {
    let fleet = Fleet::new("mcp-kill-question").await;
    let tickets = Tickets::start(&fleet.dir).await;
    let text = agent_file(&tickets, "escalate_ticket", r#"{ id = "T-9" }"#);
    let file = fleet.agent_file(&text);
    let owner = Owner("alice".into());
    let mut doomed = fleet.spawn_worker(&file, &worker_env());
    let (thread, run) = fleet.start_turn(&owner, "agent", "go").await;
    pending(&fleet, &owner, thread, "c1~1").await;
    sigkill(&mut doomed).await;

    // The person answers while no worker runs; the next one carries on.
    let registry = std::sync::Arc::new(Registry::load_toml(&text, Vec::new()).await.unwrap());
    let replies =
        Deployment::assemble(fleet.store.clone(), fleet.relay.clone(), registry, 1).replies();
    let answered = replies
        .answer(
            &owner,
            run,
            "c1~1",
            json!({ "team": ["ops"], "reason": ["it smokes"] }),
        )
        .await
        .unwrap();
    assert!(answered.delivered, "{answered:?}");
    let _rescuer = fleet.spawn_worker(&file, &worker_env());
    pending(&fleet, &owner, thread, "c1~2").await;
    let answered = replies
        .answer(&owner, run, "c1~2", json!({ "go": ["true"] }))
        .await
        .unwrap();
    assert!(answered.delivered, "{answered:?}");
    assert_eq!(fleet.finished(&owner, run).await, RunStatus::Completed);
    let rounds: Vec<Value> = tickets
        .calls_of("escalate_ticket")
        .iter()
        .map(|c| c["arguments"]["round"].clone())
        .collect();
    assert_eq!(rounds, [json!(0), json!(1), json!(2)], "each round once");
    drop(tickets);
    fleet.clean_up().await;
}

#[tokio::test]
async fn sigkilled_while_a_servers_task_runs_the_task_is_not_started_again() {
    let fleet = Fleet::new("mcp-kill-task").await;
    let tickets = Tickets::start(&fleet.dir).await;
    let text = agent_file(
        &tickets,
        "research",
        r#"{ topic = "kills", seconds = 2.0 }"#,
    );
    let file = fleet.agent_file(&text);
    let owner = Owner("alice".into());
    let mut doomed = fleet.spawn_worker(&file, &worker_env());
    let (thread, run) = fleet.start_turn(&owner, "agent", "go").await;
    pending(&fleet, &owner, thread, "c1~1").await;
    // A check on the task has been made by the worker about to die.
    fleet
        .until("the task was checked on", || async {
            tickets
                .lines()
                .iter()
                .any(|line| line["method"] == "tasks/get")
                .then_some(())
        })
        .await;
    sigkill(&mut doomed).await;

    let _rescuer = fleet.spawn_worker(&file, &worker_env());
    // A kill between a check's commit and its publish leaves the next
    // check in the outbox: the reaper publishes it, as it does in a fleet.
    let registry = std::sync::Arc::new(Registry::load_toml(&text, Vec::new()).await.unwrap());
    let reaper = Deployment::assemble(fleet.store.clone(), fleet.relay.clone(), registry, 1);
    let reaping = tokio::spawn(async move {
        let config = agentenkit_runtime::reaper::ReaperConfig {
            outbox_stale_after: Duration::from_millis(500),
            ..Default::default()
        };
        loop {
            let _ = agentenkit_runtime::reaper::reap_once(&reaper, &config).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    assert_eq!(fleet.finished(&owner, run).await, RunStatus::Completed);
    reaping.abort();
    let started: Vec<Value> = tickets
        .calls_of("research")
        .into_iter()
        .filter(|c| c["task"].is_string())
        .collect();
    assert_eq!(started.len(), 1, "one task: {started:?}");
    let read = read_by_model(&fleet, &owner, thread).await;
    let findings: Value = serde_json::from_str(read.as_str().unwrap_or_default()).unwrap();
    assert_eq!(findings["topic"], "kills", "{read}");
    drop(tickets);
    fleet.clean_up().await;
}
