//! The short chaos run (`make chaos` is the long one): about 100 runs while
//! workers are SIGKILLed and the API, RabbitMQ and Postgres restart once
//! each; the checker must find nothing lost, doubled, early or stuck.
//! Ignored in the parallel run: `make test` runs it alone, with the other
//! tests that restart the broker.

use std::process::Command;

use agentenkit_chaos::faults::local_postgres_restart;

#[test]
#[ignore = "restarts RabbitMQ and Postgres: run alone by `make test`"]
fn a_short_chaos_run_loses_doubles_and_strands_nothing() {
    let database_url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/agentenkit_test".into());
    let json = std::env::temp_dir().join(format!("chaos-{}.json", uuid::Uuid::now_v7()));
    let can_restart_postgres =
        std::env::var_os("CHAOS_POSTGRES_RESTART").is_some() || local_postgres_restart().is_some();
    let outages = if can_restart_postgres {
        "api,broker,postgres"
    } else {
        eprintln!("no way to restart Postgres on this machine: the short run skips that fault");
        "api,broker"
    };
    let log_dir = std::env::temp_dir().join("agentenkit-chaos");
    let output = Command::new(env!("CARGO_BIN_EXE_agentenkit-chaos"))
        .env("DATABASE_URL", &database_url)
        .args([
            "--runs",
            "100",
            "--concurrency",
            "16",
            "--outage-every",
            "3s",
        ])
        .args(["--outages", outages])
        .arg("--log-dir")
        .arg(&log_dir)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("running agentenkit-chaos");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "the chaos run failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let figures: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the JSON figures")).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(figures["passed"], true);
    assert_eq!(figures["runs"]["completed"], 100);
    for kind in ["WorkerKill", "ApiRestart", "BrokerRestart"] {
        assert!(
            figures["faults"][kind].as_u64() >= Some(1),
            "{kind} happened: {}",
            figures["faults"]
        );
    }
    if can_restart_postgres {
        assert!(figures["faults"]["PostgresRestart"].as_u64() >= Some(1));
    }
    for verdict in ["lost", "doubled", "early", "unresolved"] {
        assert_eq!(figures[verdict], 0, "{verdict}");
    }
}
