//! `agentenkit keys`: API keys with scopes, made, listed and revoked in the
//! database (the operator needs its URL, not a key). A key is printed once,
//! when made; the database keeps its SHA-256 only.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;

use agentenkit_core::approvals::{ApprovalRule, Approver};
use agentenkit_core::{KeyScope, KeyScopes};
use agentenkit_store::{KeyRecord, Store};
use clap::Subcommand;

#[derive(Debug, Clone, Subcommand)]
pub enum KeysCommand {
    /// Makes a key and prints it (this once): `--scope` as often as needed
    /// (read, respond:approvals, respond:questions, settle:jobs,
    /// threads:write, admin).
    Create {
        /// Whose threads the key acts on.
        #[arg(long)]
        owner: String,
        /// What the key is for (shown by `keys list`).
        #[arg(long, default_value = "")]
        name: String,
        #[arg(long = "scope", required = true, value_parser = parse_scope)]
        scopes: Vec<KeyScope>,
        /// An approver group of the key's holder (a tool's `approvals =
        /// { from = [...] }`), as often as needed.
        #[arg(long = "group")]
        groups: Vec<String>,
        /// The person holding the key: approvals of a call that needs
        /// several people count holders, so give every key of one person
        /// the same holder. Without it the key is its own holder.
        #[arg(long)]
        holder: Option<String>,
    },
    /// Every key (revoked ones marked), of one owner with `--owner`. With
    /// an agent file (`--config`, `AGENTENKIT_CONFIG`), also every
    /// approval rule the live keys cannot meet.
    List {
        #[arg(long)]
        owner: Option<String>,
        #[arg(long = "config", env = "AGENTENKIT_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Revokes a key by its id: refused from then on (within the API's
    /// few seconds of caching).
    Revoke { id: uuid::Uuid },
}

fn parse_scope(text: &str) -> Result<KeyScope, String> {
    text.parse().map_err(|_| {
        let known: Vec<&str> = KeyScope::ALL.iter().map(|s| s.as_str()).collect();
        format!("unknown scope {text:?} (one of: {})", known.join(", "))
    })
}

impl KeysCommand {
    /// Runs the command; what to print, and whether it did what it was
    /// asked (a revoke of an unknown or revoked key did not).
    pub async fn run(self, store: &Store) -> anyhow::Result<(String, bool)> {
        match self {
            KeysCommand::Create {
                owner,
                name,
                scopes,
                groups,
                holder,
            } => {
                let made = store
                    .create_api_key(&owner, &name, &scopes, &groups, holder.as_deref())
                    .await?;
                Ok((
                    format!(
                        "{}\nkey {} for {} with {}: shown this once, keep it now\n",
                        made.key,
                        made.record.id,
                        made.record.owner,
                        scope_list(made.record.scopes)
                    ),
                    true,
                ))
            }
            KeysCommand::List { owner, config } => {
                let keys = store.list_api_keys(owner.as_deref()).await?;
                let mut out = render_keys(&keys);
                if let Some(path) = config {
                    // Listed as a serving process lists it: the rules of
                    // MCP servers' tools count too.
                    let registry = agentenkit_runtime::Registry::load(&path, Vec::new()).await?;
                    // Every owner's keys can approve a call of a tool.
                    let all = match owner {
                        Some(_) => store.list_api_keys(None).await?,
                        None => keys,
                    };
                    for line in unmet_rules(&registry.approval_rules(), &all) {
                        let _ = writeln!(out, "{line}");
                    }
                }
                Ok((out, true))
            }
            KeysCommand::Revoke { id } => {
                let revoked = store.revoke_api_key(id).await?;
                Ok(if revoked {
                    (format!("revoked {id}\n"), true)
                } else {
                    (format!("no live key {id}\n"), false)
                })
            }
        }
    }
}

fn scope_list(scopes: KeyScopes) -> String {
    scopes
        .list()
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// A warning for each rule that the live keys cannot meet: fewer distinct
/// holders of its groups (with `respond:approvals`) than it requires, so
/// its calls would wait until they expire. Keys of `AGENTENKIT_API_KEYS`
/// have no groups and are not counted.
pub fn unmet_rules(rules: &[(&str, &ApprovalRule)], keys: &[KeyRecord]) -> Vec<String> {
    rules
        .iter()
        .filter_map(|(tool, rule)| {
            let holders: BTreeSet<String> = keys
                .iter()
                .filter(|key| key.revoked_at.is_none())
                .filter(|key| key.scopes.allow(KeyScope::RespondApprovals))
                .filter(|key| rule.from.is_empty() || key.groups.iter().any(|g| rule.from.contains(g)))
                .map(|key| {
                    Approver {
                        key_id: Some(key.id.to_string()),
                        holder: key.holder.clone(),
                        groups: Vec::new(),
                    }
                    .principal(&key.owner)
                })
                .collect();
            ((holders.len() as u32) < rule.required).then(|| {
                format!(
                    "warning: tool {} needs {} approvals{}, but only {} live key holder{} can give one: its calls would wait until they expire",
                    crate::shown::shown(tool, false),
                    rule.required,
                    if rule.from.is_empty() {
                        String::new()
                    } else {
                        format!(" from {}", crate::shown::shown(&rule.from.join(", "), false))
                    },
                    holders.len(),
                    if holders.len() == 1 { "" } else { "s" },
                )
            })
        })
        .collect()
}

/// A line per key: id, owner, scopes, name, made, revoked.
pub fn render_keys(keys: &[KeyRecord]) -> String {
    if keys.is_empty() {
        return "no keys\n".into();
    }
    let mut out = String::new();
    for key in keys {
        let _ = writeln!(
            out,
            "{}  {}  {}{}{}  {}  made {}{}",
            key.id,
            crate::shown::shown(&key.owner, false),
            scope_list(key.scopes),
            key.holder
                .as_deref()
                .map(|holder| format!("  holder {}", crate::shown::shown(holder, false)))
                .unwrap_or_default(),
            if key.groups.is_empty() {
                String::new()
            } else {
                format!(
                    "  groups {}",
                    crate::shown::shown(&key.groups.join(","), false)
                )
            },
            crate::shown::shown(if key.name.is_empty() { "-" } else { &key.name }, false),
            key.created_at.format("%Y-%m-%d %H:%M"),
            key.revoked_at
                .map(|at| format!("  revoked {}", at.format("%Y-%m-%d %H:%M")))
                .unwrap_or_default()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: KeysCommand,
    }

    fn key(holder: Option<&str>, groups: &[&str], scopes: &[KeyScope]) -> KeyRecord {
        KeyRecord {
            id: uuid::Uuid::new_v4(),
            owner: "acme".into(),
            name: String::new(),
            scopes: KeyScopes::of(scopes),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            holder: holder.map(str::to_owned),
            created_at: chrono::Utc::now(),
            revoked_at: None,
        }
    }

    #[test]
    fn a_rule_fewer_holders_can_meet_than_it_needs_is_reported() {
        let rule = ApprovalRule {
            required: 2,
            from: vec!["ops".into()],
        };
        let rules = [("deploy", &rule)];
        let approve = [KeyScope::RespondApprovals];
        // One person with two keys, a reader in ops, someone outside ops.
        let mut keys = vec![
            key(Some("ann"), &["ops"], &approve),
            key(Some("ann"), &["ops"], &approve),
            key(Some("bob"), &["ops"], &[KeyScope::Read]),
            key(Some("cy"), &["sales"], &approve),
        ];
        let unmet = unmet_rules(&rules, &keys);
        assert_eq!(unmet.len(), 1, "{unmet:?}");
        assert!(
            unmet[0].contains("tool deploy needs 2 approvals from ops"),
            "{}",
            unmet[0]
        );
        assert!(unmet[0].contains("only 1 live key holder "), "{}", unmet[0]);
        // A second person in ops meets it; revoked, they do not.
        keys.push(key(None, &["ops"], &[KeyScope::Admin]));
        assert!(unmet_rules(&rules, &keys).is_empty());
        keys.last_mut().unwrap().revoked_at = Some(chrono::Utc::now());
        assert_eq!(unmet_rules(&rules, &keys).len(), 1);
    }

    #[test]
    fn scopes_are_named_and_an_unknown_one_is_refused_with_the_list() {
        let parsed = Cli::try_parse_from([
            "keys",
            "create",
            "--owner",
            "ops",
            "--scope",
            "read",
            "--scope",
            "settle:jobs",
        ])
        .unwrap();
        match parsed.command {
            KeysCommand::Create { owner, scopes, .. } => {
                assert_eq!(owner, "ops");
                assert_eq!(scopes, [KeyScope::Read, KeyScope::SettleJobs]);
            }
            other => panic!("{other:?}"),
        }
        let refused = Cli::try_parse_from(["keys", "create", "--owner", "o", "--scope", "write"])
            .unwrap_err();
        assert!(
            refused.to_string().contains("respond:approvals"),
            "{refused}"
        );
        assert!(
            Cli::try_parse_from(["keys", "create", "--owner", "o"]).is_err(),
            "a scope is required"
        );
    }
}
