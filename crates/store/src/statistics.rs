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
//!
//! [`Store::prepared_plans`] shows what came of it: each statement the
//! store's sessions prepared, with the plan they run it by.

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

/// A statement one of the store's sessions prepared, and how that session
/// plans it.
#[derive(Debug, Clone)]
pub struct PreparedPlan {
    pub statement: String,
    /// The plan the session runs it by (`EXPLAIN (COSTS OFF) EXECUTE`,
    /// every parameter null: a generic plan does not look at them).
    pub plan: String,
    /// How often the session planned it for all executions, and for one
    /// execution's parameters (`pg_prepared_statements`).
    pub generic_plans: i64,
    pub custom_plans: i64,
}

impl Store {
    /// Every statement the store's open sessions prepared, with its plan:
    /// how a test (or an operator) checks that no hot statement reads a
    /// whole table and none is planned at every execution. Holds every
    /// pooled connection while it looks, so call it while the store is
    /// idle.
    pub async fn prepared_plans(&self) -> Result<Vec<PreparedPlan>> {
        let mut sessions = Vec::new();
        for _ in 0..self.pool.status().size {
            sessions.push(self.client().await?);
        }
        let mut plans = Vec::new();
        for session in &sessions {
            let prepared = session
                .query(
                    "SELECT name, statement, coalesce(cardinality(parameter_types), 0),
                            generic_plans, custom_plans
                     FROM pg_prepared_statements ORDER BY name",
                    &[],
                )
                .await?;
            for row in prepared {
                let name: String = row.get(0);
                let parameters: i32 = row.get(2);
                if !is_plain_identifier(&name) {
                    continue;
                }
                let nulls = vec!["NULL"; parameters as usize].join(", ");
                let execute = if parameters == 0 {
                    format!("EXPLAIN (COSTS OFF) EXECUTE {name}")
                } else {
                    format!("EXPLAIN (COSTS OFF) EXECUTE {name}({nulls})")
                };
                let plan: Vec<String> = session
                    .simple_query(&execute)
                    .await?
                    .into_iter()
                    .filter_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                        _ => None,
                    })
                    .collect();
                plans.push(PreparedPlan {
                    statement: row.get(1),
                    plan: plan.join("\n"),
                    generic_plans: row.get(3),
                    custom_plans: row.get(4),
                });
            }
        }
        Ok(plans)
    }
}
