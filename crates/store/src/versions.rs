//! Agent versions as stored: each agent's resolved definition under its
//! hash, recorded by every process that loads an agent file, read back by
//! a worker serving a run pinned to a version it did not load itself.

use serde_json::Value;

use crate::{Result, Store};

/// One version: its hash, its agent, its definition.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredVersion {
    pub hash: String,
    pub agent: String,
    pub definition: Value,
    pub first_seen: chrono::DateTime<chrono::Utc>,
}

impl Store {
    /// Records `versions` (hash, agent, definition); one already known is
    /// left as it was first seen. One statement, at a process's start.
    pub async fn record_agent_versions(&self, versions: &[(&str, &str, &Value)]) -> Result<()> {
        if versions.is_empty() {
            return Ok(());
        }
        let hashes: Vec<&str> = versions.iter().map(|v| v.0).collect();
        let agents: Vec<&str> = versions.iter().map(|v| v.1).collect();
        let definitions: Vec<&Value> = versions.iter().map(|v| v.2).collect();
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO agent_versions (hash, agent, definition)
                 SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[])
                 ON CONFLICT (hash) DO NOTHING",
                &[&hashes, &agents, &definitions],
            )
            .await?;
        Ok(())
    }

    /// The versions of `agent` any process recorded, oldest first, each
    /// with how many of its runs are open (queued, running or waiting).
    pub async fn list_agent_versions(&self, agent: &str) -> Result<Vec<(StoredVersion, i64)>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT v.hash, v.agent, v.definition, v.first_seen,
                        (SELECT count(*) FROM runs r WHERE r.agent_version = v.hash
                           AND r.status IN ('queued', 'running', 'waiting'))
                 FROM agent_versions v WHERE v.agent = $1 ORDER BY v.first_seen, v.hash",
                &[&agent],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|row| {
                (
                    StoredVersion {
                        hash: row.get(0),
                        agent: row.get(1),
                        definition: row.get(2),
                        first_seen: row.get(3),
                    },
                    row.get(4),
                )
            })
            .collect())
    }

    /// The version `hash`, if any process recorded it.
    pub async fn stored_agent_version(&self, hash: &str) -> Result<Option<StoredVersion>> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT hash, agent, definition, first_seen FROM agent_versions WHERE hash = $1",
            )
            .await?;
        Ok(client
            .query_opt(&stmt, &[&hash])
            .await?
            .map(|row| StoredVersion {
                hash: row.get(0),
                agent: row.get(1),
                definition: row.get(2),
                first_seen: row.get(3),
            }))
    }

    /// Deletes the agent versions nobody needs any more, and returns how
    /// many: first seen more than `keep_for` ago, not the newest of their
    /// agent, and referenced by no open run nor by any run started within
    /// `keep_for` (a fleet still running a version starts runs on it).
    /// A version found still referenced is looked at again after
    /// `recheck`: the check reads the runs table whole, so it is rare.
    pub async fn drop_unreferenced_versions(
        &self,
        keep_for: std::time::Duration,
        recheck: std::time::Duration,
    ) -> Result<u64> {
        let client = self.client().await?;
        // The candidates alone first: a small table, and usually none.
        let candidates = client
            .prepare_cached(
                "SELECT v.hash FROM agent_versions v
                 WHERE v.first_seen < now() - $1 * interval '1 millisecond'
                   AND (v.checked_at IS NULL OR v.checked_at < now() - $2 * interval '1 millisecond')
                   AND v.first_seen < (SELECT max(w.first_seen) FROM agent_versions w
                                       WHERE w.agent = v.agent)",
            )
            .await?;
        let keep_ms = keep_for.as_millis() as f64;
        let hashes: Vec<String> = client
            .query(&candidates, &[&keep_ms, &(recheck.as_millis() as f64)])
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        if hashes.is_empty() {
            return Ok(0);
        }
        let drop = client
            .prepare_cached(
                "WITH referenced AS (
                    SELECT DISTINCT r.agent_version AS hash FROM runs r
                    WHERE r.agent_version = ANY($1)
                      AND (r.status IN ('queued', 'running', 'waiting')
                           OR r.created_at > now() - $2 * interval '1 millisecond')),
                 checked AS (
                    UPDATE agent_versions SET checked_at = now()
                    WHERE hash IN (SELECT hash FROM referenced)),
                 dropped AS (
                    DELETE FROM agent_versions
                    WHERE hash = ANY($1) AND hash NOT IN (SELECT hash FROM referenced)
                    RETURNING 1)
                 SELECT count(*) FROM dropped",
            )
            .await?;
        let dropped: i64 = client.query_one(&drop, &[&hashes, &keep_ms]).await?.get(0);
        Ok(dropped.max(0) as u64)
    }
}
