//! `agentenkit mcp list [--agent NAME]`: the MCP servers of the agent file
//! as this machine reaches them now: whether each could be listed, and
//! each tool with its annotations and whether a call asks a person first
//! (docs/mcp.md).

use std::fmt::Write as _;

use agentenkit_runtime::mcp::{DiscoveredTool, ServerDef, Transport};
use agentenkit_runtime::Registry;
use clap::Subcommand;
use serde_json::Value;

use crate::shown::shown;

#[derive(Debug, Clone, Subcommand)]
pub enum McpCommand {
    /// Lists each server's tools now (as a process loading the file would),
    /// with their annotations and whether each asks first.
    List {
        /// Only the servers this agent names.
        #[arg(long)]
        agent: Option<String>,
    },
}

impl McpCommand {
    /// What to print for the agent file at `path`, and whether every server
    /// shown could be listed.
    pub async fn run(self, path: &std::path::Path) -> anyhow::Result<(String, bool)> {
        let McpCommand::List { agent } = self;
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let registry = Registry::load_toml(&text, Vec::new())
            .await
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        // The agents as written: a delayed one is not in the registry.
        let written: Value = serde_json::to_value(toml::from_str::<toml::Value>(&text)?)?;
        Ok(render(&registry, &written, agent.as_deref()))
    }
}

/// The servers of `registry`'s file (those `agent` names in the file as
/// `written`, when given): a
/// line each, then a line per tool it offers; and whether all were listed.
pub fn render(registry: &Registry, written: &Value, agent: Option<&str>) -> (String, bool) {
    let file = registry.file();
    let servers: Vec<(String, ServerDef)> = file["mcp"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(name, def)| Some((name.clone(), serde_json::from_value(def.clone()).ok()?)))
        .filter(|(name, _)| agent.is_none_or(|agent| names_server(written, agent, name)))
        .collect();
    let mut out = String::new();
    if servers.is_empty() {
        let _ = writeln!(
            out,
            "no mcp servers{}",
            agent
                .map(|a| format!(" named by agent {}", shown(a, false)))
                .unwrap_or_default()
        );
        return (out, true);
    }
    let mut all_listed = true;
    for (name, def) in &servers {
        let place = match def.transport {
            Transport::Stdio => format!(
                "stdio {}",
                shown(def.command.as_deref().unwrap_or_default(), false)
            ),
            Transport::Http => format!(
                "http {}",
                agentenkit_runtime::tool::redact_url(def.url.as_deref().unwrap_or_default())
            ),
        };
        let Some(offered) = def.offered() else {
            all_listed = false;
            let why = registry
                .unlisted_servers()
                .get(name)
                .map_or_else(|| "not listed".to_owned(), |why| shown(why, false));
            let _ = writeln!(out, "{}  {place}  unreachable: {why}", shown(name, false));
            continue;
        };
        let tools: Vec<&DiscoveredTool> = offered.collect();
        let _ = writeln!(
            out,
            "{}  {place}  listed  {} tool{}",
            shown(name, false),
            tools.len(),
            if tools.len() == 1 { "" } else { "s" }
        );
        for tool in tools {
            let asks = if def.asks_first(tool) {
                "asks first"
            } else {
                "runs at once"
            };
            let _ = writeln!(
                out,
                "  {}/{}  {}  {asks}",
                shown(name, false),
                shown(&tool.name, false),
                hints(tool)
            );
        }
    }
    (out, all_listed)
}

/// Whether `agent` of `file` names a tool of server `server`.
fn names_server(file: &Value, agent: &str, server: &str) -> bool {
    agentenkit_runtime::mcp::servers_named_by(&file["agents"][agent]).any(|s| s == server)
}

/// A tool's annotations as a person reads them.
fn hints(tool: &DiscoveredTool) -> String {
    let Some(a) = &tool.annotations else {
        return "no annotations".into();
    };
    let mut said = Vec::new();
    let mut say = |hint: Option<bool>, yes: &'static str, no: &'static str| match hint {
        Some(true) => said.push(yes),
        Some(false) => said.push(no),
        None => {}
    };
    say(a.read_only_hint, "read-only", "writes");
    say(a.destructive_hint, "destructive", "not destructive");
    say(a.idempotent_hint, "idempotent", "not idempotent");
    say(a.open_world_hint, "open world", "closed world");
    if said.is_empty() {
        "no hints".into()
    } else {
        said.join(", ")
    }
}
