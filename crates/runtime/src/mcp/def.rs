//! `[mcp.NAME]`: an MCP server in the agent file, and what discovery found
//! on it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How agentenkit reaches a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// A child process speaking JSON-RPC on its stdin and stdout.
    Stdio,
    /// Streamable HTTP at `url`.
    Http,
}

/// When a call of one of the server's tools waits for a person.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    /// Every call asks first.
    Always,
    /// No call asks.
    Never,
    /// `readOnlyHint: true` runs without asking; anything else asks
    /// (a destructive tool, and a tool with no annotations: failing
    /// closed).
    #[default]
    Annotations,
}

/// The default deadline of one call (and of discovery): 60 s, as for http
/// tools.
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;
/// The default cap of one answer: 1 MiB, as for http tools.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 1024 * 1024;
/// The longest `timeout_ms` a server may set: an hour, as for http tools.
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// The largest `max_response_bytes`: 64 MiB (one answer is held whole).
pub const MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;
/// The separator of a server's name and its tool's in an agent's `tools`.
pub use crate::tool::SERVER_SEPARATOR as SEPARATOR;

/// The settings of a server's table that say what runs (stdio: the
/// program, its arguments and the variables it is given) or where calls
/// go (http: the URL and the variables its headers are read from).
pub const CONNECTION: [&str; 6] = ["transport", "command", "args", "env", "url", "headers"];

/// `SERVER/TOOL`: a server's tool as agents and models name it.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("{server}{SEPARATOR}{tool}")
}

/// `[mcp.NAME]` as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerDef {
    pub transport: Transport,
    /// stdio: the program, found on `PATH` when it names no directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// stdio: the variables passed on from this process's environment; the
    /// child gets these and no other.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// http: the Streamable HTTP endpoint (`https://`, or `http://` on
    /// loopback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// http: `{ Header = "ENV_VAR" }`, each header's value read from that
    /// variable when the process connects.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<u64>,
    /// Only these of the server's tools are offered (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Per tool: `"always"`, `"never"` or `"annotations"` (the default).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub require_approval: BTreeMap<String, ApprovalMode>,
    /// Per tool: several people must approve each call (`{ required = 2,
    /// from = ["ops"] }`), as an http tool's `approvals`; the tool must ask
    /// first.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub approvals: BTreeMap<String, agentenkit_core::approvals::ApprovalRule>,
    /// Remind `escalate_to` (a notification target) of a call of any of its
    /// tools still waiting for a person after this long (`"30m"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remind_after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalate_to: Option<String>,
    /// What discovery listed, filled in by the process that loads the file
    /// (and kept in each version): never written by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovered: Option<Vec<DiscoveredTool>>,
}

/// One tool as a server listed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredTool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
}

/// The hints a server gives about a tool (MCP `ToolAnnotations`): hints,
/// not guarantees, so a missing one asks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Annotations {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl DiscoveredTool {
    /// The server marks it read-only and not also destructive: a call of
    /// it changes nothing elsewhere.
    pub fn read_only(&self) -> bool {
        let hints = self.annotations.clone().unwrap_or_default();
        hints.read_only_hint == Some(true) && hints.destructive_hint != Some(true)
    }

    /// Whether a call asks a person first under `mode`: with the server's
    /// annotations, only a tool marked read-only (and not also
    /// destructive) runs without asking.
    pub fn asks_first(&self, mode: ApprovalMode) -> bool {
        match mode {
            ApprovalMode::Always => true,
            ApprovalMode::Never => false,
            ApprovalMode::Annotations => !self.read_only(),
        }
    }
}

impl ServerDef {
    /// One call's deadline.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS))
    }

    /// The cap of one answer.
    pub fn max_response_bytes(&self) -> u64 {
        self.max_response_bytes
            .unwrap_or(DEFAULT_MAX_RESPONSE_BYTES)
    }

    /// Whether a call of `tool` asks a person first.
    pub fn asks_first(&self, tool: &DiscoveredTool) -> bool {
        let mode = self
            .require_approval
            .get(&tool.name)
            .copied()
            .unwrap_or_default();
        tool.asks_first(mode)
    }

    /// The tools it offers: what it listed, less those the allow-list
    /// leaves out (`None` before discovery).
    pub fn offered(&self) -> Option<impl Iterator<Item = &DiscoveredTool>> {
        let discovered = self.discovered.as_ref()?;
        Some(discovered.iter().filter(|tool| {
            self.tools
                .as_ref()
                .is_none_or(|allowed| allowed.contains(&tool.name))
        }))
    }

    /// The settings that say which server this is (how it is reached),
    /// as JSON: two processes with the same connection talk to the same
    /// server, and a stored version may use a server only when the
    /// serving file names the same connection.
    pub fn connection(&self) -> Value {
        let all = serde_json::to_value(self).unwrap_or_default();
        CONNECTION
            .iter()
            .map(|key| (key.to_string(), all.get(key).cloned().unwrap_or_default()))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    /// Why the definition of server `name` cannot be used, if it cannot.
    pub fn check(&self, name: &str) -> Result<(), String> {
        let problem = |what: String| Err(format!("mcp server {name}: {what}"));
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            || name.contains("__")
        {
            return problem(
                "a server's name is letters, digits, '-' and single '_' (it prefixes its tools' names)"
                    .into(),
            );
        }
        match self.transport {
            Transport::Stdio => {
                if self.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
                    return problem("transport = \"stdio\" needs a command".into());
                }
                if self.url.is_some() || !self.headers.is_empty() {
                    return problem("url and headers are for transport = \"http\"".into());
                }
            }
            Transport::Http => {
                let Some(url) = &self.url else {
                    return problem("transport = \"http\" needs a url".into());
                };
                if self.command.is_some() || !self.args.is_empty() || !self.env.is_empty() {
                    return problem("command, args and env are for transport = \"stdio\"".into());
                }
                check_url(url).or_else(&problem)?;
                for header in self.headers.keys() {
                    if reqwest::header::HeaderName::from_bytes(header.as_bytes()).is_err() {
                        return problem(format!("{header:?} is not a header name"));
                    }
                }
            }
        }
        for variable in self.env.iter().chain(self.headers.values()) {
            if variable.is_empty() || variable.contains('=') || variable.contains('\0') {
                return problem(format!(
                    "{variable:?} is not an environment variable's name"
                ));
            }
        }
        match self.timeout_ms {
            Some(ms) if !(1..=MAX_TIMEOUT_MS).contains(&ms) => {
                return problem(format!("timeout_ms {ms} is not from 1 to {MAX_TIMEOUT_MS}"));
            }
            _ => {}
        }
        match self.max_response_bytes {
            Some(bytes) if !(1..=MAX_RESPONSE_BYTES).contains(&bytes) => {
                return problem(format!(
                    "max_response_bytes {bytes} is not from 1 to {MAX_RESPONSE_BYTES}"
                ));
            }
            _ => {}
        }
        if let Some(allowed) = &self.tools {
            let named = self
                .require_approval
                .keys()
                .map(|tool| ("require_approval", tool))
                .chain(self.approvals.keys().map(|tool| ("approvals", tool)));
            for (setting, tool) in named {
                if !allowed.contains(tool) {
                    return problem(format!(
                        "{setting} names {tool:?}, which its tools list leaves out"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// An http server's URL: https, or plain http to this machine only (what
/// it is sent may be a person's data, and its headers credentials).
fn check_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| format!("invalid url {}: {e}", crate::tool::redact_url(url)))?;
    match parsed.scheme() {
        "https" | "http" if !crate::net::clear_text_elsewhere(&parsed) => Ok(()),
        _ => Err(format!(
            "url {} must be https (plain http only to this machine)",
            crate::tool::redact_url(url)
        )),
    }
}

#[cfg(test)]
mod tests;
