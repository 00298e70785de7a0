//! An agent file listed again: what a process serves once an MCP server
//! says its tools changed (`notifications/tools/list_changed`), or once a
//! server that could not be listed when the file was loaded can be. What a
//! server lists is part of the versions of the agents that name it, so a
//! changed listing is new versions; runs keep the version they are pinned
//! to.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::mcp::Server;
use crate::tool::Tool;
use crate::{Registry, Result};

/// An agent file as written (its JSON, before any listing) and the tools
/// registered in code beside it.
pub(crate) struct Written {
    pub(crate) tree: serde_json::Value,
    pub(crate) tools: Vec<Arc<dyn Tool>>,
}

impl Registry {
    /// This registry's agent file with the tools of its MCP servers listed
    /// again (a server that cannot be listed now keeps the listing it had
    /// here); `None` for one not loaded with its servers listed (built in
    /// code, or by `from_toml`), which has nothing to list.
    pub async fn relisted(&self) -> Option<Result<Registry>> {
        let written = self.written.clone()?;
        Some(Registry::listed(written, Some(&self.file)).await)
    }

    /// Whether `other` serves otherwise than this one: another version of
    /// an agent, an agent this one does not serve, or not one it does.
    pub fn serves_otherwise(&self, other: &Registry) -> bool {
        let served = |registry: &Registry| -> BTreeMap<String, String> {
            registry
                .versions
                .iter()
                .map(|(agent, version)| (agent.clone(), version.hash.clone()))
                .collect()
        };
        served(self) != served(other)
            || self.delayed.keys().collect::<BTreeSet<_>>()
                != other.delayed.keys().collect::<BTreeSet<_>>()
    }

    /// The MCP servers this registry's agents name, as this process talks
    /// to them (one session each, shared with every registry of the file).
    pub fn mcp_servers(&self) -> Vec<Arc<Server>> {
        let Some(written) = &self.written else {
            return Vec::new();
        };
        let Ok((defs, named)) = crate::mcp::servers_of(&written.tree) else {
            return Vec::new();
        };
        defs.iter()
            .filter(|(name, _)| named.contains(name.as_str()))
            .map(|(name, def)| crate::mcp::client::shared(name, def))
            .collect()
    }
}
