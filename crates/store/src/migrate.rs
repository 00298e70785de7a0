//! The migration runner: numbered SQL files from `migrations/`, each applied
//! once in its own transaction and recorded in `schema_migrations`.

use crate::{Error, Result, Store};

/// `(version, name, sql)`, in order. Embedded at build time so a binary
/// migrates without the source tree beside it.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "init", include_str!("../../../migrations/0001_init.sql")),
    (
        2,
        "event_notify",
        include_str!("../../../migrations/0002_event_notify.sql"),
    ),
    (
        3,
        "park_request",
        include_str!("../../../migrations/0003_park_request.sql"),
    ),
    (
        4,
        "event_xid",
        include_str!("../../../migrations/0004_event_xid.sql"),
    ),
    (
        5,
        "outbox_consumed",
        include_str!("../../../migrations/0005_outbox_consumed.sql"),
    ),
    (
        6,
        "hot_path",
        include_str!("../../../migrations/0006_hot_path.sql"),
    ),
    (
        7,
        "row_checks",
        include_str!("../../../migrations/0007_row_checks.sql"),
    ),
    (
        8,
        "no_event_notify",
        include_str!("../../../migrations/0008_no_event_notify.sql"),
    ),
    (
        9,
        "takeovers",
        include_str!("../../../migrations/0009_takeovers.sql"),
    ),
    (
        10,
        "packed_events",
        include_str!("../../../migrations/0010_packed_events.sql"),
    ),
    (
        11,
        "outbox_key_only",
        include_str!("../../../migrations/0011_outbox_key_only.sql"),
    ),
    (
        12,
        "message_events",
        include_str!("../../../migrations/0012_message_events.sql"),
    ),
    (
        13,
        "packed_journal",
        include_str!("../../../migrations/0013_packed_journal.sql"),
    ),
    (
        14,
        "call_arguments_in_journal",
        include_str!("../../../migrations/0014_call_arguments_in_journal.sql"),
    ),
    (
        15,
        "assistant_messages_in_journal",
        include_str!("../../../migrations/0015_assistant_messages_in_journal.sql"),
    ),
    (
        16,
        "fewer_indexes",
        include_str!("../../../migrations/0016_fewer_indexes.sql"),
    ),
    (
        17,
        "denser_rows",
        include_str!("../../../migrations/0017_denser_rows.sql"),
    ),
    (
        18,
        "events_per_commit",
        include_str!("../../../migrations/0018_events_per_commit.sql"),
    ),
    (
        19,
        "persist_in_call_row",
        include_str!("../../../migrations/0019_persist_in_call_row.sql"),
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
                message: e.to_string(),
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
