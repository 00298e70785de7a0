//! Agent versions: each agent of an agent file, resolved to what decides
//! how its runs go (its system prompt, model settings, tools with their
//! schemas and flags, approval rules, TTLs and endpoints, sub-agents,
//! intake, the file's limits), kept under the SHA-256 of its canonical
//! JSON. A run records the version it started on and continues on it,
//! whatever a later deploy says.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use agentenkit_core::canonical::{canonical, sha256_hex};
use serde_json::{Map, Value};

pub mod endpoints;

/// The file's settings that bound every run and so belong to each version.
const LIMITS: [&str; 4] = [
    "max_depth",
    "max_children_per_step",
    "max_runs_per_tree",
    "max_tool_calls_per_step",
];

/// An agent's settings that belong to the deployment, not to its versions
/// (docs/budgets.md, "Fair shares").
const AGENT_SHARES: [&str; 2] = ["max_concurrent_runs", "fair_key"];

/// The file's settings that belong to the deployment, not to an agent:
/// where events are sent. A pinned run uses the deployment's.
pub(crate) const DEPLOYMENT: [&str; 2] = ["notifications", "ui_url"];

/// The wait before recording the versions again after a failure, and
/// the longest it grows to.
const RECORD_FIRST_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
const RECORD_LONGEST_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// One agent's definition as a version: what it is, and its hash.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentVersion {
    pub agent: String,
    /// SHA-256 (lowercase hex) of the definition's canonical JSON (RFC 8785).
    pub hash: String,
    /// An agent file (as JSON) holding the agent, the sub-agents it can
    /// reach, the tools they offer, and the file's limits.
    pub definition: Value,
}

impl AgentVersion {
    /// The first 12 hex digits, as people are shown a version.
    pub fn short(hash: &str) -> &str {
        hash.get(..12).unwrap_or(hash)
    }
}

/// The version of every agent of `file` (an agent file as JSON).
pub fn versions_of(file: &Value) -> HashMap<String, AgentVersion> {
    let agents = file.get("agents").and_then(Value::as_object);
    agents
        .map(|agents| {
            agents
                .keys()
                .map(|name| {
                    let definition = definition_of(file, name);
                    let hash = sha256_hex(canonical(&definition).as_bytes());
                    let version = AgentVersion {
                        agent: name.clone(),
                        hash,
                        definition,
                    };
                    (name.clone(), version)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The part of `file` that decides how runs of `agent` go: the agent and
/// every sub-agent it reaches, the tools they name, and the limits.
fn definition_of(file: &Value, agent: &str) -> Value {
    let agents = file.get("agents").and_then(Value::as_object);
    let tools = file.get("tools").and_then(Value::as_object);
    let mut reached = BTreeSet::new();
    let mut to_visit = vec![agent.to_owned()];
    while let Some(name) = to_visit.pop() {
        if !reached.insert(name.clone()) {
            continue;
        }
        let subagents = agents
            .and_then(|a| a.get(&name))
            .and_then(|def| def.get("subagents"))
            .and_then(Value::as_array);
        for sub in subagents.into_iter().flatten().filter_map(Value::as_str) {
            if agents.is_some_and(|a| a.contains_key(sub)) {
                to_visit.push(sub.to_owned());
            }
        }
    }
    let mut chosen_agents = BTreeMap::new();
    let mut named_tools = BTreeSet::new();
    for name in &reached {
        if let Some(def) = agents.and_then(|a| a.get(name)) {
            for tool in def
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                named_tools.insert(tool.to_owned());
            }
            let mut def = def.clone();
            // Shares of the fleet are the deployment's: a new cap is not a
            // new version of the agent (the current file's always apply).
            if let Some(def) = def.as_object_mut() {
                for share in AGENT_SHARES {
                    def.remove(share);
                }
            }
            chosen_agents.insert(name.clone(), def);
        }
    }
    let chosen_tools: Map<String, Value> = named_tools
        .iter()
        .filter_map(|name| {
            let def = tools.and_then(|t| t.get(name))?.clone();
            Some((name.clone(), def))
        })
        .collect();
    // The MCP servers they name tools of, with what discovery listed.
    let servers = file.get("mcp").and_then(Value::as_object);
    let chosen_servers: Map<String, Value> = named_tools
        .iter()
        .filter_map(|tool| crate::mcp::split(tool))
        .filter_map(|(server, _)| {
            let def = servers.and_then(|s| s.get(server))?.clone();
            Some((server.to_owned(), def))
        })
        .collect();
    let mut definition = Map::new();
    definition.insert(
        "agents".into(),
        Value::Object(chosen_agents.into_iter().collect()),
    );
    if !chosen_tools.is_empty() {
        definition.insert("tools".into(), Value::Object(chosen_tools));
    }
    if !chosen_servers.is_empty() {
        definition.insert("mcp".into(), Value::Object(chosen_servers));
    }
    for limit in LIMITS {
        if let Some(value) = file.get(limit) {
            definition.insert(limit.into(), value.clone());
        }
    }
    Value::Object(definition)
}

/// The agent file a pinned run is served from: its version's definition
/// with the deployment's own settings (notification targets) of `current`.
///
/// A reminder to a target the deployment no longer has is left out: the
/// run goes on without it rather than not at all.
pub(crate) fn with_deployment(definition: &Value, current: &Value) -> Value {
    let mut file = definition.as_object().cloned().unwrap_or_default();
    for key in DEPLOYMENT {
        match current.get(key) {
            Some(value) => file.insert(key.into(), value.clone()),
            None => file.remove(key),
        };
    }
    let targets = current.get("notifications").and_then(Value::as_object);
    // Tools and MCP servers both hold reminders.
    for section in ["tools", "mcp"] {
        let Some(Value::Object(tools)) = file.get_mut(section) else {
            continue;
        };
        for tool in tools.values_mut().filter_map(Value::as_object_mut) {
            let known = tool
                .get("escalate_to")
                .and_then(Value::as_str)
                .is_none_or(|target| targets.is_some_and(|t| t.contains_key(target)));
            if !known {
                tool.remove("escalate_to");
                tool.remove("remind_after");
            }
        }
    }
    Value::Object(file)
}

impl crate::Registry {
    /// The version of `agent` this registry serves, when it was loaded
    /// from an agent file.
    pub fn agent_version(&self, agent: &str) -> Option<&AgentVersion> {
        self.versions.get(agent)
    }

    /// Every version of this registry's agents.
    pub fn agent_versions(&self) -> impl Iterator<Item = &AgentVersion> {
        self.versions.values()
    }

    /// The store as this deployment writes with it: a `Notify` outbox row
    /// for each event the targets want, and each turn's run pinned to its
    /// agent's version.
    pub fn prepare(&self, store: agentenkit_store::Store) -> agentenkit_store::Store {
        store
            .with_notified(self.notified_events())
            .with_run_limits(self.run_limits.clone())
            .with_agent_versions(
                self.versions
                    .iter()
                    .map(|(agent, version)| (agent.clone(), version.hash.clone()))
                    .collect(),
            )
    }

    /// Records this registry's versions, so a worker with another agent
    /// file can serve the runs pinned to them. Every process that loads an
    /// agent file does, once, when it starts.
    pub async fn record_versions(
        &self,
        store: &agentenkit_store::Store,
    ) -> agentenkit_store::Result<()> {
        // Stored without the tokens URLs may carry (the hash covers them).
        let stored: Vec<Value> = self
            .versions
            .values()
            .map(|v| endpoints::stored_form(&v.definition))
            .collect();
        let versions: Vec<(&str, &str, &Value)> = self
            .versions
            .values()
            .zip(&stored)
            .map(|(v, definition)| (v.hash.as_str(), v.agent.as_str(), definition))
            .collect();
        store.record_agent_versions(&versions).await
    }

    /// Records this registry's versions: at once when the store takes
    /// them, else in the background, trying again (1 s, doubling to 30 s)
    /// until it has. The flag returned is set once they are recorded; a
    /// process serves on meanwhile (the API says it is not ready), since
    /// a run it pins to an unrecorded version can be served only by a
    /// process whose own file has that version.
    pub async fn record_versions_until_done(
        self: &std::sync::Arc<Self>,
        store: &agentenkit_store::Store,
    ) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let recorded = std::sync::Arc::new(AtomicBool::new(false));
        match self.record_versions(store).await {
            Ok(()) => recorded.store(true, Ordering::Relaxed),
            Err(e) => {
                tracing::warn!(error = %e, "could not record the agent versions; trying again");
                let (registry, store, flag) = (self.clone(), store.clone(), recorded.clone());
                tokio::spawn(async move {
                    for attempt in 1.. {
                        let wait =
                            agentenkit_core::notify::retry_delay(RECORD_FIRST_RETRY, attempt);
                        tokio::time::sleep(wait.min(RECORD_LONGEST_WAIT)).await;
                        match registry.record_versions(&store).await {
                            Ok(()) => return flag.store(true, Ordering::Relaxed),
                            Err(e) => {
                                tracing::warn!(error = %e, "could not record the agent versions; trying again")
                            }
                        }
                    }
                });
            }
        }
        recorded
    }

    /// A stored version's definition on its own (without a deployment's
    /// settings or tools in code): what an operator's command checks runs
    /// against.
    pub fn from_definition(definition: &Value) -> crate::Result<crate::Registry> {
        let file: crate::config::AgentFile = serde_json::from_value(definition.clone())
            .map_err(|e| crate::Error::Config(format!("a stored agent version: {e}")))?;
        crate::Registry::from_agent_file(file, definition.clone(), &HashMap::new())
    }

    /// The registry a run pinned to version `hash`, stored as `definition`,
    /// is served from: that version's agents, tools and limits, with this
    /// deployment's notification targets and the tools this process
    /// registered in code; and, when its endpoints are not all ones this
    /// deployment's file names (`endpoints`), why this process does not
    /// send for it (its rules still decide answers and upgrades).
    ///
    /// `agent_versions` is trusted configuration, yet a row is checked
    /// before it configures anything: with the endpoints this deployment
    /// names restored, it must hash to `hash`.
    pub fn pinned(
        &self,
        hash: &str,
        definition: &Value,
    ) -> crate::Result<(crate::Registry, Option<String>)> {
        let (definition, unnamed) = endpoints::restored(definition, &self.file);
        if sha256_hex(canonical(&definition).as_bytes()) != hash {
            // A URL stored without its token, which this deployment does
            // not name, cannot be checked: say so rather than "changed".
            return Err(crate::Error::Config(unnamed.unwrap_or_else(|| {
                "its stored definition does not hash to its version (changed after it was recorded?)"
                    .into()
            })));
        }
        let tree = with_deployment(&definition, &self.file);
        let file: crate::config::AgentFile = serde_json::from_value(tree.clone())
            .map_err(|e| crate::Error::Config(format!("a stored agent version: {e}")))?;
        let defined: BTreeSet<&str> = self
            .file
            .get("tools")
            .and_then(Value::as_object)
            .map(|tools| tools.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let code_tools = self
            .tools
            .iter()
            .filter(|(name, _)| !defined.contains(name.as_str()))
            .map(|(name, tool)| (name.clone(), tool.clone()))
            .collect();
        let registry = crate::Registry::from_agent_file(file, tree, &code_tools)?;
        Ok((registry, unnamed))
    }
}

/// The registries a worker serves runs from: the one it loaded, and one
/// per other version a run it took is pinned to, built once from the
/// stored definition and kept, with why this process does not send for
/// it, if it does not (see [`crate::Registry::pinned`]).
pub struct PinnedRegistries {
    /// The registry this process serves new turns from (its file, listed
    /// again when a server's tools change: see [`Self::replace_current`]).
    current: std::sync::RwLock<std::sync::Arc<crate::Registry>>,
    built: std::sync::Mutex<HashMap<String, Built>>,
    /// Set while a watcher lists the file again for these registries: one
    /// per process, however many parts (a worker, an API) start one.
    watching: std::sync::atomic::AtomicBool,
}

/// A version's registry as built here.
type Built = (std::sync::Arc<crate::Registry>, Option<String>);

/// Why a worker cannot serve a run's version.
#[derive(Debug, thiserror::Error)]
pub enum Unserved {
    #[error("agent {agent:?} version {} was never recorded", AgentVersion::short(.hash))]
    Unrecorded { agent: String, hash: String },
    #[error("agent {agent:?} version {}: {message}", AgentVersion::short(.hash))]
    Unusable {
        agent: String,
        hash: String,
        message: String,
    },
    #[error(transparent)]
    Store(#[from] agentenkit_store::Error),
}

impl PinnedRegistries {
    pub fn new(current: std::sync::Arc<crate::Registry>) -> Self {
        Self {
            current: std::sync::RwLock::new(current),
            built: std::sync::Mutex::default(),
            watching: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The registry this process serves new turns from.
    pub fn current(&self) -> std::sync::Arc<crate::Registry> {
        self.current.read().expect("current registry").clone()
    }

    /// Serves new turns from `next` from now on; the runs pinned to the
    /// versions `next` replaces are served on from the registry it
    /// replaces, kept as theirs (before the swap, so none of them is
    /// looked up in the store meanwhile).
    pub fn replace_current(&self, next: std::sync::Arc<crate::Registry>) {
        let replaced = self.current();
        {
            let mut built = self.built.lock().expect("pinned registries");
            for version in replaced.agent_versions() {
                let kept = next
                    .agent_version(&version.agent)
                    .is_some_and(|v| v.hash == version.hash);
                if !kept {
                    built
                        .entry(version.hash.clone())
                        .or_insert_with(|| (replaced.clone(), None));
                }
            }
        }
        *self.current.write().expect("current registry") = next;
    }

    /// Whether this process now watches its MCP servers for these
    /// registries: true for the first caller only, until it stops.
    pub(crate) fn start_watching(&self, on: bool) -> bool {
        self.watching.swap(on, std::sync::atomic::Ordering::AcqRel) != on
    }

    /// The registry a run of `agent` pinned to `version` is served from:
    /// the loaded one when it has that version (or the run has none), else
    /// the version's own, from the store.
    pub async fn for_run(
        &self,
        store: &agentenkit_store::Store,
        agent: &str,
        version: Option<&str>,
    ) -> Result<std::sync::Arc<crate::Registry>, Unserved> {
        let current = self.current();
        let Some(hash) = version else {
            return Ok(current);
        };
        if current.agent_version(agent).is_some_and(|v| v.hash == hash) {
            return Ok(current);
        }
        if let Some((built, _)) = self.built.lock().expect("pinned registries").get(hash) {
            return Ok(built.clone());
        }
        let stored =
            store
                .stored_agent_version(hash)
                .await?
                .ok_or_else(|| Unserved::Unrecorded {
                    agent: agent.to_owned(),
                    hash: hash.to_owned(),
                })?;
        let (registry, unnamed) =
            current
                .pinned(hash, &stored.definition)
                .map_err(|e| Unserved::Unusable {
                    agent: agent.to_owned(),
                    hash: hash.to_owned(),
                    message: e.to_string(),
                })?;
        let registry = std::sync::Arc::new(registry);
        self.built
            .lock()
            .expect("pinned registries")
            .insert(hash.to_owned(), (registry.clone(), unnamed));
        Ok(registry)
    }

    /// Whether this process sends (calls models and tools) for a run of
    /// `agent` on `version`, whose registry [`PinnedRegistries::for_run`]
    /// built: not when the version's endpoints are not all ones this
    /// deployment's file names.
    pub fn sends_for(&self, agent: &str, version: Option<&str>) -> Result<(), Unserved> {
        let Some(hash) = version else {
            return Ok(());
        };
        let built = self.built.lock().expect("pinned registries");
        match built.get(hash) {
            Some((_, Some(unnamed))) => Err(Unserved::Unusable {
                agent: agent.to_owned(),
                hash: hash.to_owned(),
                message: unnamed.clone(),
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file() -> Value {
        json!({
            "max_depth": 3,
            "ui_url": "https://x",
            "notifications": { "ops": { "url": "https://hook" } },
            "agents": {
                "mailer": { "system": "v1", "tools": ["send_email"], "subagents": ["writer"],
                            "model": { "provider": "scripted", "script": [] } },
                "writer": { "system": "w", "tools": ["lookup"],
                            "model": { "provider": "scripted", "script": [] } },
                "other": { "system": "o", "tools": ["other_tool"],
                           "model": { "provider": "scripted", "script": [] } },
            },
            "tools": {
                "send_email": { "type": "echo", "requires_confirmation": true },
                "lookup": { "type": "echo" },
                "other_tool": { "type": "echo" },
            }
        })
    }

    #[test]
    fn a_version_holds_its_agent_its_sub_agents_their_tools_and_the_limits() {
        let versions = versions_of(&file());
        let mailer = &versions["mailer"].definition;
        let agents: Vec<&String> = mailer["agents"].as_object().unwrap().keys().collect();
        assert_eq!(agents, ["mailer", "writer"]);
        let tools: Vec<&String> = mailer["tools"].as_object().unwrap().keys().collect();
        assert_eq!(tools, ["lookup", "send_email"]);
        assert_eq!(mailer["max_depth"], 3);
        assert!(
            mailer.get("notifications").is_none(),
            "the deployment's, not the agent's"
        );
        assert!(mailer.get("ui_url").is_none());
        let writer = &versions["writer"].definition;
        assert_eq!(writer["agents"].as_object().unwrap().len(), 1);
    }

    #[test]
    fn only_what_an_agent_reaches_changes_its_version() {
        let before = versions_of(&file());
        let mut changed = file();
        changed["tools"]["other_tool"]["requires_confirmation"] = json!(true);
        changed["notifications"]["ops"]["url"] = json!("https://elsewhere");
        let after = versions_of(&changed);
        assert_eq!(before["mailer"].hash, after["mailer"].hash);
        assert_ne!(before["other"].hash, after["other"].hash);
        // A sub-agent's change is its parent's too.
        let mut prompt = file();
        prompt["agents"]["writer"]["system"] = json!("w2");
        let after = versions_of(&prompt);
        assert_ne!(before["mailer"].hash, after["mailer"].hash);
        assert_ne!(before["writer"].hash, after["writer"].hash);
        assert_eq!(before["other"].hash, after["other"].hash);
        // Key order does not matter: the hash is of the canonical form.
        let reordered: Value =
            serde_json::from_str(&serde_json::to_string(&file()).unwrap()).unwrap();
        assert_eq!(
            versions_of(&reordered)["mailer"].hash,
            before["mailer"].hash
        );
        assert_eq!(before["mailer"].hash.len(), 64);
        assert_eq!(AgentVersion::short(&before["mailer"].hash).len(), 12);
    }

    #[test]
    fn a_pinned_files_reminder_to_a_target_gone_is_left_out() {
        let mut old = file();
        old["tools"]["send_email"]["remind_after"] = json!("30m");
        old["tools"]["send_email"]["escalate_to"] = json!("ops");
        old["tools"]["lookup"]["remind_after"] = json!("1h");
        old["tools"]["lookup"]["escalate_to"] = json!("chat");
        let version = &versions_of(&old)["mailer"];
        let mut current = file();
        current["notifications"] = json!({ "ops": { "url": "https://hook" } });
        let served = with_deployment(&version.definition, &current);
        assert_eq!(
            served["tools"]["send_email"]["escalate_to"], "ops",
            "still a target"
        );
        assert!(served["tools"]["lookup"].get("escalate_to").is_none());
        assert!(served["tools"]["lookup"].get("remind_after").is_none());
        // And the file builds.
        let registry = crate::Registry::from_toml(
            r#"
[notifications.ops]
url = "https://hook"
secret_env = "X"
[agents.a]
model = { provider = "scripted", script = [] }
"#,
        )
        .unwrap();
        let mut gone = file();
        gone["agents"]["mailer"]["tools"] = json!(["send_email"]);
        gone["tools"]["send_email"]["remind_after"] = json!("30m");
        gone["tools"]["send_email"]["escalate_to"] = json!("chat");
        let gone = &versions_of(&gone)["mailer"];
        let pinned = registry.pinned(&gone.hash, &gone.definition);
        assert!(matches!(pinned, Ok((_, None))), "{:?}", pinned.err());
    }

    #[test]
    fn a_pinned_file_takes_the_deployments_targets() {
        let version = &versions_of(&file())["mailer"];
        let mut current = file();
        current["notifications"] = json!({ "new": { "url": "https://n" } });
        let served = with_deployment(&version.definition, &current);
        assert_eq!(
            served["notifications"],
            json!({ "new": { "url": "https://n" } })
        );
        assert_eq!(served["agents"], version.definition["agents"]);
    }
}
