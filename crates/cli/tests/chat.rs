//! `agentenkit chat` end to end: a real process, real Postgres, a terminal
//! conversation whose approval is typed on stdin.

use std::process::Stdio;
use std::time::Duration;

use axum::routing::post;
use axum::Json;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/agentenkit_test".into())
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

#[tokio::test]
async fn chat_asks_the_approval_on_the_terminal_and_finishes_the_turn() {
    let url = tool_server().await;
    let dir =
        std::env::temp_dir().join(format!("agentenkit-chat-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("agentenkit.toml");
    std::fs::write(
        &config,
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
        ),
    )
    .unwrap();
    let schema = format!("t_{}", uuid::Uuid::now_v7().simple());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentenkit"))
        .args([
            "chat", "--agent", "mailer", "--schema", &schema, "--queue", "memory",
        ])
        .arg("--config")
        .arg(&config)
        .env("DATABASE_URL", database_url())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    let mut wait_for = async |needle: &str| {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !seen.contains(needle) {
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout_at(deadline, stdout.read(&mut chunk))
                .await
                .unwrap_or_else(|_| panic!("waiting for {needle:?}; output so far:\n{seen}"))
                .unwrap();
            assert!(n > 0, "chat exited early; output:\n{seen}");
            seen.push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
        seen.clone()
    };
    wait_for("you> ").await;
    stdin.write_all(b"send the minutes\n").await.unwrap();
    let prompt = wait_for("Approve? [y/N] ").await;
    assert!(
        prompt.contains("mailer wants to call send_email"),
        "{prompt}"
    );
    assert!(
        prompt.contains("\"to\": \"ada@example.com\""),
        "pretty JSON arguments: {prompt}"
    );
    stdin.write_all(b"y\n").await.unwrap();
    let done = wait_for("assistant: Done.").await;
    assert!(
        done.contains(r#"tool send_email: {"approved":true,"sent":true}"#),
        "{done}"
    );
    stdin.write_all(b"\n").await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .unwrap()
        .unwrap();
    let mut err = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = BufReader::new(&mut stderr).read_line(&mut err).await;
    }
    assert!(status.success(), "chat failed: {err}");

    let (client, connection) = tokio_postgres::connect(&database_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn chat_renders_question_n_of_m_with_the_defaults_and_enter_confirms() {
    let dir =
        std::env::temp_dir().join(format!("agentenkit-chat-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("agentenkit.toml");
    std::fs::write(
        &config,
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
    )
    .unwrap();
    let schema = format!("t_{}", uuid::Uuid::now_v7().simple());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentenkit"))
        .args([
            "chat", "--agent", "scoper", "--schema", &schema, "--queue", "memory",
        ])
        .arg("--config")
        .arg(&config)
        .env("DATABASE_URL", database_url())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    let mut wait_for = async |needle: &str| {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !seen.contains(needle) {
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout_at(deadline, stdout.read(&mut chunk))
                .await
                .unwrap_or_else(|_| panic!("waiting for {needle:?}; output so far:\n{seen}"))
                .unwrap();
            assert!(n > 0, "chat exited early; output:\n{seen}");
            seen.push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
        seen.clone()
    };
    wait_for("you> ").await;
    stdin.write_all(b"scope the work\n").await.unwrap();
    let first = wait_for("Question 1 of 2: How wide?").await;
    assert!(first.contains("Two questions before I start."), "{first}");
    let form = wait_for("(- for none): ").await;
    assert!(
        form.contains("* 1. This module only"),
        "the default is pre-picked: {form}"
    );
    stdin.write_all(b"\n").await.unwrap();
    wait_for("Question 2 of 2: Which languages?").await;
    stdin.write_all(b"1,2\n").await.unwrap();
    let done = wait_for("assistant: Scoped.").await;
    assert!(
        done.contains(r#""answers":{"langs":["rust","go"],"scope":["module"]}"#),
        "{done}"
    );
    assert!(done.contains(r#""defaulted":["scope"]"#), "{done}");
    stdin.write_all(b"\n").await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    let (client, connection) = tokio_postgres::connect(&database_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
