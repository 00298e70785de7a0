//! Statistics that follow the tables as they grow.
//!
//! A prepared statement's plan is made from the statistics its tables had
//! when it was planned. Analyzed while empty (a fresh deployment, a
//! restore, a truncate), a table gives the planner nothing to choose
//! between its indexes by: a statement may then read a whole partial index
//! or every thread of an owner where its key would read one entry, and
//! keep doing so as the table grows. Autovacuum re-analyzes a table once a
//! fifth of it changed, when it runs at all. A worker asks
//! [`Store::analyze_grown_tables`] every few seconds instead: a table that
//! has twice the rows its statistics say (and 50 more) is analyzed, which
//! also makes every cached plan on it be planned again.

use crate::{is_plain_identifier, Result, Store};

/// The rows a table may have beyond twice what its statistics say before
/// it is analyzed again.
pub const GROWN_MARGIN_ROWS: i64 = 50;

/// One process analyzes at a time (the others skip their turn).
const ANALYZE_LOCK: i64 = 0x6167_656e_616e_6c7a;

impl Store {
    /// Analyzes the tables of this store's schema that grew past twice the
    /// rows their statistics say, plus [`GROWN_MARGIN_ROWS`]; returns their
    /// names. Nothing when another process is at it.
    pub async fn analyze_grown_tables(&self) -> Result<Vec<String>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let locked: bool = tx
            .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&ANALYZE_LOCK])
            .await?
            .get(0);
        if !locked {
            return Ok(Vec::new());
        }
        let grown: Vec<String> = tx
            .query(
                "SELECT c.relname::text FROM pg_class c
                 JOIN pg_stat_user_tables s ON s.relid = c.oid
                 WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
                   AND s.n_live_tup >= 2 * greatest(c.reltuples, 0)::bigint + $1
                 ORDER BY c.relname",
                &[&GROWN_MARGIN_ROWS],
            )
            .await?
            .iter()
            .map(|row| row.get(0))
            .filter(|name: &String| is_plain_identifier(name))
            .collect();
        for table in &grown {
            tx.batch_execute(&format!("ANALYZE {table}")).await?;
        }
        tx.commit().await?;
        Ok(grown)
    }
}
