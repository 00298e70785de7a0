//! `agentenkit agents versions NAME`: the versions of an agent that
//! processes recorded (docs/deployment.md, "Deploying changes"), oldest first, each
//! with its open runs: what a deploy left running on which definition.

use std::fmt::Write as _;

use agentenkit_runtime::versions::AgentVersion;
use agentenkit_store::{Store, StoredVersion};
use clap::Subcommand;

#[derive(Debug, Clone, Subcommand)]
pub enum AgentsCommand {
    /// The versions of agent NAME, oldest first, with their open runs.
    Versions { name: String },
}

impl AgentsCommand {
    /// Runs the command; what to print, and whether there was anything.
    pub async fn run(self, store: &Store) -> anyhow::Result<(String, bool)> {
        match self {
            AgentsCommand::Versions { name } => {
                let versions = store.list_agent_versions(&name).await?;
                Ok((render_versions(&name, &versions), !versions.is_empty()))
            }
        }
    }
}

/// A line per version: its short hash, when first seen, its open runs, and
/// the tools it offers; the full hash below.
pub fn render_versions(agent: &str, versions: &[(StoredVersion, i64)]) -> String {
    let shown_agent = crate::shown::shown(agent, false);
    if versions.is_empty() {
        return format!("no recorded versions of agent {shown_agent}\n");
    }
    let mut out = String::new();
    for (version, open) in versions {
        let tools: Vec<String> = version.definition["agents"][agent]["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|tool| tool.as_str())
            .map(|tool| crate::shown::shown(tool, false))
            .collect();
        let _ = writeln!(
            out,
            "{}  first seen {}  {open} open run{}  tools {}",
            AgentVersion::short(&version.hash),
            version.first_seen.format("%Y-%m-%d %H:%M:%S"),
            if *open == 1 { "" } else { "s" },
            if tools.is_empty() {
                "-".to_owned()
            } else {
                tools.join(",")
            },
        );
        let _ = writeln!(out, "    {}", version.hash);
        render_servers(&mut out, &version.definition);
    }
    out
}

/// A line per MCP server of a version: the tools it listed, and a short
/// hash of what it listed (names, descriptions, schemas, annotations), so
/// a server's change between two versions shows.
fn render_servers(out: &mut String, definition: &serde_json::Value) {
    use agentenkit_core::canonical::{canonical, sha256_hex};
    let servers = definition["mcp"].as_object().into_iter().flatten();
    for (name, server) in servers {
        let listed = &server["discovered"];
        let names: Vec<String> = listed
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|tool| tool["name"].as_str())
            .map(|tool| crate::shown::shown(tool, false))
            .collect();
        let _ = writeln!(
            out,
            "    mcp {}  listed {}  ({} tool{}: {})",
            crate::shown::shown(name, false),
            AgentVersion::short(&sha256_hex(canonical(listed).as_bytes())),
            names.len(),
            if names.len() == 1 { "" } else { "s" },
            if names.is_empty() {
                "-".to_owned()
            } else {
                names.join(",")
            },
        );
    }
}
