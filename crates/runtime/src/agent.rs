//! Agents and the registry a worker resolves them from.

use std::collections::HashMap;
use std::sync::Arc;

use agentenkit_core::approvals::ApprovalRule;
use agentenkit_core::questions::QuestionSet;

use crate::config::{
    IntakeWhen, DEFAULT_HITL_TTL_MS, DEFAULT_MAX_CHILDREN_PER_STEP, DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_RUNS_PER_TREE,
};
use crate::model::Model;
use crate::tool::{RegisteredTool, Tool, ToolSpec};
use crate::{Error, Result};

/// The name of the built-in question tool. Never registered, no handler:
/// the kind `ask` is resolved from the agent's configuration alone.
pub const ASK_TOOL: &str = "ask";

mod load;
mod relist;

/// An agent: a model, a system prompt and the tools it may call.
#[derive(Clone)]
pub struct Agent {
    pub name: String,
    /// What the agent is for, shown to people choosing one (`GET /agents`).
    pub description: Option<String>,
    pub system: String,
    pub model: Arc<dyn Model>,
    pub tools: Vec<String>,
    pub subagents: Vec<String>,
    pub hitl_ttl_ms: u64,
    /// Offer the model the built-in `ask` tool.
    pub ask: bool,
    /// Questions asked before the first model call of a turn.
    pub intake: Option<Intake>,
    /// What a deploy means for its runs in flight.
    pub on_deploy: crate::config::OnDeploy,
    /// What a message sent while a run of it is active does, when the
    /// message does not say.
    pub on_active: agentenkit_core::conversation::OnActive,
    /// What one run may spend before it asks (model calls at
    /// [`agentenkit_core::budget::DEFAULT_MODEL_CALLS`] unless it says).
    pub budget: agentenkit_core::budget::Limits,
    /// What the thread's runs may spend together before one asks (none
    /// unless it says).
    pub thread_budget: agentenkit_core::budget::Limits,
    /// Its model's price, when the file names one: what `cost_usd`
    /// budgets count.
    pub price: Option<agentenkit_core::budget::Price>,
    /// Its model's limits across the fleet, when the file sets any.
    pub provider_limit: Option<agentenkit_store::ProviderLimit>,
}

/// A configured intake: a validated question set and when to ask it.
#[derive(Debug, Clone, PartialEq)]
pub struct Intake {
    pub set: QuestionSet,
    pub when: IntakeWhen,
}

impl Intake {
    /// Validates the set; an invalid intake is a configuration error.
    pub fn new(set: QuestionSet, when: IntakeWhen) -> Result<Intake> {
        let issues = set.issues();
        if !issues.is_empty() {
            let listed: Vec<String> = issues
                .iter()
                .map(|i| format!("{}: {}", i.path, i.message))
                .collect();
            return Err(Error::Config(format!(
                "invalid intake: {}",
                listed.join("; ")
            )));
        }
        Ok(Intake { set, when })
    }
}

impl Agent {
    pub fn new(name: impl Into<String>, model: Arc<dyn Model>) -> Self {
        Self {
            name: name.into(),
            description: None,
            system: String::new(),
            model,
            tools: vec![],
            subagents: vec![],
            hitl_ttl_ms: DEFAULT_HITL_TTL_MS,
            ask: false,
            intake: None,
            on_deploy: crate::config::OnDeploy::Pin,
            on_active: agentenkit_core::conversation::OnActive::Reject,
            budget: agentenkit_core::budget::Limits::default().for_run(),
            thread_budget: agentenkit_core::budget::Limits::default(),
            price: None,
            provider_limit: None,
        }
    }

    /// Offers the model the built-in `ask` tool.
    pub fn ask(mut self, ask: bool) -> Self {
        self.ask = ask;
        self
    }

    /// Asks `intake` before the first model call of a turn.
    pub fn intake(mut self, intake: Intake) -> Self {
        self.intake = Some(intake);
        self
    }

    /// What the agent is for, shown to people choosing one.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    pub fn system(mut self, system: impl Into<String>) -> Self {
        self.system = system.into();
        self
    }

    pub fn tool(mut self, name: impl Into<String>) -> Self {
        self.tools.push(name.into());
        self
    }

    /// Offers the model a delegation tool named after `agent`.
    pub fn subagent(mut self, agent: impl Into<String>) -> Self {
        self.subagents.push(agent.into());
        self
    }

    pub fn hitl_ttl_ms(mut self, ttl_ms: u64) -> Self {
        self.hitl_ttl_ms = ttl_ms;
        self
    }
}

/// The longest `timeout_ms` an http tool may set: an hour (a longer job
/// should park and be answered by `respond`).
pub const MAX_HTTP_TOOL_TIMEOUT_MS: u64 = 3_600_000;

/// Every agent and tool a deployment knows, by name.
#[derive(Clone, Default)]
pub struct Registry {
    agents: HashMap<String, Arc<Agent>>,
    pub(crate) tools: HashMap<String, RegisteredTool>,
    delegation: DelegationLimits,
    /// Tools whose calls need several people's approval.
    approvals: HashMap<String, ApprovalRule>,
    /// Where events are sent, and the inbox's address.
    notifications: Arc<crate::notify::Notifications>,
    /// Tools whose open calls are reminded to a target after a while.
    escalations: HashMap<String, crate::notify::Escalation>,
    /// Tool calls one model response may make (the default when `None`).
    max_tool_calls_per_step: Option<u32>,
    /// The caps runs start under (docs/budgets.md, "Fair shares").
    pub(crate) run_limits: agentenkit_core::shares::RunLimits,
    /// The agent file this registry was built from, as JSON (`Null` for a
    /// registry built in code), and the version of each of its agents.
    pub(crate) file: Arc<serde_json::Value>,
    pub(crate) versions: Arc<HashMap<String, crate::versions::AgentVersion>>,
    /// Agents left out because an MCP server they name could not be
    /// listed when the file was loaded, with why.
    pub(crate) delayed: Arc<std::collections::BTreeMap<String, String>>,
    /// The MCP servers of the file whose tools were not listed, with why.
    pub(crate) unlisted: Arc<std::collections::BTreeMap<String, String>>,
    /// The file as written and the tools in code, when it was loaded with
    /// its servers' tools listed: what it is listed again from.
    pub(crate) written: Option<Arc<relist::Written>>,
}

/// What bounds delegation, so that one model response or one turn cannot
/// start runs without end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelegationLimits {
    /// How deep runs nest (the root run is depth 0).
    pub max_depth: u32,
    /// Sub-agents one model response may start.
    pub max_children_per_step: u32,
    /// Runs one turn's tree may hold, its root included.
    pub max_runs_per_tree: u32,
}

impl Default for DelegationLimits {
    fn default() -> Self {
        Self {
            max_depth: DEFAULT_MAX_DEPTH,
            max_children_per_step: DEFAULT_MAX_CHILDREN_PER_STEP,
            max_runs_per_tree: DEFAULT_MAX_RUNS_PER_TREE,
        }
    }
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// How deep delegations may nest: a delegation that would start a run
    /// deeper than this is a tool failure the model sees.
    pub fn max_depth(&self) -> u32 {
        self.delegation.max_depth
    }

    pub fn with_max_depth(mut self, max_depth: u32) -> Self {
        self.delegation.max_depth = max_depth;
        self
    }

    /// Every limit on delegation (depth, children per step, runs per tree).
    pub fn delegation_limits(&self) -> DelegationLimits {
        self.delegation
    }

    pub fn with_delegation_limits(mut self, limits: DelegationLimits) -> Self {
        self.delegation = limits;
        self
    }

    /// Tool calls one model response may make: the calls past it are
    /// failures the model sees.
    pub fn max_tool_calls_per_step(&self) -> u32 {
        self.max_tool_calls_per_step
            .unwrap_or(crate::config::DEFAULT_MAX_TOOL_CALLS_PER_STEP)
    }

    pub fn with_max_tool_calls_per_step(mut self, max: u32) -> Self {
        self.max_tool_calls_per_step = Some(max);
        self
    }

    /// The expiry delays parks of these agents use unless a tool asks for
    /// its own: worth a delay lane each on the broker (one hop, not one per
    /// set bit). The default TTL is always one, for agents added later.
    pub fn delay_lanes(&self) -> Vec<u64> {
        let mut lanes: Vec<u64> = self
            .agents
            .values()
            .map(|a| a.hitl_ttl_ms)
            .chain([DEFAULT_HITL_TTL_MS])
            .chain(
                self.escalations
                    .values()
                    .map(|e| e.remind_after.as_millis() as u64),
            )
            .collect();
        lanes.sort_unstable();
        lanes.dedup();
        lanes
    }

    pub fn with_tool(mut self, tool: Arc<dyn Tool>) -> Result<Self> {
        let registered = code_tool(tool)?;
        self.tools.insert(registered.spec.name.clone(), registered);
        Ok(self)
    }

    pub fn with_agent(mut self, agent: Agent) -> Self {
        self.agents.insert(agent.name.clone(), Arc::new(agent));
        self
    }

    /// Every name an agent refers to must exist.
    pub fn check(&self) -> Result<()> {
        for agent in self.agents.values() {
            for tool in &agent.tools {
                if !self.tools.contains_key(tool) {
                    return Err(Error::Config(self.unknown_tool(&agent.name, tool)));
                }
            }
            for sub in &agent.subagents {
                if !self.agents.contains_key(sub) {
                    return Err(Error::Config(format!(
                        "agent {:?} names unknown sub-agent {sub:?}",
                        agent.name
                    )));
                }
            }
        }
        if let Some(cycle) = self.delegation_cycle() {
            return Err(Error::Config(format!(
                "delegations form a cycle: {}",
                cycle.join(" → ")
            )));
        }
        Ok(())
    }

    /// Why `agent` may not name `tool`, which no tool is registered as.
    fn unknown_tool(&self, agent: &str, tool: &str) -> String {
        let Some((server, _)) = crate::mcp::split(tool) else {
            return format!("agent {agent:?} names unknown tool {tool:?}");
        };
        let why = match self.file.pointer(&format!("/mcp/{server}")) {
            None => format!("but there is no [mcp.{server}]"),
            Some(def) if def.get("discovered").is_none() => format!(
                "a tool of mcp server {server}, whose tools were not listed (load the file with Registry::load)"
            ),
            Some(_) => format!("which mcp server {server} does not offer"),
        };
        format!("agent {agent:?} names {tool:?}, {why}")
    }

    /// A cycle of delegations (an agent that can reach itself through its
    /// sub-agents), as the names along it, first repeated at the end.
    fn delegation_cycle(&self) -> Option<Vec<String>> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            OnPath,
            Done,
        }
        fn visit<'a>(
            registry: &'a Registry,
            name: &'a str,
            marks: &mut HashMap<&'a str, Mark>,
            path: &mut Vec<&'a str>,
        ) -> Option<Vec<String>> {
            match marks.get(name) {
                Some(Mark::Done) => return None,
                Some(Mark::OnPath) => {
                    let start = path.iter().position(|n| *n == name).unwrap_or(0);
                    let mut cycle: Vec<String> =
                        path[start..].iter().map(|n| n.to_string()).collect();
                    cycle.push(name.to_owned());
                    return Some(cycle);
                }
                None => {}
            }
            marks.insert(name, Mark::OnPath);
            path.push(name);
            if let Some(agent) = registry.agents.get(name) {
                for sub in &agent.subagents {
                    if let Some(cycle) = visit(registry, sub, marks, path) {
                        return Some(cycle);
                    }
                }
            }
            path.pop();
            marks.insert(name, Mark::Done);
            None
        }
        let mut names: Vec<&str> = self.agents.keys().map(String::as_str).collect();
        names.sort_unstable();
        let mut marks = HashMap::new();
        names
            .into_iter()
            .find_map(|name| visit(self, name, &mut marks, &mut Vec::new()))
    }

    pub fn agent(&self, name: &str) -> Option<&Arc<Agent>> {
        self.agents.get(name)
    }

    pub fn tool(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name)
    }

    /// Calls of `tool` (which must need confirmation) stay open until
    /// `rule.required` distinct people of `rule.from` approve them.
    pub fn with_approval_rule(mut self, tool: &str, rule: ApprovalRule) -> Result<Self> {
        let confirmed = self
            .tools
            .get(tool)
            .is_some_and(|t| t.tool.requires_confirmation());
        if !confirmed {
            return Err(Error::Config(format!(
                "tool {tool}: approvals need a tool with requires_confirmation = true"
            )));
        }
        if rule.required == 0 {
            return Err(Error::Config(format!(
                "tool {tool}: approvals.required must be at least 1"
            )));
        }
        self.approvals.insert(tool.to_owned(), rule);
        Ok(self)
    }

    /// Who must approve a call of `tool`: one person, unless the tool says
    /// more.
    pub fn approval_rule(&self, tool: &str) -> ApprovalRule {
        self.approvals.get(tool).cloned().unwrap_or_default()
    }

    /// The tools that need more than one approval, with their rules, by
    /// tool name.
    pub fn approval_rules(&self) -> Vec<(&str, &ApprovalRule)> {
        let mut rules: Vec<_> = self
            .approvals
            .iter()
            .filter(|(_, rule)| !rule.is_single())
            .map(|(tool, rule)| (tool.as_str(), rule))
            .collect();
        rules.sort_by_key(|(tool, _)| *tool);
        rules
    }

    /// Sends events to these targets (replacing any set before).
    pub fn with_notifications(mut self, notifications: crate::notify::Notifications) -> Self {
        self.notifications = Arc::new(notifications);
        self
    }

    /// The deployment's notification targets.
    pub fn notifications(&self) -> &crate::notify::Notifications {
        &self.notifications
    }

    /// The events whose commits write a notification to the outbox: what
    /// some target wants (give it to the store: `Store::with_notified`).
    pub fn notified_events(&self) -> agentenkit_core::notify::NotifiedEvents {
        self.notifications.events()
    }

    /// Calls of `tool` still waiting for a person after
    /// `escalation.remind_after` are reminded to `escalation.target` (a
    /// notification target: add the targets first).
    pub fn with_escalation(
        mut self,
        tool: &str,
        escalation: crate::notify::Escalation,
    ) -> Result<Self> {
        if !self.tools.contains_key(tool) {
            return Err(Error::Config(format!(
                "escalation of unknown tool {tool:?}"
            )));
        }
        if self.notifications.target(&escalation.target).is_none() {
            return Err(Error::Config(format!(
                "tool {tool}: escalate_to {:?} is not a notification target",
                escalation.target
            )));
        }
        self.escalations.insert(tool.to_owned(), escalation);
        Ok(self)
    }

    /// Who is reminded of a call of `tool` still open, and when.
    pub fn escalation(&self, tool: &str) -> Option<&crate::notify::Escalation> {
        self.escalations.get(tool)
    }

    /// The agent file this registry was built from, as JSON, with what
    /// discovery listed (`Null` for a registry built in code).
    pub fn file(&self) -> &serde_json::Value {
        &self.file
    }

    /// Agents left out because an MCP server they name could not be
    /// listed when the file was loaded, with why: their turns are refused
    /// until a process that could list it serves them.
    pub fn delayed_agents(&self) -> &std::collections::BTreeMap<String, String> {
        &self.delayed
    }

    /// The file's MCP servers whose tools were not listed when it was
    /// loaded, with why (could not be reached, named by no agent, or the
    /// file loaded without listing).
    pub fn unlisted_servers(&self) -> &std::collections::BTreeMap<String, String> {
        &self.unlisted
    }

    pub fn agent_names(&self) -> impl Iterator<Item = &str> {
        self.agents.keys().map(String::as_str)
    }

    /// The tools `agent` offers its model, in its declared order, then one
    /// delegation tool per sub-agent.
    /// The read-only tools (`Tool::read_only`) that runs of `agent` may
    /// call, its sub-agents' (to any depth) included.
    pub fn read_only_tools(&self, agent: &str) -> Vec<String> {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![agent.to_owned()];
        let mut read_only = std::collections::BTreeSet::new();
        while let Some(name) = todo.pop() {
            if !seen.insert(name.clone()) {
                continue;
            }
            let Some(agent) = self.agent(&name) else {
                continue;
            };
            for tool in &agent.tools {
                if self.tool(tool).is_some_and(|t| t.tool.read_only()) {
                    read_only.insert(tool.clone());
                }
            }
            todo.extend(agent.subagents.iter().cloned());
        }
        read_only.into_iter().collect()
    }

    /// Whether any agent sends a message to a busy thread somewhere other
    /// than back (its `on_active` is not `reject`).
    pub fn any_on_active(&self) -> bool {
        self.agent_names().any(|name| {
            self.agent(name)
                .is_some_and(|a| a.on_active != agentenkit_core::conversation::OnActive::Reject)
        })
    }

    pub fn tool_specs(&self, agent: &Agent) -> Vec<ToolSpec> {
        let tools = agent
            .tools
            .iter()
            .filter_map(|name| self.tools.get(name))
            .map(|t| t.spec.clone());
        let delegations = agent.subagents.iter().map(|name| delegation_spec(name));
        let ask = agent.ask.then(|| ToolSpec {
            name: ASK_TOOL.to_owned(),
            description: "Ask the user questions before doing work they should scope. Pre-pick \
                          the answer you would choose for every question (defaults), so \
                          confirming is enough."
                .to_owned(),
            input_schema: agentenkit_core::questions::ask_tool_schema(),
        });
        tools.chain(delegations).chain(ask).collect()
    }
}

/// The tool through which a model delegates to sub-agent `name`.
pub fn delegation_spec(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: format!(
            "Delegate a task to the {name} agent; its final answer is the result."
        ),
        input_schema: delegation_schema(),
    }
}

pub fn delegation_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "required": ["task"],
        "properties": { "task": { "type": "string", "minLength": 1 } },
        "additionalProperties": false
    })
}

/// A tool registered in code, checked: its schema compiles, and it is not
/// named as the built-in question tool.
pub(crate) fn code_tool(tool: Arc<dyn Tool>) -> Result<RegisteredTool> {
    let registered = RegisteredTool::new(tool).map_err(Error::Config)?;
    if registered.spec.name == ASK_TOOL {
        return Err(Error::Config(
            "\"ask\" is the built-in question tool; enable it with ask = true".into(),
        ));
    }
    if registered.spec.name == agentenkit_core::budget::REQUEST_NAME {
        return Err(Error::Config(
            "\"budget\" names the requests for more budget; call the tool something else".into(),
        ));
    }
    Ok(registered)
}

#[cfg(test)]
mod tests;
