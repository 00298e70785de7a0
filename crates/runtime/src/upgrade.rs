//! Moving queued and parked runs to a newer version of their agent, on
//! purpose (`agentenkit runs upgrade`; docs/deployment.md, "Deploying changes").
//!
//! A run moves only where that is safe: every call of it whose tool has not
//! run yet (a parked request, an approved call waiting to run) must still
//! be possible in the new version, its tool there and its arguments fitting
//! the new schema. Anything else is listed with the reason and left as it
//! was. The move is journaled (`version:<hash>`), so a replay agrees.

use agentenkit_core::ToolKind;
use agentenkit_store::{OpenCall, OpenRun, Store};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::versions::AgentVersion;
use crate::Registry;

/// Open runs handled per upgrade (a larger fleet runs it again).
pub const MAX_RUNS_PER_UPGRADE: i64 = 10_000;

/// What an upgrade did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpgradeReport {
    /// The version runs were moved to.
    pub to: String,
    pub moved: Vec<OpenRun>,
    /// Runs left as they were, with why.
    pub left: Vec<(OpenRun, String)>,
}

/// Whether `calls`, still to run, can go on under agent `agent` of
/// `registry`: `Err` says which call cannot, and why.
pub fn compatible(
    registry: &Registry,
    agent: &str,
    calls: &[OpenCall],
) -> std::result::Result<(), String> {
    let Some(def) = registry.agent(agent) else {
        return Err(format!("the new version has no agent {agent:?}"));
    };
    for call in calls {
        let id = &call.id;
        let name = &call.name;
        // A budget request is the run's own, of no tool: any version
        // takes it (the name is no tool's).
        if name == agentenkit_core::budget::REQUEST_NAME && call.kind == ToolKind::Approval {
            continue;
        }
        match call.kind {
            ToolKind::Ask if !def.ask => {
                return Err(format!(
                    "call {id} asks questions; the new version does not"
                ))
            }
            ToolKind::Ask => {}
            ToolKind::Delegate if !def.subagents.iter().any(|s| s == name) => {
                return Err(format!(
                    "call {id} delegates to {name:?}, which the new version does not reach"
                ))
            }
            ToolKind::Delegate => {}
            ToolKind::Function | ToolKind::Approval | ToolKind::Park => {
                if !def.tools.iter().any(|t| t == name) || registry.tool(name).is_none() {
                    return Err(format!(
                        "call {id} is of tool {name:?}, which the new version does not have"
                    ));
                }
                // The arguments proposed, and those an approver edited the
                // call to (what the tool will run with), must both fit.
                let checked = std::iter::once(("arguments", &call.arguments)).chain(
                    call.edited
                        .as_ref()
                        .map(|edited| ("edited arguments", edited)),
                );
                for (which, arguments) in checked {
                    let issues = crate::replies::schema_issues(registry, name, arguments);
                    if let Some(first) = issues.first() {
                        return Err(format!(
                            "call {id}: its {which} do not fit {name:?} in the new version ({}{}{})",
                            first.path,
                            if first.path.is_empty() { "" } else { ": " },
                            first.message
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// The version `to` names among `agent`'s recorded versions (a full hash or
/// a unique prefix of at least 8 characters), or the newest one.
async fn target_version(store: &Store, agent: &str, to: Option<&str>) -> Result<(String, Value)> {
    let versions = store.list_agent_versions(agent).await?;
    let chosen = match to {
        None => versions.last(),
        Some(prefix) if prefix.len() >= 8 => {
            let mut matching = versions.iter().filter(|(v, _)| v.hash.starts_with(prefix));
            let first = matching.next();
            if matching.next().is_some() {
                return Err(Error::InvalidInput(format!(
                    "{prefix} names more than one version of {agent:?}"
                )));
            }
            first
        }
        Some(prefix) => {
            return Err(Error::InvalidInput(format!(
                "--to {prefix:?}: give at least 8 characters of the version's hash"
            )))
        }
    };
    let (version, _) = chosen.ok_or_else(|| {
        Error::InvalidInput(format!(
            "no recorded version of agent {agent:?}{}",
            to.map(|t| format!(" starts with {t}")).unwrap_or_default()
        ))
    })?;
    Ok((version.hash.clone(), version.definition.clone()))
}

/// Moves the queued and waiting runs of `agent` to version `to` (the
/// newest recorded when `None`) where it is safe; `dry_run` changes
/// nothing and says what would move.
pub async fn upgrade_runs(
    store: &Store,
    agent: &str,
    to: Option<&str>,
    dry_run: bool,
) -> Result<UpgradeReport> {
    let (hash, definition) = target_version(store, agent, to).await?;
    let registry = Registry::from_definition(&definition).map_err(|e| {
        Error::Config(format!(
            "version {} of {agent:?} cannot be built here: {e}",
            AgentVersion::short(&hash)
        ))
    })?;
    let mut report = UpgradeReport {
        to: hash.clone(),
        ..UpgradeReport::default()
    };
    for run in store
        .open_runs_of_agent(agent, &hash, MAX_RUNS_PER_UPGRADE)
        .await?
    {
        match upgrade_run(store, &run, (&registry, agent), &hash, dry_run).await? {
            UpgradeOutcome::Moved => report.moved.push(run),
            UpgradeOutcome::Incompatible(reason) => report.left.push((run, reason)),
            UpgradeOutcome::Changed => report.left.push((
                run,
                "it ran, finished or moved while the upgrade read it; run the upgrade again"
                    .to_owned(),
            )),
        }
    }
    Ok(report)
}

/// What became of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeOutcome {
    /// Moved (or, in a dry run, would be).
    Moved,
    /// Left as it was: why.
    Incompatible(String),
    /// No longer queued or waiting on the version it was read on (it ran,
    /// finished, or was moved meanwhile).
    Changed,
}

/// Moves `run` to version `to` of `agent` (built as `registry`) if it is
/// still queued or waiting on the version it was read on and its open
/// calls, read under its lock, are compatible with `to`.
async fn upgrade_run(
    store: &Store,
    run: &OpenRun,
    (registry, agent): (&Registry, &str),
    to: &str,
    dry_run: bool,
) -> Result<UpgradeOutcome> {
    let Some(locked) = store.lock_for_upgrade(run).await? else {
        return Ok(UpgradeOutcome::Changed);
    };
    if let Err(reason) = compatible(registry, agent, locked.open_calls()) {
        locked.release().await?;
        return Ok(UpgradeOutcome::Incompatible(reason));
    }
    if dry_run {
        locked.release().await?;
    } else {
        locked.move_to(to, "upgrade").await?;
    }
    Ok(UpgradeOutcome::Moved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn registry() -> Registry {
        Registry::from_toml(
            r#"
[agents.mailer]
tools = ["send"]
subagents = ["helper"]
model = { provider = "scripted", script = [] }

[agents.helper]
model = { provider = "scripted", script = [] }

[tools.send]
type = "echo"
requires_confirmation = true
input_schema = { type = "object", required = ["to"], properties = { to = { type = "string" } } }
"#,
        )
        .unwrap()
    }

    fn call(name: &str, kind: ToolKind, arguments: Value) -> OpenCall {
        OpenCall {
            id: "c1".into(),
            name: name.into(),
            kind,
            arguments,
            edited: None,
        }
    }

    /// An approved call waiting to run runs with the arguments its
    /// approver edited it to: those must fit the new schema too.
    #[test]
    fn an_approvers_edited_arguments_are_checked_too() {
        let r = registry();
        let mut approved = call("send", ToolKind::Approval, json!({ "to": "a@b.c" }));
        approved.edited = Some(json!({ "to": 7 }));
        let err = compatible(&r, "mailer", &[approved.clone()]).unwrap_err();
        assert!(err.contains("its edited arguments do not fit"), "{err}");
        approved.edited = Some(json!({ "to": "c@d.e" }));
        assert_eq!(compatible(&r, "mailer", &[approved]), Ok(()));
    }

    #[test]
    fn a_call_whose_tool_and_arguments_fit_can_move() {
        let r = registry();
        assert_eq!(compatible(&r, "mailer", &[]), Ok(()));
        let fits = call("send", ToolKind::Approval, json!({ "to": "a@b.c" }));
        assert_eq!(compatible(&r, "mailer", &[fits]), Ok(()));
        let delegates = call("helper", ToolKind::Delegate, json!({}));
        assert_eq!(compatible(&r, "mailer", &[delegates]), Ok(()));
    }

    #[test]
    fn anything_the_new_version_cannot_do_is_named() {
        let r = registry();
        for (calls, says) in [
            (
                vec![call("send_email", ToolKind::Approval, json!({}))],
                "does not have",
            ),
            (
                vec![call("send", ToolKind::Approval, json!({ "to": 7 }))],
                "do not fit",
            ),
            (
                vec![call("send", ToolKind::Approval, json!([]))],
                "do not fit",
            ),
            (
                vec![call("other", ToolKind::Delegate, json!({}))],
                "does not reach",
            ),
            (
                vec![call("ask", ToolKind::Ask, json!({}))],
                "asks questions",
            ),
        ] {
            let err = compatible(&r, "mailer", &calls).unwrap_err();
            assert!(err.contains(says), "{err}");
        }
        assert!(compatible(&r, "gone", &[])
            .unwrap_err()
            .contains("no agent"));
    }
}
