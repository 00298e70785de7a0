//! Agents and the registry a worker resolves them from.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use agentenkit_core::questions::QuestionSet;

use crate::config::{AgentFile, IntakeWhen, ModelDef, ToolDef, DEFAULT_HITL_TTL_MS};

/// The name of the built-in question tool. Never registered, no handler:
/// the kind `ask` is resolved from the agent's configuration alone.
pub const ASK_TOOL: &str = "ask";
use crate::model::{Model, ScriptedModel};
use crate::tool::{HttpTool, RegisteredTool, Tool, ToolSpec};
use crate::{Error, Result};

/// An agent: a model, a system prompt and the tools it may call.
#[derive(Clone)]
pub struct Agent {
    pub name: String,
    pub system: String,
    pub model: Arc<dyn Model>,
    pub tools: Vec<String>,
    pub subagents: Vec<String>,
    pub hitl_ttl_ms: u64,
    /// Offer the model the built-in `ask` tool.
    pub ask: bool,
    /// Questions asked before the first model call of a turn.
    pub intake: Option<Intake>,
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
            system: String::new(),
            model,
            tools: vec![],
            subagents: vec![],
            hitl_ttl_ms: DEFAULT_HITL_TTL_MS,
            ask: false,
            intake: None,
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

/// Every agent and tool a deployment knows, by name.
#[derive(Clone, Default)]
pub struct Registry {
    agents: HashMap<String, Arc<Agent>>,
    tools: HashMap<String, RegisteredTool>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
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
            .collect();
        lanes.sort_unstable();
        lanes.dedup();
        lanes
    }

    /// Reads an agent file (SPEC §10).
    pub fn from_file(path: &Path) -> Result<Registry> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::AgentFile {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::from_toml(&text).map_err(|e| match e {
            Error::Config(message) => Error::AgentFile {
                path: path.display().to_string(),
                message,
            },
            other => other,
        })
    }

    pub fn from_toml(text: &str) -> Result<Registry> {
        let file = AgentFile::parse(text).map_err(Error::Config)?;
        let mut registry = Registry::new();
        for (name, def) in file.tools {
            let tool: Arc<dyn Tool> = match def {
                ToolDef::Http {
                    url,
                    description,
                    requires_confirmation,
                    input_schema,
                } => Arc::new(HttpTool::new(
                    ToolSpec {
                        name: name.clone(),
                        description,
                        input_schema,
                    },
                    url,
                    requires_confirmation,
                )),
            };
            registry = registry.with_tool(tool)?;
        }
        for (name, def) in file.agents {
            let model: Arc<dyn Model> = match def.model {
                ModelDef::Scripted { script } => Arc::new(ScriptedModel::new(script)),
            };
            let mut agent = Agent::new(name, model).system(def.system);
            agent.tools = def.tools;
            agent.subagents = def.subagents;
            agent.hitl_ttl_ms = def.hitl_ttl_ms.unwrap_or(DEFAULT_HITL_TTL_MS);
            if !(1..=crate::tool::MAX_TTL_MS).contains(&agent.hitl_ttl_ms) {
                return Err(Error::Config(format!(
                    "agent {:?}: hitl_ttl_ms must be from 1 to {} (49 days)",
                    agent.name,
                    crate::tool::MAX_TTL_MS
                )));
            }
            agent.ask = def.ask;
            if let Some(intake) = def.intake {
                let set = QuestionSet {
                    preamble: intake.preamble,
                    questions: intake.questions,
                };
                agent.intake = Some(
                    Intake::new(set, intake.when)
                        .map_err(|e| Error::Config(format!("agent {:?}: {e}", agent.name)))?,
                );
            }
            registry = registry.with_agent(agent);
        }
        registry.check()?;
        Ok(registry)
    }

    pub fn with_tool(mut self, tool: Arc<dyn Tool>) -> Result<Self> {
        let registered = RegisteredTool::new(tool).map_err(Error::Config)?;
        if registered.spec.name == ASK_TOOL {
            return Err(Error::Config(
                "\"ask\" is the built-in question tool; enable it with ask = true".into(),
            ));
        }
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
                    return Err(Error::Config(format!(
                        "agent {:?} names unknown tool {tool:?}",
                        agent.name
                    )));
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
        Ok(())
    }

    pub fn agent(&self, name: &str) -> Option<&Arc<Agent>> {
        self.agents.get(name)
    }

    pub fn tool(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name)
    }

    pub fn agent_names(&self) -> impl Iterator<Item = &str> {
        self.agents.keys().map(String::as_str)
    }

    /// The tools `agent` offers its model, in its declared order, then one
    /// delegation tool per sub-agent.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dangling_names_are_configuration_errors() {
        let err = Registry::from_toml(
            "[agents.a]\ntools = [\"nope\"]\nmodel = { provider = \"scripted\", script = [] }\n",
        )
        .err()
        .unwrap();
        assert_eq!(
            err.to_string(),
            "invalid agent configuration: agent \"a\" names unknown tool \"nope\""
        );
        let err = Registry::from_toml(
            "[agents.a]\nsubagents = [\"b\"]\nmodel = { provider = \"scripted\", script = [] }\n",
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("unknown sub-agent"));
    }

    #[test]
    fn sub_agents_are_offered_as_delegation_tools() {
        let r = Registry::from_toml(
            "[agents.a]\nsubagents = [\"b\"]\nmodel = { provider = \"scripted\", script = [] }\n[agents.b]\nmodel = { provider = \"scripted\", script = [] }\n",
        )
        .unwrap();
        let specs = r.tool_specs(r.agent("a").unwrap());
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].name, "b");
        assert_eq!(specs[0].input_schema["required"][0], "task");
    }

    #[test]
    fn agent_defaults() {
        let r =
            Registry::from_toml("[agents.a]\nmodel = { provider = \"scripted\", script = [] }\n")
                .unwrap();
        let a = r.agent("a").unwrap();
        assert_eq!(a.hitl_ttl_ms, 900_000);
        assert!(r.tool_specs(a).is_empty());
        assert!(r.agent("b").is_none());
    }
}
