//! MCP servers as tools (docs/mcp.md): `[mcp.NAME]` in the agent
//! file names a server; the process that loads the file lists its tools
//! (discovery), and what it found becomes part of each agent's version, so
//! a server that changes a tool's schema makes a new version while runs in
//! flight keep the schema they started with. An agent names `NAME/TOOL` or
//! `NAME/*`; each call is journaled before it is sent and its result after,
//! as for every tool, and carries its idempotency key in `_meta`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

pub mod client;
pub mod def;
mod elicit;
pub mod tool;

pub use client::{Server, ServerError, IDEMPOTENCY_KEY};
pub use def::{
    tool_name, Annotations, ApprovalMode, DiscoveredTool, ServerDef, Transport, SEPARATOR,
};
pub use tool::McpTool;

/// The reason of a call's wait for a server's task (its row of kind
/// `park`): shown as "Waiting for task", and ended by a worker's checks,
/// never by a person at a terminal.
pub const TASK_REASON: &str = "task";

use agentenkit_core::notify::retry_delay;

use crate::tool::RegisteredTool;
use crate::{Error, Result};

/// Attempts to list a server's tools at start before its agents are
/// delayed, and the wait before the second (doubled after each next).
const DISCOVERY_ATTEMPTS: u32 = 3;
const DISCOVERY_FIRST_RETRY: Duration = Duration::from_millis(250);

/// The server a tool name of an agent's `tools` belongs to, and the tool
/// (`*` for all of them): `NAME/TOOL`.
pub fn split(name: &str) -> Option<(&str, &str)> {
    name.split_once(SEPARATOR)
}

/// The names `key` (`tools`, `subagents`) of `agent` (an agent's table of
/// an agent file, as JSON) lists.
fn listed<'a>(agent: &'a Value, key: &str) -> impl Iterator<Item = &'a str> {
    agent
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// The servers `agent` (an agent's table, as JSON) names tools of.
pub fn servers_named_by(agent: &Value) -> impl Iterator<Item = &str> {
    listed(agent, "tools").filter_map(|tool| Some(split(tool)?.0))
}

/// The `[mcp.*]` tables of `tree` (an agent file as JSON), and the names
/// of those its agents name.
pub(crate) fn servers_of(tree: &Value) -> Result<(BTreeMap<String, ServerDef>, BTreeSet<String>)> {
    let servers: BTreeMap<String, ServerDef> = match tree.get("mcp") {
        Some(mcp) => {
            serde_json::from_value(mcp.clone()).map_err(|e| Error::Config(format!("mcp: {e}")))?
        }
        None => BTreeMap::new(),
    };
    let named = tree
        .get("agents")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|agents| agents.values())
        .flat_map(servers_named_by)
        .map(str::to_owned)
        .collect();
    Ok((servers, named))
}

/// Lists the tools of each server `tree` (an agent file as JSON) has
/// agents name, into `tree` (`mcp.NAME.discovered`); returns why each
/// server that could not be listed was not. Every server's table is
/// checked first: nothing is started or sent to before the file is known
/// to be good (an http URL to another machine, say, is refused unsent).
pub(crate) async fn discover_into(tree: &mut Value) -> Result<BTreeMap<String, String>> {
    let (servers, named) = servers_of(tree)?;
    for (name, def) in &servers {
        def.check(name).map_err(Error::Config)?;
    }
    let listings = futures::future::join_all(
        servers
            .iter()
            .filter(|(name, _)| named.contains(name.as_str()))
            .map(|(name, def)| async move { (name.clone(), list_with_retries(name, def).await) }),
    )
    .await;
    let mut failed: BTreeMap<String, String> = servers
        .keys()
        .filter(|name| !named.contains(name.as_str()))
        .map(|name| (name.clone(), "is named by no agent, so not listed".into()))
        .collect();
    for (name, listing) in listings {
        match listing {
            Ok(tools) => {
                tree["mcp"][&name]["discovered"] = serde_json::to_value(tools).unwrap_or_default();
            }
            Err(e) => {
                tracing::warn!(mcp.server = %name, "its agents wait: {e}");
                failed.insert(name, format!("could not be listed: {e}"));
            }
        }
    }
    Ok(failed)
}

/// Removes from `tree` the agents that name a tool of a server whose tools
/// were not listed (`failed` says why, for those whose listing failed), and
/// those that delegate to one removed: the agents delayed, and the servers
/// not listed, each with why.
pub(crate) fn delay_unlisted(
    tree: &mut Value,
    failed: &BTreeMap<String, String>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut unlisted = failed.clone();
    if let Some(servers) = tree.get("mcp").and_then(Value::as_object) {
        for (name, server) in servers {
            if server.get("discovered").is_none() && !unlisted.contains_key(name) {
                unlisted.insert(
                    name.clone(),
                    "was not listed: this process loaded the file without listing its servers (Registry::load lists them)".into(),
                );
            }
        }
    }
    (delay_agents(tree, &unlisted), unlisted)
}

/// Removes from `tree` the agents that name a tool of a `failed` server,
/// and those that delegate to one removed: the agents delayed, with why.
fn delay_agents(tree: &mut Value, failed: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut delayed = BTreeMap::new();
    let Some(agents) = tree.get_mut("agents").and_then(Value::as_object_mut) else {
        return delayed;
    };
    loop {
        let next = agents.iter().find_map(|(name, agent)| {
            let server = servers_named_by(agent).find_map(|server| {
                let why = failed.get(server)?;
                Some(format!("mcp server {server} {why}"))
            });
            let sub = listed(agent, "subagents").find_map(|sub| {
                delayed
                    .contains_key(sub)
                    .then(|| format!("its sub-agent {sub:?} is delayed"))
            });
            Some((name.clone(), server.or(sub)?))
        });
        let Some((name, why)) = next else {
            return delayed;
        };
        agents.remove(&name);
        delayed.insert(name, why);
    }
}

/// A server's tools, asked up to [`DISCOVERY_ATTEMPTS`] times.
async fn list_with_retries(
    name: &str,
    def: &ServerDef,
) -> Result<Vec<DiscoveredTool>, ServerError> {
    let server = client::shared(name, def);
    let mut attempt = 1;
    loop {
        match server.list_tools().await {
            Ok(tools) => return Ok(tools),
            Err(e) if attempt >= DISCOVERY_ATTEMPTS => return Err(e),
            Err(e) => {
                tracing::info!(mcp.server = %name, attempt, "listing its tools failed: {e}");
                tokio::time::sleep(retry_delay(DISCOVERY_FIRST_RETRY, attempt)).await;
                attempt += 1;
            }
        }
    }
}

/// Each server's offered tools, by their names as agents name them.
pub(crate) type ServerTools = BTreeMap<String, Vec<String>>;

/// The tools a file's `[mcp.*]` servers offer, registered as `NAME/TOOL`,
/// and each server's `NAME/*` spelled out, from what discovery listed.
/// A server's tool whose schema does not compile is left out (logged).
pub(crate) fn registered_tools(
    servers: &BTreeMap<String, ServerDef>,
) -> Result<(Vec<RegisteredTool>, ServerTools)> {
    let mut registered = Vec::new();
    let mut all = BTreeMap::new();
    for (name, def) in servers {
        def.check(name).map_err(Error::Config)?;
        let Some(offered) = def.offered() else {
            continue;
        };
        let server = client::shared(name, def);
        let mut names = Vec::new();
        for listed in offered {
            let tool = McpTool::new(server.clone(), listed, def.asks_first(listed));
            match RegisteredTool::new(Arc::new(tool)) {
                Ok(tool) => {
                    names.push(tool.spec.name.clone());
                    registered.push(tool);
                }
                Err(e) => tracing::warn!(mcp.server = %name, "left out: {e}"),
            }
        }
        all.insert(name.clone(), names);
    }
    Ok((registered, all))
}

/// The multi-party rules and reminders of the servers' tools, by their
/// names as agents name them: a rule for each tool its `approvals` names
/// (which the server must offer), a reminder for each offered tool that
/// asks first when it sets `remind_after` and `escalate_to`.
pub(crate) fn rules_and_escalations(
    servers: &BTreeMap<String, ServerDef>,
) -> Result<RulesAndEscalations> {
    let mut rules = Vec::new();
    let mut escalations = Vec::new();
    for (name, def) in servers {
        let Some(offered) = def.offered() else {
            continue;
        };
        let offered: Vec<&DiscoveredTool> = offered.collect();
        for (tool, rule) in &def.approvals {
            if !offered.iter().any(|t| &t.name == tool) {
                return Err(Error::Config(format!(
                    "mcp server {name}: approvals names {tool:?}, which it does not offer"
                )));
            }
            rules.push((tool_name(name, tool), rule.clone()));
        }
        for tool in offered.into_iter().filter(|tool| def.asks_first(tool)) {
            let full = tool_name(name, &tool.name);
            let escalation = crate::notify::Escalation::from_def(
                &full,
                def.remind_after.as_deref(),
                def.escalate_to.as_deref(),
            )?;
            escalations.extend(escalation.map(|e| (full, e)));
        }
    }
    Ok((rules, escalations))
}

/// Rules and reminders by tool name.
pub(crate) type RulesAndEscalations = (
    Vec<(String, agentenkit_core::approvals::ApprovalRule)>,
    Vec<(String, crate::notify::Escalation)>,
);

/// An agent's `tools` with each `NAME/*` replaced by the server's tools
/// (as listed; left as written when the server was not listed, which
/// [`crate::Registry::check`] then refuses).
pub(crate) fn expand(tools: Vec<String>, all: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut expanded = Vec::with_capacity(tools.len());
    for tool in tools {
        match split(&tool) {
            Some((server, "*")) if all.contains_key(server) => {
                for name in &all[server] {
                    if !expanded.contains(name) {
                        expanded.push(name.clone());
                    }
                }
            }
            _ if expanded.contains(&tool) => {}
            _ => expanded.push(tool),
        }
    }
    expanded
}

#[cfg(test)]
mod tests;
