//! A worker does not start without its notification targets' secrets: it
//! would send nothing it could sign. It says which variable is missing.

use std::process::Command;

#[test]
fn a_worker_without_a_targets_secret_refuses_to_start_and_names_it() {
    let dir = std::env::temp_dir().join(format!("agentenkit-notify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let agents = dir.join("agents.toml");
    std::fs::write(
        &agents,
        r#"
[agents.a]
model = { provider = "scripted", script = [] }

[notifications.ops]
url = "https://hooks.example.com/agentenkit"
secret_env = "AGENTENKIT_TEST_OPS_SECRET_NEVER_SET"
"#,
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_agentenkit-worker"))
        .env("AGENTENKIT_CONFIG", &agents)
        .env_remove("AGENTENKIT_TEST_OPS_SECRET_NEVER_SET")
        // Never reached: the agent file is read first.
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .env("AMQP_URL", "amqp://nobody:x@127.0.0.1:1/%2f")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("notification secrets not set")
            && stderr.contains("AGENTENKIT_TEST_OPS_SECRET_NEVER_SET"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
