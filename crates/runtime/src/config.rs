//! The agent file (SPEC §10): agents and their tools in TOML.

use std::collections::BTreeMap;

use agentenkit_core::approvals::ApprovalRule;

use serde::Deserialize;
use serde_json::Value;

use crate::model::ModelDef;

/// How deep sub-agents nest unless the agent file says otherwise.
pub const DEFAULT_MAX_DEPTH: u32 = 8;
/// Sub-agents one model response may start unless the agent file says.
pub const DEFAULT_MAX_CHILDREN_PER_STEP: u32 = 8;
/// Runs one turn's tree may hold (its root included) unless the agent file
/// says: with the depth limit, what one turn can cost is bounded.
pub const DEFAULT_MAX_RUNS_PER_TREE: u32 = 64;
/// Tool calls one model response may make unless the agent file says: the
/// calls past it are failures the model sees, so one response cannot open
/// hundreds of approvals (each a row, an event and its notifications).
pub const DEFAULT_MAX_TOOL_CALLS_PER_STEP: u32 = 32;

/// The default TTL of a park: 15 minutes.
pub const DEFAULT_HITL_TTL_MS: u64 = 900_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentFile {
    /// How deep delegations may nest (the root run is depth 0); default
    /// [`DEFAULT_MAX_DEPTH`].
    #[serde(default)]
    pub max_depth: Option<u32>,
    /// How many sub-agents one model response may start; default
    /// [`DEFAULT_MAX_CHILDREN_PER_STEP`].
    #[serde(default)]
    pub max_children_per_step: Option<u32>,
    /// How many runs one turn's tree may hold, its root included; default
    /// [`DEFAULT_MAX_RUNS_PER_TREE`].
    #[serde(default)]
    pub max_runs_per_tree: Option<u32>,
    /// How many tool calls one model response may make; default
    /// [`DEFAULT_MAX_TOOL_CALLS_PER_STEP`].
    #[serde(default)]
    pub max_tool_calls_per_step: Option<u32>,
    /// How many runs of one owner may be running at once, across agents
    /// (docs/budgets.md, "Fair shares"); no cap when `None`.
    #[serde(default)]
    pub max_concurrent_runs_per_owner: Option<u32>,
    #[serde(default)]
    pub agents: BTreeMap<String, AgentDef>,
    #[serde(default)]
    pub tools: BTreeMap<String, ToolDef>,
    /// `[mcp.<name>]`: MCP servers whose tools agents name as `NAME/TOOL`.
    #[serde(default)]
    pub mcp: BTreeMap<String, crate::mcp::def::ServerDef>,
    /// The deployment's address as people reach it (`https://agents.example.com`):
    /// notifications link to its `/ui` inbox.
    #[serde(default)]
    pub ui_url: Option<String>,
    /// `[notifications.<name>]`: webhook targets told of events.
    #[serde(default)]
    pub notifications: BTreeMap<String, NotificationDef>,
}

/// `[notifications.<name>]`: a webhook target (docs/notifications.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotificationDef {
    pub url: String,
    /// The environment variable holding the HMAC secret its deliveries are
    /// signed with. Required, except for `format = "slack"` (whose URL is
    /// its secret).
    #[serde(default)]
    pub secret_env: Option<String>,
    /// The event types it is told of (default `INPUT_REQUIRED`,
    /// `INPUT_RESOLVED`, `RUN_COMPLETED`, `RUN_FAILED`).
    #[serde(default)]
    pub events: Option<Vec<String>>,
    #[serde(default)]
    pub format: NotificationFormat,
    /// Attempts before a delivery to it is dead (default 8).
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// The wait after a first failure, doubled after each next (default 1 s).
    #[serde(default)]
    pub first_retry_ms: Option<u64>,
    /// How long one attempt may take (default 5 s).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Failed attempts in a row after which a process stops trying the
    /// target for `circuit_open_ms` (default 5).
    #[serde(default)]
    pub circuit_failures: Option<u32>,
    /// How long a process stops trying it (default 30 s); its deliveries
    /// wait meanwhile, without spending attempts.
    #[serde(default)]
    pub circuit_open_ms: Option<u64>,
}

/// What a notification's body looks like.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NotificationFormat {
    /// The event as the stream has it, in an envelope.
    #[default]
    Json,
    /// A Slack incoming-webhook message: a summary and a link to the inbox.
    Slack,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentDef {
    /// What the agent is for, shown to people choosing one.
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub system: String,
    #[serde(default)]
    pub hitl_ttl_ms: Option<u64>,
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub ask: bool,
    #[serde(default)]
    pub subagents: Vec<String>,
    pub model: ModelDef,
    #[serde(default)]
    pub intake: Option<IntakeDef>,
    /// What a deploy means for this agent's runs in flight.
    #[serde(default)]
    pub on_deploy: OnDeploy,
    /// What a message sent while a run of it is active does, when the
    /// message does not say (`onActive`): `"reject"` (the default),
    /// `"enqueue"`, `"interrupt"` or `"rollback"`.
    #[serde(default)]
    pub on_active: agentenkit_core::conversation::OnActive,
    /// What a run may spend before a person is asked (docs/budgets.md).
    #[serde(default)]
    pub budget: Option<BudgetDef>,
    /// How many runs of this agent may be running at once, per owner (or
    /// per value of `fair_key`); no cap when `None`.
    #[serde(default)]
    pub max_concurrent_runs: Option<u32>,
    /// `"metadata.KEY"`: `max_concurrent_runs` is kept per value of that
    /// key of the thread's metadata, within each owner.
    #[serde(default)]
    pub fair_key: Option<String>,
}

/// `[agents.<name>.budget]`: `run` and `thread`, each `{ model_calls,
/// tool_calls, input_tokens, output_tokens, cost_usd }` (each optional;
/// no `cost_usd` for a thread).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetDef {
    #[serde(default)]
    pub run: Option<agentenkit_core::budget::Limits>,
    #[serde(default)]
    pub thread: Option<agentenkit_core::budget::Limits>,
}

/// What a deploy means for an agent's runs in flight (docs/deployment.md, "Deploying
/// changes").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnDeploy {
    /// A run continues on the version it started on.
    #[default]
    Pin,
    /// At each segment's start a run takes the serving worker's version
    /// of its agent when that one is newer and can take the run's open
    /// calls; the switch is journaled.
    Upgrade,
}

/// `[agents.<name>.intake]`: questions asked before the first model call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntakeDef {
    #[serde(default)]
    pub preamble: Option<String>,
    #[serde(default)]
    pub when: IntakeWhen,
    pub questions: Vec<agentenkit_core::questions::Question>,
}

/// When an intake asks: once per thread (the default), or every turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IntakeWhen {
    #[default]
    ThreadStart,
    EveryTurn,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum ToolDef {
    Http {
        url: String,
        #[serde(default)]
        description: String,
        #[serde(default)]
        requires_confirmation: bool,
        /// A call a person denied, proposed again with the same arguments
        /// in the same run, is refused without asking (default true).
        #[serde(default = "yes")]
        refuse_repeated_denials: bool,
        /// A call changes nothing elsewhere: a run that called only such
        /// tools can be rolled back (docs/conversations.md).
        #[serde(default)]
        read_only: bool,
        /// Several people must approve each call: `{ required = 2, from =
        /// ["ops", "security"] }` (groups of the keys' holders).
        #[serde(default)]
        approvals: Option<ApprovalRule>,
        /// Remind `escalate_to` of a call still waiting for a person after
        /// this long (`"30m"`).
        #[serde(default)]
        remind_after: Option<String>,
        /// The notification target reminded.
        #[serde(default)]
        escalate_to: Option<String>,
        #[serde(default = "any_object")]
        input_schema: Value,
        /// The whole call may take this long (default 60 s); a timeout is
        /// transient, retried like an unreachable endpoint.
        #[serde(default)]
        timeout_ms: Option<u64>,
        /// An answer longer than this is a failure the model sees (default
        /// 1 MiB).
        #[serde(default)]
        max_response_bytes: Option<u64>,
    },
    /// Answers `{"echo": <arguments>}` without calling anything: for trying
    /// an agent file out before its services exist.
    Echo {
        #[serde(default)]
        description: String,
        #[serde(default)]
        requires_confirmation: bool,
        /// A call a person denied, proposed again with the same arguments
        /// in the same run, is refused without asking (default true).
        #[serde(default = "yes")]
        refuse_repeated_denials: bool,
        /// A call changes nothing elsewhere: a run that called only such
        /// tools can be rolled back (docs/conversations.md).
        #[serde(default)]
        read_only: bool,
        /// Several people must approve each call: `{ required = 2, from =
        /// ["ops", "security"] }` (groups of the keys' holders).
        #[serde(default)]
        approvals: Option<ApprovalRule>,
        /// Remind `escalate_to` of a call still waiting for a person after
        /// this long (`"30m"`).
        #[serde(default)]
        remind_after: Option<String>,
        /// The notification target reminded.
        #[serde(default)]
        escalate_to: Option<String>,
        #[serde(default = "any_object")]
        input_schema: Value,
    },
}

impl ToolDef {
    /// The tool changes nothing elsewhere.
    pub fn read_only(&self) -> bool {
        match self {
            ToolDef::Http { read_only, .. } | ToolDef::Echo { read_only, .. } => *read_only,
        }
    }

    /// The tool's multi-party approval rule, when it has one.
    pub fn approvals(&self) -> Option<&ApprovalRule> {
        match self {
            ToolDef::Http { approvals, .. } | ToolDef::Echo { approvals, .. } => approvals.as_ref(),
        }
    }

    /// The tool's `(remind_after, escalate_to)`.
    pub fn escalation(&self) -> (Option<&str>, Option<&str>) {
        match self {
            ToolDef::Http {
                remind_after,
                escalate_to,
                ..
            }
            | ToolDef::Echo {
                remind_after,
                escalate_to,
                ..
            } => (remind_after.as_deref(), escalate_to.as_deref()),
        }
    }
}

fn yes() -> bool {
    true
}

fn any_object() -> Value {
    serde_json::json!({ "type": "object" })
}

impl AgentFile {
    pub fn parse(text: &str) -> Result<AgentFile, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any text: the agent file parser and the registry built from it
        /// answer with a value or an error, never a panic.
        #[test]
        fn any_text_is_parsed_or_refused(text in "\\PC{0,300}") {
            let _ = AgentFile::parse(&text);
            let _ = crate::Registry::from_toml(&text);
        }

        /// A valid file with a slice cut out or a fragment spliced in (the
        /// edits a person makes) is parsed or refused, never a panic.
        #[test]
        fn edited_files_are_parsed_or_refused(
            cut in 0usize..400,
            len in 0usize..40,
            splice in prop_oneof![
                Just(""), Just("["), Just("]"), Just("}"), Just("\""), Just("= "),
                Just("hitl_ttl_ms = -1\n"), Just("hitl_ttl_ms = 0\n"),
                Just("subagents = [\"mailer\"]\n"), Just("max_depth = 0\n"),
                Just("timeout_ms = 0\n"), Just("type = \"grpc\"\n"),
                Just("[agents.x]\n"), Just("tools = [\"nope\"]\n"),
            ],
        ) {
            let mut text = SPEC_EXAMPLE.to_owned();
            let start = cut.min(text.len());
            let end = (start + len).min(text.len());
            if text.is_char_boundary(start) && text.is_char_boundary(end) {
                text.replace_range(start..end, splice);
            }
            let _ = crate::Registry::from_toml(&text);
        }
    }

    const SPEC_EXAMPLE: &str = r#"
[agents.mailer]
system = "You send email."
hitl_ttl_ms = 900000
tools = ["send_email"]
ask = false
subagents = []
model = { provider = "scripted", script = [
  { tool_calls = [ { id = "c1", name = "send_email", arguments = { to = "a@b.c", subject = "hi", body = "x" } } ] },
  { text = "Done." },
] }

[tools.send_email]
type = "http"
url = "http://127.0.0.1:9999/send"
requires_confirmation = true
input_schema = { type = "object", required = ["to"], properties = { to = { type = "string" } } }
"#;

    #[test]
    fn parses_the_spec_12_providers() {
        let file = AgentFile::parse(
            r#"
[agents.a]
model = { provider = "openai", model = "gpt-4o-mini", base_url = "https://api.openai.com/v1",
          api_key_env = "OPENAI_API_KEY", temperature = 0.2, max_tokens = 1024,
          timeout_ms = 120000, max_retries = 4 }
[agents.b]
model = { provider = "anthropic", model = "claude-sonnet-4-5", base_url = "https://api.anthropic.com",
          api_key_env = "ANTHROPIC_API_KEY", max_tokens = 1024, timeout_ms = 120000, max_retries = 4 }
"#,
        )
        .unwrap();
        assert!(matches!(
            &file.agents["a"].model,
            ModelDef::Openai { model, max_retries: Some(4), .. } if model == "gpt-4o-mini"
        ));
        assert!(matches!(
            &file.agents["b"].model,
            ModelDef::Anthropic {
                max_tokens: Some(1024),
                ..
            }
        ));
        assert!(crate::Registry::from_toml(
            "[agents.a]\nmodel = { provider = \"openai\", model = \"m\", base_url = \"ftp://x\" }"
        )
        .is_err());
        assert!(crate::Registry::from_toml(
            "[agents.a]\nmodel = { provider = \"anthropic\", model = \"m\", max_tokens = 0 }"
        )
        .is_err());
        assert!(crate::Registry::from_toml(
            "[agents.a]\nmodel = { provider = \"openai\", model = \"m\", timeout_ms = 0 }"
        )
        .is_err());
        let missing_ca = crate::Registry::from_toml(
            "[agents.a]\nmodel = { provider = \"openai\", model = \"m\", ca_file = \"/nonexistent/ca.pem\" }",
        );
        assert!(
            matches!(&missing_ca, Err(e) if e.to_string().contains("ca_file")),
            "{:?}",
            missing_ca.err()
        );
    }

    #[test]
    fn parses_the_spec_example() {
        let file = AgentFile::parse(SPEC_EXAMPLE).unwrap();
        let mailer = &file.agents["mailer"];
        assert_eq!(mailer.tools, ["send_email"]);
        let ModelDef::Scripted { script, .. } = &mailer.model else {
            panic!("mailer has a scripted model");
        };
        assert_eq!(script.len(), 2);
        assert_eq!(script[0].tool_calls[0].id.as_str(), "c1");
        assert_eq!(script[1].text.as_deref(), Some("Done."));
        let ToolDef::Http {
            requires_confirmation,
            ..
        } = &file.tools["send_email"]
        else {
            panic!("send_email is an http tool");
        };
        assert!(requires_confirmation);
    }

    #[test]
    fn parses_an_intake() {
        let file = AgentFile::parse(
            r#"
[agents.a]
model = { provider = "scripted", script = [] }
[agents.a.intake]
preamble = "Two questions before I start."
when = "every-turn"
questions = [ { id = "scope", prompt = "How wide?", options = [ { value = "module", label = "This module only" }, { value = "repo", label = "The whole repository" } ], defaults = ["module"] } ]
"#,
        )
        .unwrap();
        let intake = file.agents["a"].intake.as_ref().unwrap();
        assert_eq!(intake.when, IntakeWhen::EveryTurn);
        assert_eq!(intake.questions[0].defaults, ["module"]);
        let err = AgentFile::parse("[agents.a]\nmodel = { provider = \"scripted\", script = [] }\n[agents.a.intake]\nwhen = \"sometimes\"\nquestions = []\n").unwrap_err();
        assert!(err.contains("sometimes"), "{err}");
    }

    #[test]
    fn unknown_keys_and_providers_are_errors_that_say_where() {
        let err = AgentFile::parse("[agents.a]\nmodel = { provider = \"nope\" }\n").unwrap_err();
        assert!(err.contains("nope"), "{err}");
        let err = AgentFile::parse(
            "[agents.a]\nsystme = \"x\"\nmodel = { provider = \"scripted\", script = [] }\n",
        )
        .unwrap_err();
        assert!(err.contains("systme"), "{err}");
    }
}
