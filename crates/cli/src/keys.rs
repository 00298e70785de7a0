//! `agentenkit keys`: API keys with scopes, made, listed and revoked in the
//! database (the operator needs its URL, not a key). A key is printed once,
//! when made; the database keeps its SHA-256 only.

use std::fmt::Write as _;

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
    },
    /// Every key (revoked ones marked), of one owner with `--owner`.
    List {
        #[arg(long)]
        owner: Option<String>,
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
            } => {
                let made = store
                    .create_api_key(&owner, &name, &scopes, &groups)
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
            KeysCommand::List { owner } => {
                let keys = store.list_api_keys(owner.as_deref()).await?;
                Ok((render_keys(&keys), true))
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

/// A line per key: id, owner, scopes, name, made, revoked.
pub fn render_keys(keys: &[KeyRecord]) -> String {
    if keys.is_empty() {
        return "no keys\n".into();
    }
    let mut out = String::new();
    for key in keys {
        let _ = writeln!(
            out,
            "{}  {}  {}{}  {}  made {}{}",
            key.id,
            crate::shown::shown(&key.owner, false),
            scope_list(key.scopes),
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
