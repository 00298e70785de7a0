//! The migration runner: numbered SQL files from `migrations/`, each applied
//! once in its own transaction and recorded in `schema_migrations`.

use crate::{Error, Result, Store};

/// `(version, name, sql)`, in order. Embedded at build time so a binary
/// migrates without the source tree beside it. A version, once released,
/// is never edited: a change to the schema is a new file (docs/architecture.md,
/// "Changing the schema").
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "schema",
        include_str!("../../../migrations/0001_schema.sql"),
    ),
    (
        2,
        "decisions",
        include_str!("../../../migrations/0002_decisions.sql"),
    ),
    (
        3,
        "idempotency_keys",
        include_str!("../../../migrations/0003_idempotency_keys.sql"),
    ),
    (
        4,
        "api_keys",
        include_str!("../../../migrations/0004_api_keys.sql"),
    ),
    (
        5,
        "approvals",
        include_str!("../../../migrations/0005_approvals.sql"),
    ),
    (
        6,
        "notifications",
        include_str!("../../../migrations/0006_notifications.sql"),
    ),
    (
        7,
        "key_holders",
        include_str!("../../../migrations/0007_key_holders.sql"),
    ),
    (
        8,
        "agent_versions",
        include_str!("../../../migrations/0008_agent_versions.sql"),
    ),
    (
        9,
        "unserved",
        include_str!("../../../migrations/0009_unserved.sql"),
    ),
    (
        10,
        "version_checks",
        include_str!("../../../migrations/0010_version_checks.sql"),
    ),
    (
        11,
        "call_states",
        include_str!("../../../migrations/0011_call_states.sql"),
    ),
    (
        12,
        "run_traces",
        include_str!("../../../migrations/0012_run_traces.sql"),
    ),
    (
        13,
        "expiry_index",
        include_str!("../../../migrations/0013_expiry_index.sql"),
    ),
    (
        14,
        "call_state_function",
        include_str!("../../../migrations/0014_call_state_function.sql"),
    ),
    (
        15,
        "conversations",
        include_str!("../../../migrations/0015_conversations.sql"),
    ),
    (
        16,
        "forks",
        include_str!("../../../migrations/0016_forks.sql"),
    ),
    (
        17,
        "fair_shares",
        include_str!("../../../migrations/0017_fair_shares.sql"),
    ),
    (
        18,
        "provider_limits",
        include_str!("../../../migrations/0018_provider_limits.sql"),
    ),
];

/// An arbitrary constant: migrations of one database take this advisory lock
/// so two processes starting at once do not both apply a version.
const MIGRATION_LOCK: i64 = 0x6167_656e_746b_6974;

impl Store {
    /// Applies every migration not yet applied; returns the versions applied.
    /// Idempotent, and safe to run from several processes at once.
    pub async fn migrate(&self) -> Result<Vec<i32>> {
        let mut client = self.client().await?;
        if let Some(schema) = &self.schema {
            client
                .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                .await?;
        }
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (
                    version int PRIMARY KEY,
                    name text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now())",
            )
            .await?;
        refuse_unknown_history(&client).await?;
        let mut applied = Vec::new();
        for &(version, name, sql) in MIGRATIONS {
            let tx = client.transaction().await?;
            // A migration (or waiting for another process's) may take
            // longer than the sessions' statement_timeout allows a request.
            tx.batch_execute("SET LOCAL statement_timeout = 0").await?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
                .await?;
            let done = tx
                .query_opt(
                    "SELECT 1 FROM schema_migrations WHERE version = $1",
                    &[&version],
                )
                .await?
                .is_some();
            if done {
                continue;
            }
            tx.batch_execute(sql).await.map_err(|e| Error::Migration {
                version,
                // The server's own words ("db error" alone says nothing).
                message: e
                    .as_db_error()
                    .map_or_else(|| e.to_string(), ToString::to_string),
            })?;
            tx.execute(
                "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                &[&version, &name],
            )
            .await?;
            tx.commit().await?;
            tracing::info!(version, name, "migration applied");
            applied.push(version);
        }
        Ok(applied)
    }
}

/// A database whose recorded migrations are not this binary's (one made
/// by a pre-release build, whose migrations were squashed into the first
/// one, or by a newer release) is refused before anything is applied:
/// applying this binary's list on top of another would build a schema no
/// version of the code reads.
async fn refuse_unknown_history(client: &deadpool_postgres::Object) -> Result<()> {
    let recorded = client
        .query(
            "SELECT version, name FROM schema_migrations ORDER BY version",
            &[],
        )
        .await?;
    for row in recorded {
        let (version, name): (i32, String) = (row.get(0), row.get(1));
        if !MIGRATIONS
            .iter()
            .any(|(v, n, _)| *v == version && *n == name)
        {
            return Err(Error::Migration {
                version,
                message: format!(
                    "the database records migration {version} ({name}), which this build does \
                     not have: it was made by a pre-release build (whose migrations were \
                     squashed) or by a newer release. Migrate a new database (or schema) \
                     instead, or run the release that made it."
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file added to `migrations/` but not to the list would never run.
    #[test]
    fn every_migration_file_is_embedded_in_order() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../migrations");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("migrations dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".sql"))
            .collect();
        files.sort();
        let embedded: Vec<String> = MIGRATIONS
            .iter()
            .map(|(version, name, _)| format!("{version:04}_{name}.sql"))
            .collect();
        assert_eq!(files, embedded);
    }
}
