//! `agentenkit runs upgrade --agent NAME [--to VERSION] [--dry-run]`: moves
//! the queued and parked runs of an agent to a newer version where that is
//! safe, and says which it left and why (docs/deployment.md, "Deploying changes").

use std::fmt::Write as _;

use agentenkit_runtime::upgrade::{upgrade_runs, UpgradeReport};
use agentenkit_runtime::versions::AgentVersion;

use crate::outcome::Outcome;
use crate::shown::shown;

/// Exit code when some runs could not move.
pub const SOME_LEFT: i32 = 2;

pub async fn run(
    connections: &crate::Connections,
    agent: &str,
    to: Option<&str>,
    dry_run: bool,
) -> anyhow::Result<Outcome> {
    let store = connections.store()?;
    store.migrate().await?;
    match upgrade_runs(&store, agent, to, dry_run).await {
        Ok(report) => Ok(Outcome {
            exit_code: if report.left.is_empty() { 0 } else { SOME_LEFT },
            output: render(agent, &report, dry_run),
        }),
        Err(
            e @ (agentenkit_runtime::Error::InvalidInput(_) | agentenkit_runtime::Error::Config(_)),
        ) => Ok(Outcome {
            output: format!("{e}\n"),
            exit_code: 1,
        }),
        Err(e) => Err(e.into()),
    }
}

/// A line per run: moved (or would move), or left with the reason.
pub fn render(agent: &str, report: &UpgradeReport, dry_run: bool) -> String {
    let mut out = String::new();
    let verb = if dry_run { "would move" } else { "moved" };
    let _ = writeln!(
        out,
        "agent {} → version {}{}",
        shown(agent, false),
        AgentVersion::short(&report.to),
        if dry_run {
            " (dry run: nothing changed)"
        } else {
            ""
        }
    );
    for run in &report.moved {
        let _ = writeln!(
            out,
            "{verb}  run {} ({}) from {}",
            run.id,
            run.status,
            run.agent_version
                .as_deref()
                .map(AgentVersion::short)
                .unwrap_or("no version")
        );
    }
    for (run, reason) in &report.left {
        let _ = writeln!(
            out,
            "left   run {} ({}): {}",
            run.id,
            run.status,
            shown(reason, false)
        );
    }
    let _ = writeln!(
        out,
        "{} {verb}, {} left",
        report.moved.len(),
        report.left.len()
    );
    out
}
