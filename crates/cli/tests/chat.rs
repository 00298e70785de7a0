//! `agentenkit chat` end to end: a real process, real Postgres, a terminal
//! conversation typed on stdin.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use axum::routing::post;
use axum::Json;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

// The OTLP receiver of tests/traces.rs (its drawing is not used here).
#[allow(dead_code)]
#[path = "traces/otlp.rs"]
mod otlp;

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/agentenkit_test".into())
}

/// A running `agentenkit chat` in its own schema, driven through stdin.
struct Chat {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    seen: String,
    schema: String,
    dir: PathBuf,
}

impl Chat {
    async fn start(agent_file: &str, agent: &str) -> Chat {
        Self::start_with_env(agent_file, agent, &[]).await
    }

    async fn start_with_env(agent_file: &str, agent: &str, env: &[(&str, &str)]) -> Chat {
        let id = uuid::Uuid::now_v7().simple().to_string();
        let dir = std::env::temp_dir().join(format!("agentenkit-chat-{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("agentenkit.toml");
        std::fs::write(&config, agent_file).unwrap();
        let schema = format!("t_{id}");
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentenkit"))
            .args([
                "chat", "--agent", agent, "--schema", &schema, "--queue", "memory",
            ])
            .arg("--config")
            .arg(&config)
            .env("DATABASE_URL", database_url())
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Chat {
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()),
            child,
            seen: String::new(),
            schema,
            dir,
        }
    }

    /// Reads until the output holds `needle`; returns all output so far.
    async fn wait_for(&mut self, needle: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !self.seen.contains(needle) {
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout_at(deadline, self.stdout.read(&mut chunk))
                .await
                .unwrap_or_else(|_| panic!("waiting for {needle:?}; output so far:\n{}", self.seen))
                .unwrap();
            assert!(n > 0, "chat exited early; output:\n{}", self.seen);
            self.seen.push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
        self.seen.clone()
    }

    async fn type_line(&mut self, line: &str) {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }

    /// Quits with an empty line; the process must exit cleanly.
    async fn quit(mut self) {
        self.type_line("").await;
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "chat failed:\n{}", self.seen);
        let (client, connection) = tokio_postgres::connect(&database_url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema))
            .await
            .unwrap();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn tool_server() -> String {
    let app = axum::Router::new().route(
        "/send",
        post(|Json(body): Json<Value>| async move {
            Json(json!({ "sent": true, "approved": body["approval"]["approved"] }))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/send")
}

/// An agent whose one call, an email to `url`'s tool, needs an approval.
fn mailer(url: &str) -> String {
    format!(
        r#"
[agents.mailer]
tools = ["send_email"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "send_email", arguments = {{ to = "ada@example.com" }} }} ] }},
  {{ text = "Done." }},
] }}
[tools.send_email]
type = "http"
url = "{url}"
requires_confirmation = true
"#
    )
}

#[tokio::test]
async fn chat_asks_the_approval_on_the_terminal_and_finishes_the_turn() {
    let url = tool_server().await;
    let mut chat = Chat::start(&mailer(&url), "mailer").await;
    chat.wait_for("you> ").await;
    chat.type_line("send the minutes").await;
    let prompt = chat.wait_for("Approve? [y/N] ").await;
    assert!(
        prompt.contains("mailer wants to call send_email"),
        "{prompt}"
    );
    assert!(
        prompt.contains("\"to\": \"ada@example.com\""),
        "pretty JSON arguments: {prompt}"
    );
    chat.type_line("y").await;
    let done = chat.wait_for("assistant: Done.").await;
    assert!(
        done.contains(r#"tool send_email: {"approved":true,"sent":true}"#),
        "{done}"
    );
    chat.quit().await;
}

#[tokio::test]
async fn chat_renders_question_n_of_m_with_the_defaults_and_enter_confirms() {
    let mut chat = Chat::start(
        r#"
[agents.scoper]
model = { provider = "scripted", script = [ { text = "Scoped." } ] }
[agents.scoper.intake]
preamble = "Two questions before I start."
questions = [
  { id = "scope", prompt = "How wide?", options = [ { value = "module", label = "This module only" }, { value = "repo", label = "The whole repository" } ], defaults = ["module"] },
  { id = "langs", prompt = "Which languages?", multiple = true, options = [ { value = "rust", label = "Rust" }, { value = "go", label = "Go" } ], defaults = ["rust"] },
]
"#,
        "scoper",
    )
    .await;
    chat.wait_for("you> ").await;
    chat.type_line("scope the work").await;
    let first = chat.wait_for("Question 1 of 2: How wide?").await;
    assert!(first.contains("Two questions before I start."), "{first}");
    let form = chat.wait_for("(- for none): ").await;
    assert!(
        form.contains("* 1. This module only"),
        "the default is pre-picked: {form}"
    );
    chat.type_line("").await;
    chat.wait_for("Question 2 of 2: Which languages?").await;
    chat.type_line("1,2").await;
    let done = chat.wait_for("assistant: Scoped.").await;
    assert!(
        done.contains(r#""answers":{"langs":["rust","go"],"scope":["module"]}"#),
        "{done}"
    );
    assert!(done.contains(r#""defaulted":["scope"]"#), "{done}");
    chat.quit().await;
}

/// An OpenAI-compatible server: a tool call first, then text; it records
/// each request's Authorization header and messages.
async fn openai_server() -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>,
) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = seen.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |headers: axum::http::HeaderMap, Json(body): Json<Value>| {
            let seen = recorded.clone();
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                let n = {
                    let mut seen = seen.lock().unwrap();
                    seen.push((auth, body));
                    seen.len()
                };
                let message = if n == 1 {
                    json!({ "role": "assistant", "content": null, "tool_calls": [
                        { "id": "call_9", "type": "function",
                          "function": { "name": "send_email", "arguments": "{\"to\":\"ada@example.com\"}" } }
                    ] })
                } else {
                    json!({ "role": "assistant", "content": "Sent it." })
                };
                Json(json!({
                    "choices": [{ "index": 0, "message": message }],
                    "usage": { "prompt_tokens": 10, "completion_tokens": 2 },
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/v1"), seen)
}

#[tokio::test]
async fn chat_talks_to_an_openai_compatible_server_named_by_the_environment() {
    let url = tool_server().await;
    let (base_url, seen) = openai_server().await;
    let mut chat = Chat::start_with_env(
        &format!(
            r#"
[agents.mailer]
system = "You send email."
tools = ["send_email"]
model = {{ provider = "openai", model = "gpt-test" }}
[tools.send_email]
type = "http"
url = "{url}"
requires_confirmation = true
"#
        ),
        "mailer",
        &[
            ("OPENAI_BASE_URL", &base_url),
            ("OPENAI_API_KEY", "sk-chat-key"),
        ],
    )
    .await;
    chat.wait_for("you> ").await;
    chat.type_line("mail ada").await;
    let prompt = chat.wait_for("Approve? [y/N] ").await;
    assert!(
        prompt.contains("mailer wants to call send_email"),
        "{prompt}"
    );
    chat.type_line("y").await;
    let done = chat.wait_for("assistant: Sent it.").await;
    assert!(!done.contains("sk-chat-key"), "{done}");
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].0, "Bearer sk-chat-key");
        assert_eq!(seen[0].1["model"], "gpt-test");
        assert_eq!(seen[0].1["messages"][0]["content"], "You send email.");
        let result = &seen[1].1["messages"][3];
        assert_eq!(result["role"], "tool");
        assert_eq!(result["tool_call_id"], "call_9");
    }
    chat.quit().await;
}

/// With the `OTEL_*` variables set, a turn typed in `agentenkit chat` is
/// one trace as a turn over HTTP is: the turn's span is its root, the
/// segments (through the in-process queue) continue it, and the person's
/// answer at the terminal is an `answer` and a `wait` in it.
#[tokio::test]
async fn a_chat_turn_is_one_trace_with_the_persons_wait_in_it() {
    let url = tool_server().await;
    let receiver = otlp::Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    receiver.clone().serve(listener).await;
    let mut chat = Chat::start_with_env(
        &mailer(&url),
        "mailer",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )
    .await;
    chat.wait_for("you> ").await;
    chat.type_line("send the minutes").await;
    chat.wait_for("Approve? [y/N] ").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    chat.type_line("y").await;
    chat.wait_for("assistant: Done.").await;
    // Quitting ends the process, which flushes its spans.
    chat.quit().await;

    let spans = receiver.spans();
    let turn = spans
        .iter()
        .find(|s| s.name == "turn")
        .unwrap_or_else(|| panic!("no turn span: {spans:?}"));
    let trace: Vec<&otlp::Span> = spans
        .iter()
        .filter(|s| s.trace_id == turn.trace_id)
        .collect();
    let named = |name: &str| trace.iter().filter(|s| s.name == name).count();
    assert_eq!(named("segment"), 2, "{trace:?}");
    assert_eq!(named("answer"), 1, "{trace:?}");
    let wait = trace
        .iter()
        .find(|s| s.name == "wait")
        .unwrap_or_else(|| panic!("no wait in the turn's trace: {trace:?}"));
    assert_eq!(wait.attr("answer.outcome"), Some("approved"));
    assert_eq!(wait.attr("answer.by"), Some("local"), "{wait:?}");
    assert!(wait.seconds() >= 0.3, "{wait:?}");
    assert!(
        spans.iter().all(|s| s.trace_id == turn.trace_id),
        "every span of the process is the turn's: {spans:?}"
    );
}

#[tokio::test]
async fn a_line_typed_while_a_turn_works_is_queued_and_its_turn_runs_next() {
    // A lookup that takes a moment, then the model answers with the last
    // user message it read.
    let slow = axum::Router::new().route(
        "/lookup",
        post(|| async {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Json(json!({ "found": 3 }))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, slow).await });
    let file = format!(
        r#"
[agents.finder]
tools = ["lookup"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "lookup", arguments = {{}} }} ] }},
  {{ text = "Found them." }},
] }}
[tools.lookup]
type = "http"
url = "http://{addr}/lookup"
"#
    );
    let mut chat = Chat::start(&file, "finder").await;
    chat.wait_for("you> ").await;
    chat.type_line("find the tickets").await;
    // While the lookup runs: nothing asks, so the line is queued.
    tokio::time::sleep(Duration::from_millis(300)).await;
    chat.type_line("and the invoices").await;
    chat.wait_for("(queued: it runs when this turn ends)").await;
    // Both turns run before the next prompt: each its own lookup and answer.
    let out = chat.wait_for("assistant: Found them.\n\nyou> ").await;
    let shown = out.split("(queued: it runs").nth(1).unwrap().to_owned();
    assert_eq!(
        shown.matches("assistant: Found them.").count(),
        2,
        "both turns answered before the prompt:\n{shown}"
    );
    assert!(
        shown.contains("you (queued): and the invoices"),
        "the queued line is shown as its turn starts:\n{shown}"
    );
    chat.quit().await;
}
