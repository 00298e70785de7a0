//! Building a registry from an agent file (SPEC §10): its tools, rules,
//! escalations, agents and limits, and each agent's version.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentenkit_core::questions::QuestionSet;

use super::{Agent, DelegationLimits, Intake, Registry, MAX_HTTP_TOOL_TIMEOUT_MS};
use crate::config::{
    AgentFile, ToolDef, DEFAULT_HITL_TTL_MS, DEFAULT_MAX_CHILDREN_PER_STEP, DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_RUNS_PER_TREE,
};
use crate::tool::{EchoTool, HttpTool, RegisteredTool, Tool, ToolSpec};
use crate::{Error, Result};

impl Registry {
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
        Self::from_toml_with_tools(text, Vec::new())
    }

    /// [`Registry::from_toml`], whose agents may also name `tools`,
    /// registered in code (Rust tools), beside the file's `[tools.*]`. A
    /// version of such an agent names them; a worker serving it must have
    /// them registered too, or it hands the run on (docs/deployment.md, "Deploying
    /// changes").
    ///
    /// A file whose agents name tools of `[mcp.*]` servers needs their
    /// tools listed first: load it with [`Registry::load_toml`].
    pub fn from_toml_with_tools(text: &str, tools: Vec<Arc<dyn Tool>>) -> Result<Registry> {
        let tree = parse_written(text)?;
        Self::with_delayed(tree, &Default::default(), tools)
    }

    /// Reads an agent file and lists the tools of the MCP servers its
    /// agents name (see [`Registry::load_toml`]).
    pub async fn load(path: &Path, tools: Vec<Arc<dyn Tool>>) -> Result<Registry> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::AgentFile {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::load_toml(&text, tools).await.map_err(|e| match e {
            Error::Config(message) => Error::AgentFile {
                path: path.display().to_string(),
                message,
            },
            other => other,
        })
    }

    /// [`Registry::from_toml_with_tools`], after listing the tools of the
    /// `[mcp.*]` servers its agents name: what each lists becomes part of
    /// the versions of the agents that name it. An agent naming a server
    /// that could not be listed (after a few tries) is left out and
    /// delayed, with why ([`Registry::delayed_agents`]); the others are
    /// served.
    pub async fn load_toml(text: &str, tools: Vec<Arc<dyn Tool>>) -> Result<Registry> {
        let written = Arc::new(super::relist::Written {
            tree: parse_written(text)?,
            tools,
        });
        Self::listed(written, None).await
    }

    /// The registry of `written` with its servers' tools listed now; a
    /// server that cannot be listed keeps what it listed in `last` (the
    /// file as listed before), if it listed anything: a moment's outage
    /// does not take its agents out of service.
    pub(super) async fn listed(
        written: Arc<super::relist::Written>,
        last: Option<&serde_json::Value>,
    ) -> Result<Registry> {
        let mut tree = written.tree.clone();
        let mut failed = crate::mcp::discover_into(&mut tree).await?;
        if let Some(last) = last {
            failed.retain(|server, why| {
                let listed = &last["mcp"][server.as_str()]["discovered"];
                if listed.is_null() {
                    return true;
                }
                tracing::warn!(mcp.server = %server, "keeps its last listing: it {why}");
                tree["mcp"][server.as_str()]["discovered"] = listed.clone();
                false
            });
        }
        let mut registry = Self::with_delayed(tree, &failed, written.tools.clone())?;
        registry.written = Some(written);
        Ok(registry)
    }

    /// The registry of `tree` (an agent file as JSON), without the agents
    /// that name a server whose tools were not listed (`failed` says why,
    /// for the servers whose listing failed): those are delayed.
    fn with_delayed(
        mut tree: serde_json::Value,
        failed: &std::collections::BTreeMap<String, String>,
        tools: Vec<Arc<dyn Tool>>,
    ) -> Result<Registry> {
        let (delayed, unlisted) = crate::mcp::delay_unlisted(&mut tree, failed);
        let file: AgentFile = serde_json::from_value(tree.clone())
            .map_err(|e| Error::Config(format!("the agent file: {e}")))?;
        let mut registry = Self::from_parsed(file, tree, tools)?;
        registry.delayed = Arc::new(delayed);
        registry.unlisted = Arc::new(unlisted);
        Ok(registry)
    }

    fn from_parsed(
        file: AgentFile,
        tree: serde_json::Value,
        tools: Vec<Arc<dyn Tool>>,
    ) -> Result<Registry> {
        let mut code_tools = HashMap::new();
        for tool in tools {
            let registered = super::code_tool(tool)?;
            if file.tools.contains_key(&registered.spec.name) {
                return Err(Error::Config(format!(
                    "tool {:?} is defined in the file and in code",
                    registered.spec.name
                )));
            }
            code_tools.insert(registered.spec.name.clone(), registered);
        }
        Self::from_agent_file(file, tree, &code_tools)
    }

    /// The registry of `file` (whose JSON is `tree`), with `code_tools`
    /// (tools registered in code) for the names the file does not define.
    pub(crate) fn from_agent_file(
        file: AgentFile,
        tree: serde_json::Value,
        code_tools: &HashMap<String, RegisteredTool>,
    ) -> Result<Registry> {
        let limits = DelegationLimits {
            max_depth: file.max_depth.unwrap_or(DEFAULT_MAX_DEPTH),
            max_children_per_step: file
                .max_children_per_step
                .unwrap_or(DEFAULT_MAX_CHILDREN_PER_STEP),
            max_runs_per_tree: file.max_runs_per_tree.unwrap_or(DEFAULT_MAX_RUNS_PER_TREE),
        };
        let run_limits = run_limits_of(&file)?;
        let notifications =
            crate::notify::Notifications::from_defs(file.ui_url, file.notifications)?;
        let mut registry = Registry::new()
            .with_delegation_limits(limits)
            .with_notifications(notifications);
        if let Some(max) = file.max_tool_calls_per_step {
            if max == 0 {
                return Err(Error::Config(
                    "max_tool_calls_per_step must be at least 1".into(),
                ));
            }
            registry = registry.with_max_tool_calls_per_step(max);
        }
        let mut rules = Vec::new();
        let mut escalations = Vec::new();
        for (name, def) in file.tools {
            if let Some(rule) = def.approvals() {
                rules.push((name.clone(), rule.clone()));
            }
            let (remind_after, escalate_to) = def.escalation();
            if let Some(escalation) =
                crate::notify::Escalation::from_def(&name, remind_after, escalate_to)?
            {
                escalations.push((name.clone(), escalation));
            }
            registry = registry.with_tool(file_tool(&name, def)?)?;
        }
        let (mcp_tools, mcp_all) = crate::mcp::registered_tools(&file.mcp)?;
        for tool in mcp_tools {
            registry.tools.insert(tool.spec.name.clone(), tool);
        }
        let (mcp_rules, mcp_escalations) = crate::mcp::rules_and_escalations(&file.mcp)?;
        rules.extend(mcp_rules);
        escalations.extend(mcp_escalations);
        for (tool, rule) in rules {
            registry = registry.with_approval_rule(&tool, rule)?;
        }
        for (tool, escalation) in escalations {
            registry = registry.with_escalation(&tool, escalation)?;
        }
        for (name, mut def) in file.agents {
            def.tools = crate::mcp::expand(def.tools, &mcp_all);
            registry = registry.with_agent(file_agent(name, def)?);
        }
        for (name, tool) in code_tools {
            registry
                .tools
                .entry(name.clone())
                .or_insert_with(|| tool.clone());
        }
        registry.run_limits = run_limits;
        registry.versions = Arc::new(crate::versions::versions_of(&tree));
        registry.file = Arc::new(tree);
        registry.check()?;
        Ok(registry)
    }
}

/// The caps of `file`: `max_concurrent_runs_per_owner`, and each agent's
/// `max_concurrent_runs` and `fair_key`.
fn run_limits_of(file: &AgentFile) -> Result<agentenkit_core::shares::RunLimits> {
    use agentenkit_core::shares::{AgentShare, RunLimits};
    if file.max_concurrent_runs_per_owner == Some(0) {
        return Err(Error::Config(
            "max_concurrent_runs_per_owner must be at least 1".into(),
        ));
    }
    let mut agents = std::collections::BTreeMap::new();
    for (name, def) in &file.agents {
        let named = |e: String| Error::Config(format!("agent {name:?}: {e}"));
        if def.max_concurrent_runs == Some(0) {
            return Err(named("max_concurrent_runs must be at least 1".into()));
        }
        let fair_key = match &def.fair_key {
            None => None,
            Some(_) if def.max_concurrent_runs.is_none() => {
                return Err(named(
                    "fair_key shares out max_concurrent_runs: set max_concurrent_runs too".into(),
                ))
            }
            Some(key) => Some(
                key.parse()
                    .map_err(|e: agentenkit_core::shares::InvalidFairKey| named(e.to_string()))?,
            ),
        };
        if def.max_concurrent_runs.is_some() {
            agents.insert(
                name.clone(),
                AgentShare {
                    max_concurrent_runs: def.max_concurrent_runs,
                    fair_key,
                },
            );
        }
    }
    Ok(RunLimits {
        per_owner: file.max_concurrent_runs_per_owner,
        agents,
    })
}

/// An agent file as written, checked, as JSON (what versions are made
/// of): what discovery fills in may not be written by hand.
fn parse_written(text: &str) -> Result<serde_json::Value> {
    let file = AgentFile::parse(text).map_err(Error::Config)?;
    if let Some(name) = file
        .mcp
        .iter()
        .find_map(|(name, def)| def.discovered.is_some().then_some(name))
    {
        return Err(Error::Config(format!(
            "mcp server {name}: discovered is what listing the server finds, not a setting"
        )));
    }
    // What parsed as an agent file parses as TOML.
    let tree = toml::from_str::<toml::Value>(text)
        .ok()
        .and_then(|value| serde_json::to_value(value).ok())
        .unwrap_or_default();
    Ok(tree)
}

/// The tool a `[tools.<name>]` table of an agent file defines.
fn file_tool(name: &str, def: ToolDef) -> Result<Arc<dyn Tool>> {
    if name == agentenkit_core::budget::REQUEST_NAME {
        return Err(Error::Config(format!(
            "tool {name:?}: the name is taken by the requests for more budget; call the tool something else"
        )));
    }
    let read_only = def.read_only();
    let (tool, refuse_repeated_denials) = typed_tool(name, def)?;
    let tool = if refuse_repeated_denials {
        tool
    } else {
        crate::tool::ask_after_every_denial(tool)
    };
    Ok(if read_only {
        crate::tool::mark_read_only(tool)
    } else {
        tool
    })
}

/// The tool of a `[tools.<name>]` table's `type`, and whether it refuses a
/// repeated denial.
fn typed_tool(name: &str, def: ToolDef) -> Result<(Arc<dyn Tool>, bool)> {
    Ok(match def {
        ToolDef::Http {
            url,
            description,
            requires_confirmation,
            refuse_repeated_denials,
            read_only: _,
            approvals: _,
            remind_after: _,
            escalate_to: _,
            input_schema,
            timeout_ms,
            max_response_bytes,
        } => {
            if let Err(e) = reqwest::Url::parse(&url) {
                return Err(Error::Config(format!(
                    "tool {name}: invalid url {}: {e}",
                    crate::tool::redact_url(&url)
                )));
            }
            let mut tool = HttpTool::new(
                ToolSpec {
                    name: name.to_owned(),
                    description,
                    input_schema,
                },
                url,
                requires_confirmation,
            )?;
            match timeout_ms {
                Some(ms) if (1..=MAX_HTTP_TOOL_TIMEOUT_MS).contains(&ms) => {
                    tool = tool.with_timeout(Duration::from_millis(ms))?;
                }
                Some(ms) => {
                    return Err(Error::Config(format!(
                        "tool {name}: timeout_ms {ms} is not from 1 to {MAX_HTTP_TOOL_TIMEOUT_MS}"
                    )))
                }
                None => {}
            }
            match max_response_bytes {
                Some(0) => {
                    return Err(Error::Config(format!(
                        "tool {name}: max_response_bytes must be at least 1"
                    )))
                }
                Some(bytes) => tool = tool.with_max_response_bytes(bytes),
                None => {}
            }
            (Arc::new(tool), refuse_repeated_denials)
        }
        ToolDef::Echo {
            description,
            requires_confirmation,
            refuse_repeated_denials,
            read_only: _,
            approvals: _,
            remind_after: _,
            escalate_to: _,
            input_schema,
        } => (
            Arc::new(EchoTool::new(
                ToolSpec {
                    name: name.to_owned(),
                    description,
                    input_schema,
                },
                requires_confirmation,
            )),
            refuse_repeated_denials,
        ),
    })
}

/// The agent an `[agents.<name>]` table of an agent file defines.
fn file_agent(name: String, def: crate::config::AgentDef) -> Result<Agent> {
    let price = def.model.price();
    if let Some(price) = price {
        price
            .check()
            .map_err(|e| Error::Config(format!("agent {name:?}: model: {e}")))?;
    }
    let provider_limit = def.model.limit();
    if provider_limit
        .is_some_and(|l| l.requests_per_minute == Some(0) || l.tokens_per_minute == Some(0))
    {
        return Err(Error::Config(format!(
            "agent {name:?}: model: requests_per_minute and tokens_per_minute must be at least 1"
        )));
    }
    let model = crate::model::from_def(&name, def.model)?;
    let mut agent = Agent::new(name, model).system(def.system);
    agent.provider_limit = provider_limit;
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
    agent.on_deploy = def.on_deploy;
    agent.on_active = def.on_active;
    agent.price = price;
    if let Some(budget) = def.budget {
        let named = |e: String| Error::Config(format!("agent {:?}: {e}", agent.name));
        let run = budget.run.unwrap_or_default();
        run.check().map_err(named)?;
        agent.budget = run.for_run();
        if run.cost_micro_usd.is_some() && price.is_none() {
            return Err(named(
                "budget.run.cost_usd counts what calls cost: give the model a price".into(),
            ));
        }
        let thread = budget.thread.unwrap_or_default();
        thread.check().map_err(named)?;
        if thread.cost_micro_usd.is_some() {
            return Err(named(
                "budget.thread counts calls and tokens: set cost_usd in budget.run".into(),
            ));
        }
        agent.thread_budget = thread;
    }
    agent.description = def.description.filter(|d| !d.trim().is_empty());
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
    Ok(agent)
}
