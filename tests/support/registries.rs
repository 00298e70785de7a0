//! The agent files the tests run: one scripted agent and an http tool,
//! with or without approval, and the usual scripts.

use super::*;

/// An agent file with one agent `agent` whose scripted model plays
/// `script` (TOML array items), and one http tool `tool` at `url`.
pub fn registry(script: &str, url: &str) -> Registry {
    registry_with(script, url, false)
}

/// Like `registry`, with `tool` marked as requiring confirmation.
pub fn approval_registry(script: &str, url: &str) -> Registry {
    registry_with(script, url, true)
}

fn registry_with(script: &str, url: &str, requires_confirmation: bool) -> Registry {
    registry_with_ttl(script, url, requires_confirmation, 900_000)
}

/// An approval registry whose agent's requests expire after `ttl_ms`.
pub fn approval_registry_ttl(script: &str, url: &str, ttl_ms: u64) -> Registry {
    registry_with_ttl(script, url, true, ttl_ms)
}

fn registry_with_ttl(
    script: &str,
    url: &str,
    requires_confirmation: bool,
    ttl_ms: u64,
) -> Registry {
    Registry::from_toml(&format!(
        r#"
[agents.agent]
system = "test agent"
hitl_ttl_ms = {ttl_ms}
tools = ["tool"]
model = {{ provider = "scripted", script = [ {script} ] }}

[tools.tool]
type = "http"
url = "{url}"
requires_confirmation = {requires_confirmation}
input_schema = {{ type = "object", required = ["to"], properties = {{ to = {{ type = "string" }} }} }}
"#
    ))
    .expect("test registry")
}

/// An approval registry whose `tool` needs two approvals of the groups
/// `ops` or `security` (multi-party approval).
pub fn two_of_ops_or_security(url: &str) -> Registry {
    Registry::from_toml(&two_of_ops_or_security_toml(url)).expect("test registry")
}

/// The agent file of [`two_of_ops_or_security`].
pub fn two_of_ops_or_security_toml(url: &str) -> String {
    format!(
        r#"
[agents.agent]
system = "test agent"
tools = ["tool"]
model = {{ provider = "scripted", script = [ {CALL_THEN_DONE} ] }}

[tools.tool]
type = "http"
url = "{url}"
requires_confirmation = true
approvals = {{ required = 2, from = ["ops", "security"] }}
input_schema = {{ type = "object", properties = {{ to = {{ type = "string" }} }} }}
"#
    )
}

/// The usual script: call `tool` as c1, then answer "Done.".
pub const CALL_THEN_DONE: &str = r#"
  { tool_calls = [ { id = "c1", name = "tool", arguments = { to = "a@b.c" } } ] },
  { text = "Done." },
"#;

/// Two calls of one step, made in one transaction (they share their
/// `created_at`), each waiting for its own answer when `tool` needs one.
pub const TWO_CALLS: &str = r#"
  { tool_calls = [
      { id = "c1", name = "tool", arguments = { to = "one@b.c" } },
      { id = "c2", name = "tool", arguments = { to = "two@b.c" } },
  ] },
  { text = "Done." },
"#;

/// A deploy's agent file: `mailer` with one approval tool `tool` (posting
/// to `url`), its prompt `system`, saying `done` once the tool ran, and
/// what a deploy means for its runs (`on_deploy`: "pin" or "upgrade").
pub fn mailer_deploy(tool: &str, system: &str, done: &str, url: &str, on_deploy: &str) -> Registry {
    Registry::from_toml(&format!(
        r#"
[agents.mailer]
on_deploy = "{on_deploy}"
system = "{system}"
tools = ["{tool}"]
model = {{ provider = "scripted", script = [
  {{ tool_calls = [ {{ id = "c1", name = "{tool}", arguments = {{ to = "a@b.c" }} }} ] }},
  {{ text = "{done}" }},
] }}

[tools.{tool}]
type = "http"
url = "{url}"
requires_confirmation = true
input_schema = {{ type = "object", required = ["to"], properties = {{ to = {{ type = "string" }} }} }}
"#
    ))
    .expect("agent file")
}
