//! What a person at a terminal sees: `agentenkit demo` prints its
//! transcript and nothing else, and operator commands fail with a message
//! and a non-zero exit code.

use std::process::Command;

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/agentenkit_test".into())
}

#[tokio::test]
async fn the_demo_prints_its_transcript_without_log_lines() {
    let schema = format!("t_{}", uuid::Uuid::now_v7().simple());
    let output = Command::new(env!("CARGO_BIN_EXE_agentenkit"))
        .args(["demo", "--schema", &schema, "--queue", "memory"])
        .env("DATABASE_URL", database_url())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("Transcript:"), "{stdout}");
    assert!(stdout.contains("\"completed\""), "{stdout}");
    assert!(
        !stderr.contains("INFO") && !stdout.contains("INFO"),
        "log lines in a transcript:\n{stderr}"
    );
    let (client, connection) = tokio_postgres::connect(&database_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
}

#[test]
fn an_operator_command_that_cannot_reach_the_api_says_so_and_exits_non_zero() {
    let output = Command::new(env!("CARGO_BIN_EXE_agentenkit"))
        .args(["inbox", "--url", "http://127.0.0.1:9"])
        .env("AGENTENKIT_API_KEY", "k")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("reaching the API at http://127.0.0.1:9"),
        "{stderr}"
    );
    let no_key = Command::new(env!("CARGO_BIN_EXE_agentenkit"))
        .args(["approve", "RUN", "c1"])
        .env_remove("AGENTENKIT_API_KEY")
        .output()
        .unwrap();
    assert_eq!(no_key.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&no_key.stderr).contains("AGENTENKIT_API_KEY"));
}

#[tokio::test]
async fn log_format_json_writes_one_json_object_per_line() {
    let schema = format!("t_{}", uuid::Uuid::now_v7().simple());
    let output = Command::new(env!("CARGO_BIN_EXE_agentenkit"))
        .args(["migrate", "--schema", &schema, "--log-format", "json"])
        .env("DATABASE_URL", database_url())
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["level"] == "INFO" && l["fields"]["message"] == "migration applied"),
        "{stderr}"
    );
    let (client, connection) = tokio_postgres::connect(&database_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
}
