//! Where Postgres's time goes in a cycle, statement by statement
//! (`pg_stat_statements`, when the server loads it: `make bench-peers`
//! does): calls, plans and milliseconds of execution and planning per
//! cycle. Execution time is wall time inside the executor, so on a busy
//! machine it includes waiting for a core; compare statements by it, and
//! the CPU table for the whole.

use std::collections::BTreeMap;

use tokio_postgres::Client;

use crate::meter::{rows, statements_loaded};

/// One statement's counters, summed over the users that ran it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    pub query: String,
    pub calls: i64,
    pub plans: i64,
    pub exec_ms: f64,
    pub plan_ms: f64,
}

/// The counters of a database's statements, by query id.
#[derive(Debug, Clone, Default)]
pub struct Statements(BTreeMap<String, Counters>);

/// One statement's cost per cycle between two readings.
#[derive(Debug, Clone, PartialEq)]
pub struct PerCycle {
    pub query: String,
    pub calls: f64,
    pub plans: f64,
    pub exec_ms: f64,
    pub plan_ms: f64,
}

/// The statements of `dbname` so far; empty when the extension is not
/// loaded.
pub async fn read(admin: &Client, dbname: &str) -> anyhow::Result<Statements> {
    if !statements_loaded(admin).await? {
        return Ok(Statements::default());
    }
    let found = rows(
        admin,
        &format!(
            "SELECT s.queryid::text, min(s.query), sum(s.calls)::bigint, sum(s.plans)::bigint,
                    sum(s.total_exec_time), sum(s.total_plan_time)
             FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
             WHERE d.datname = '{}' AND s.queryid IS NOT NULL GROUP BY s.queryid",
            dbname.replace('\'', "''")
        ),
    )
    .await?;
    let mut statements = BTreeMap::new();
    for row in found {
        let [id, query, calls, plans, exec_ms, plan_ms] = &row[..] else {
            continue;
        };
        statements.insert(
            id.clone(),
            Counters {
                query: query.clone(),
                calls: calls.parse()?,
                plans: plans.parse()?,
                exec_ms: exec_ms.parse()?,
                plan_ms: plan_ms.parse()?,
            },
        );
    }
    Ok(Statements(statements))
}

/// What each statement cost per cycle from `before` to `after` (`n`
/// cycles), dearest first; statements run fewer than once in ten cycles
/// are left out (the meter's own, start-up).
pub fn per_cycle(before: &Statements, after: &Statements, n: usize) -> Vec<PerCycle> {
    let n = n.max(1) as f64;
    let mut costs: Vec<PerCycle> = after
        .0
        .iter()
        .map(|(id, now)| {
            let was = before.0.get(id).cloned().unwrap_or_default();
            PerCycle {
                query: now.query.clone(),
                calls: (now.calls - was.calls) as f64 / n,
                plans: (now.plans - was.plans) as f64 / n,
                exec_ms: (now.exec_ms - was.exec_ms) / n,
                plan_ms: (now.plan_ms - was.plan_ms) / n,
            }
        })
        .filter(|c| c.calls >= 0.1)
        .collect();
    costs.sort_by(|a, b| b.exec_ms.total_cmp(&a.exec_ms));
    costs
}

/// A statement's text on one table row: whitespace collapsed, comments
/// and pipes out, cut at `width` characters.
fn one_line(query: &str, width: usize) -> String {
    let text: Vec<&str> = query
        .lines()
        .map(|l| l.split("--").next().unwrap_or_default())
        .flat_map(str::split_whitespace)
        .collect();
    let text = text.join(" ").replace('|', "\\|");
    match text.char_indices().nth(width) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

/// The dearest `top` statements of each configuration, as markdown.
pub fn print(configs: &[(String, Vec<PerCycle>)], top: usize) {
    if configs.iter().all(|(_, costs)| costs.is_empty()) {
        return;
    }
    println!(
        "\nWhere Postgres's time goes per cycle, by statement (pg_stat_statements over both phases; \
         execution is wall time in the executor, waits for a core included; plans are counted \
         when pg_stat_statements.track_planning is on):\n"
    );
    for (label, costs) in configs {
        println!("| {label} | calls | plans | exec ms | plan ms |\n|---|---|---|---|---|");
        for cost in costs.iter().take(top) {
            println!(
                "| {} | {:.2} | {:.2} | {:.3} | {:.3} |",
                one_line(&cost.query, 90),
                cost.calls,
                cost.plans,
                cost.exec_ms,
                cost.plan_ms
            );
        }
        let (exec, plan): (f64, f64) = costs
            .iter()
            .fold((0.0, 0.0), |(e, p), c| (e + c.exec_ms, p + c.plan_ms));
        println!(
            "| all {} statements | | | {exec:.3} | {plan:.3} |\n",
            costs.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(query: &str, calls: i64, plans: i64, exec_ms: f64) -> Counters {
        Counters {
            query: query.into(),
            calls,
            plans,
            exec_ms,
            plan_ms: 0.0,
        }
    }

    #[test]
    fn costs_are_per_cycle_dearest_first_and_rare_ones_left_out() {
        let before = Statements(BTreeMap::from([
            ("1".into(), counters("SELECT a", 10, 5, 1.0)),
            ("2".into(), counters("SELECT b", 0, 0, 0.0)),
        ]));
        let after = Statements(BTreeMap::from([
            ("1".into(), counters("SELECT a", 210, 5, 21.0)),
            ("2".into(), counters("SELECT b", 400, 0, 80.0)),
            ("3".into(), counters("ANALYZE x", 1, 1, 50.0)),
        ]));
        let costs = per_cycle(&before, &after, 100);
        assert_eq!(costs.len(), 2, "{costs:?}");
        assert_eq!(costs[0].query, "SELECT b");
        assert_eq!((costs[0].calls, costs[0].exec_ms), (4.0, 0.8));
        assert_eq!(
            (costs[1].calls, costs[1].plans, costs[1].exec_ms),
            (2.0, 0.0, 0.2)
        );
    }

    #[test]
    fn a_statement_is_one_table_cell() {
        let query = "WITH a AS ( -- why\n  SELECT 1 | 2\n)\nSELECT *   FROM a";
        assert_eq!(
            one_line(query, 90),
            "WITH a AS ( SELECT 1 \\| 2 ) SELECT * FROM a"
        );
        assert_eq!(one_line("SELECT abcdef", 8), "SELECT a…");
    }
}
