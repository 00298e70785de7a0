//! Postgres and process meters, with the peers' definitions (pgmeter.py):
//!
//! * commits = `pg_stat_database.xact_commit` delta of the database (read-only
//!   transactions count too), minus the meter's own commits and minus one
//!   start-up transaction per new session (`pg_stat_database.sessions`);
//! * bytes = growth of `pg_total_relation_size` (heap + indexes + TOAST) of
//!   the bench schema's tables;
//! * counters are read from a connection to database `postgres`, so reading
//!   them adds nothing to the measured database.
//!
//! A backend publishes its counters lazily (PostgreSQL 15: when it goes idle
//! at most once a second, else after 10 s idle, or at exit). The bench keeps
//! its pool open (re-preparing statements on new connections would add
//! commits), so callers wait `stats_flush` of idleness before a snapshot.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage};

pub async fn connect(config: &Config) -> anyhow::Result<Client> {
    let (client, connection) = config
        .connect(NoTls)
        .await
        .context("connecting to Postgres (is it running? `make services`)")?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "meter connection ended");
        }
    });
    Ok(client)
}

/// The rows of one simple query, as text cells.
pub async fn rows(client: &Client, sql: &str) -> anyhow::Result<Vec<Vec<String>>> {
    Ok(client
        .simple_query(sql)
        .await
        .with_context(|| format!("query {sql:?}"))?
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).unwrap_or_default().to_owned())
                    .collect(),
            ),
            _ => None,
        })
        .collect())
}

/// Whether the server loads pg_stat_statements and `client`'s database
/// has its view.
pub async fn statements_loaded(client: &Client) -> anyhow::Result<bool> {
    let loaded = cell(
        client,
        "SELECT to_regclass('pg_stat_statements') IS NOT NULL
                AND current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%'",
    )
    .await?;
    Ok(loaded == "t")
}

async fn cell(client: &Client, sql: &str) -> anyhow::Result<String> {
    rows(client, sql)
        .await?
        .into_iter()
        .next()
        .and_then(|r| r.into_iter().next())
        .with_context(|| format!("no row from {sql:?}"))
}

fn int(text: &str) -> anyhow::Result<i64> {
    text.parse()
        .with_context(|| format!("not an integer: {text:?}"))
}

pub struct Meter {
    admin: Client,
    target: Config,
    dbname: String,
    schema: String,
    /// Commits the meter made in the measured database so far.
    self_commits: i64,
}

#[derive(Debug, Clone)]
pub struct Snapshot {
    pub xact_commit: i64,
    pub sessions: i64,
    pub wal_bytes: i64,
    pub wal_syncs: i64,
    /// Statements run in the database (pg_stat_statements, BEGIN and
    /// COMMIT included), when the extension is loaded.
    pub statements: Option<i64>,
    /// The meter's own commits in the database before this reading.
    pub self_commits: i64,
    pub bytes: i64,
    pub bytes_per_table: BTreeMap<String, i64>,
    /// Each table (heap, TOAST, free-space and visibility maps) and each
    /// index apart: which index costs what.
    pub bytes_per_relation: BTreeMap<String, i64>,
    pub runs_by_status: BTreeMap<String, i64>,
    /// Sequential scans of the schema's tables, and the rows they read
    /// (pg_stat_user_tables; each reading adds its own count of `runs`).
    pub seq_scans: i64,
    pub seq_rows_read: i64,
    /// Row versions each table has written (pg_stat_user_tables).
    pub row_writes: BTreeMap<String, RowWrites>,
}

/// A table's row versions written: every insert and every update makes a
/// new version (a dead one stays until pruned or vacuumed); an update is
/// HOT when no indexed column changed and the new version fit on the same
/// page, so no index gains an entry.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RowWrites {
    pub inserted: f64,
    pub updated: f64,
    pub hot_updated: f64,
    pub deleted: f64,
}

impl RowWrites {
    fn per_item(self, earlier: RowWrites, n: f64) -> RowWrites {
        RowWrites {
            inserted: (self.inserted - earlier.inserted) / n,
            updated: (self.updated - earlier.updated) / n,
            hot_updated: (self.hot_updated - earlier.hot_updated) / n,
            deleted: (self.deleted - earlier.deleted) / n,
        }
    }
}

impl Snapshot {
    pub fn runs(&self, status: &str) -> i64 {
        self.runs_by_status.get(status).copied().unwrap_or(0)
    }
}

/// Per-item deltas between two snapshots.
pub struct Delta {
    pub commits: f64,
    pub raw_commits: i64,
    pub sessions: i64,
    pub wal_bytes: f64,
    pub wal_syncs: f64,
    pub statements: Option<f64>,
    pub bytes: f64,
    pub seq_scans: f64,
    pub seq_rows_read: f64,
    pub row_writes: BTreeMap<String, RowWrites>,
}

pub fn delta(a: &Snapshot, b: &Snapshot, n: usize) -> Delta {
    let n = n.max(1) as f64;
    let raw = b.xact_commit - a.xact_commit;
    let sessions = b.sessions - a.sessions;
    let own = b.self_commits - a.self_commits;
    Delta {
        commits: (raw - sessions - own) as f64 / n,
        raw_commits: raw,
        sessions,
        wal_bytes: (b.wal_bytes - a.wal_bytes) as f64 / n,
        wal_syncs: (b.wal_syncs - a.wal_syncs) as f64 / n,
        // The meter runs one statement per reading, as it makes one commit.
        statements: a
            .statements
            .zip(b.statements)
            .map(|(a, b)| (b - a - own) as f64 / n),
        bytes: (b.bytes - a.bytes) as f64 / n,
        seq_scans: (b.seq_scans - a.seq_scans) as f64 / n,
        seq_rows_read: (b.seq_rows_read - a.seq_rows_read) as f64 / n,
        row_writes: b
            .row_writes
            .iter()
            .map(|(table, later)| {
                let earlier = a.row_writes.get(table).copied().unwrap_or_default();
                (table.clone(), later.per_item(earlier, n))
            })
            .collect(),
    }
}

impl Meter {
    pub async fn connect(database_url: &str, schema: &str) -> anyhow::Result<Meter> {
        let mut target = Config::from_str(database_url).context("invalid database url")?;
        let dbname = match (target.get_dbname(), target.get_user()) {
            (Some(db), _) | (None, Some(db)) => db.to_owned(),
            (None, None) => bail!("the database url names no database"),
        };
        target.application_name("agentenkit-bench-meter");
        let mut admin = target.clone();
        admin.dbname("postgres");
        Ok(Meter {
            admin: connect(&admin).await?,
            target,
            dbname,
            schema: schema.to_owned(),
            self_commits: 0,
        })
    }

    pub fn dbname(&self) -> &str {
        &self.dbname
    }

    /// The meter's own session (database `postgres`).
    pub fn admin(&self) -> &Client {
        &self.admin
    }

    pub fn target(&self) -> &Config {
        &self.target
    }

    /// `SHOW name` on the server.
    pub async fn show(&self, name: &str) -> anyhow::Result<String> {
        cell(&self.admin, &format!("SHOW {name}")).await
    }

    /// Client backends connected to the measured database (ours included).
    pub async fn client_backends(&self) -> anyhow::Result<i64> {
        int(&cell(
            &self.admin,
            &format!(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND backend_type = 'client backend'",
                self.dbname.replace('\'', "''")
            ),
        )
        .await?)
    }

    /// Empties every table of the schema (not `schema_migrations`), then
    /// vacuums them: each configuration starts from fresh tables. Runs
    /// outside any measured interval.
    pub async fn truncate_all(&self) -> anyhow::Result<()> {
        let client = connect(&self.target).await?;
        let names = self.tables(&client).await?;
        if names.is_empty() {
            return Ok(());
        }
        client
            .batch_execute(&format!("TRUNCATE {}", names.join(", ")))
            .await?;
        for name in &names {
            client
                .batch_execute(&format!("VACUUM ANALYZE {name}"))
                .await?;
        }
        Ok(())
    }

    /// The schema's tables, qualified and quoted.
    async fn tables(&self, client: &Client) -> anyhow::Result<Vec<String>> {
        let tables = rows(
            client,
            &format!(
                "SELECT tablename FROM pg_tables WHERE schemaname = '{}' AND tablename <> 'schema_migrations'",
                self.schema
            ),
        )
        .await?;
        let names: Vec<String> = tables
            .into_iter()
            .filter_map(|r| r.into_iter().next())
            .map(|t| format!("{}.\"{}\"", self.schema, t.replace('"', "\"\"")))
            .collect();
        Ok(names)
    }

    /// ANALYZE of every table of the schema: a deployment's autovacuum
    /// does it as tables grow, and it makes every prepared statement plan
    /// again on its next use, with the tables' real sizes.
    pub async fn analyze_all(&self) -> anyhow::Result<()> {
        let client = connect(&self.target).await?;
        client
            .batch_execute(&format!(
                "ANALYZE {}",
                self.tables(&client).await?.join(", ")
            ))
            .await?;
        Ok(())
    }

    /// Statements run in the measured database so far, from
    /// pg_stat_statements (`None` when it is not loaded: `make bench-peers`
    /// loads it, as the peers' meter does).
    async fn statements(&self) -> anyhow::Result<Option<i64>> {
        if !statements_loaded(&self.admin).await? {
            return Ok(None);
        }
        let calls = cell(
            &self.admin,
            &format!(
                "SELECT coalesce(sum(s.calls), 0)::bigint FROM pg_stat_statements s
                 JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = '{}'",
                self.dbname.replace('\'', "''")
            ),
        )
        .await?;
        Ok(Some(int(&calls)?))
    }

    pub async fn snapshot(&mut self) -> anyhow::Result<Snapshot> {
        self.admin
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .await?;
        let counters = rows(
            &self.admin,
            &format!(
                "SELECT d.xact_commit, d.sessions,
                        pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint, w.wal_sync
                 FROM pg_stat_database d, pg_stat_wal w WHERE d.datname = '{}'",
                self.dbname.replace('\'', "''")
            ),
        )
        .await?;
        let [xact, sessions, wal, syncs] = counters
            .first()
            .map(Vec::as_slice)
            .context("pg_stat_database has no row for the database")?
        else {
            bail!("unexpected pg_stat_database row");
        };
        let (xact, sessions, wal, syncs) = (int(xact)?, int(sessions)?, int(wal)?, int(syncs)?);
        let statements = self.statements().await?;
        let self_commits = self.self_commits;
        // One statement on a fresh connection: one commit (counted into the
        // next interval) and one session start-up (removed via `sessions`).
        let client = connect(&self.target).await?;
        self.self_commits += 1;
        let s = &self.schema;
        let row = rows(
            &client,
            &format!(
                "SELECT (SELECT coalesce(string_agg(c.relname || '=' || pg_total_relation_size(c.oid), ','), '')
                         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                         WHERE n.nspname = '{s}' AND c.relkind = 'r'),
                        (SELECT coalesce(string_agg(c.relname || '=' ||
                                  CASE c.relkind WHEN 'r' THEN pg_table_size(c.oid) ELSE pg_relation_size(c.oid) END, ','), '')
                         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                         WHERE n.nspname = '{s}' AND c.relkind IN ('r', 'i')),
                        (SELECT coalesce(string_agg(status || '=' || n, ','), '')
                         FROM (SELECT status, count(*) AS n FROM {s}.runs GROUP BY status) r),
                        (SELECT 'scans=' || coalesce(sum(seq_scan), 0) || ',rows=' || coalesce(sum(seq_tup_read), 0)
                         FROM pg_stat_user_tables WHERE schemaname = '{s}'),
                        (SELECT coalesce(string_agg(relname || '=' || n_tup_ins || ':' || n_tup_upd || ':'
                                                    || n_tup_hot_upd || ':' || n_tup_del, ','), '')
                         FROM pg_stat_user_tables WHERE schemaname = '{s}')"
            ),
        )
        .await?;
        let (sizes, relations, statuses, seq, writes) = match row.first().map(Vec::as_slice) {
            Some([sizes, relations, statuses, seq, writes]) => (
                pairs(sizes)?,
                pairs(relations)?,
                pairs(statuses)?,
                pairs(seq)?,
                row_writes(writes)?,
            ),
            _ => bail!("unexpected size row"),
        };
        Ok(Snapshot {
            xact_commit: xact,
            sessions,
            wal_bytes: wal,
            wal_syncs: syncs,
            statements,
            self_commits,
            bytes: sizes.values().sum(),
            bytes_per_table: sizes,
            bytes_per_relation: relations,
            runs_by_status: statuses,
            seq_scans: seq.get("scans").copied().unwrap_or(0),
            seq_rows_read: seq.get("rows").copied().unwrap_or(0),
            row_writes: writes,
        })
    }
}

fn pairs(text: &str) -> anyhow::Result<BTreeMap<String, i64>> {
    text.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').context("name=value")?;
            Ok((k.to_owned(), int(v)?))
        })
        .collect()
}

/// `table=inserted:updated:hot:deleted,...` as read from pg_stat_user_tables.
fn row_writes(text: &str) -> anyhow::Result<BTreeMap<String, RowWrites>> {
    text.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (table, counts) = p.split_once('=').context("table=counts")?;
            let counts: Vec<f64> = counts
                .split(':')
                .map(|c| int(c).map(|c| c as f64))
                .collect::<anyhow::Result<_>>()?;
            let [inserted, updated, hot_updated, deleted] = counts[..] else {
                bail!("expected inserted:updated:hot:deleted, got {p}");
            };
            let writes = RowWrites {
                inserted,
                updated,
                hot_updated,
                deleted,
            };
            Ok((table.to_owned(), writes))
        })
        .collect()
}

/// Process and machine counters from /proc.
#[derive(Debug, Clone, Copy)]
pub struct ProcSample {
    pub rss: i64,
    /// utime + stime of the whole process, in clock ticks (USER_HZ = 100).
    pub cpu_ticks: i64,
    pub machine_total: i64,
    pub machine_idle: i64,
}

impl ProcSample {
    pub fn now() -> ProcSample {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let rss = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<i64>().ok())
            .map_or(0, |kb| kb * 1024);
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let cpu_ticks = super::cpu::parse_stat(&stat).map_or(0, |(_, ticks)| ticks);
        let (machine_total, machine_idle) = super::cpu::machine_ticks();
        ProcSample {
            rss,
            cpu_ticks,
            machine_total,
            machine_idle,
        }
    }

    /// (process CPU ms, machine busy %) from `self` to `later`.
    pub fn usage(&self, later: &ProcSample) -> (f64, f64) {
        let cpu_ms = (later.cpu_ticks - self.cpu_ticks) as f64 * 10.0;
        let total = (later.machine_total - self.machine_total) as f64;
        let idle = (later.machine_idle - self.machine_idle) as f64;
        let busy = if total > 0.0 {
            100.0 * (total - idle) / total
        } else {
            f64::NAN
        };
        (cpu_ms, busy)
    }
}

/// Nearest-rank percentile of durations, in ms.
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1000.0
}

/// The physical baseline: one single-row INSERT per transaction (like the
/// peers' pgbench script), `clients` connections, for `secs`.
pub struct Baseline {
    pub clients: usize,
    pub commits_per_s: f64,
    pub latency_ms: f64,
    pub transactions: u64,
}

pub async fn insert_baseline(
    target: &Config,
    table: &str,
    clients: usize,
    secs: f64,
) -> anyhow::Result<Baseline> {
    let sql = format!("INSERT INTO {table} (payload) VALUES (repeat('x', 300))");
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients {
        let client = connect(target).await?;
        let stmt = client.prepare(&sql).await?;
        conns.push((client, stmt));
    }
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|(client, stmt)| {
            tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < deadline {
                    client.execute(&stmt, &[]).await?;
                    done += 1;
                }
                anyhow::Ok(done)
            })
        })
        .collect();
    let mut transactions = 0;
    for task in tasks {
        transactions += task.await.context("baseline task")??;
    }
    let elapsed = start.elapsed().as_secs_f64();
    Ok(Baseline {
        clients,
        commits_per_s: transactions as f64 / elapsed,
        latency_ms: elapsed * 1000.0 * clients as f64 / transactions.max(1) as f64,
        transactions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_writes_read_each_tables_four_counts() {
        let writes = row_writes("runs=20:120:20:0,outbox=60:0:0:60").unwrap();
        let runs = RowWrites {
            inserted: 20.0,
            updated: 120.0,
            hot_updated: 20.0,
            deleted: 0.0,
        };
        assert_eq!(writes["runs"], runs);
        assert_eq!(writes["outbox"].deleted, 60.0);
        assert!(row_writes("").unwrap().is_empty());
        assert!(row_writes("runs=1:2:3").is_err());
    }

    #[test]
    fn row_writes_per_item_are_the_growth_over_the_items() {
        let earlier = RowWrites {
            inserted: 10.0,
            updated: 20.0,
            hot_updated: 5.0,
            deleted: 0.0,
        };
        let later = RowWrites {
            inserted: 30.0,
            updated: 80.0,
            hot_updated: 15.0,
            deleted: 4.0,
        };
        let per = later.per_item(earlier, 10.0);
        assert_eq!(
            per,
            RowWrites {
                inserted: 2.0,
                updated: 6.0,
                hot_updated: 1.0,
                deleted: 0.4
            }
        );
    }
}
