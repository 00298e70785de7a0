//! The peers' figures (LangGraph, DBOS, pgbench), read best-effort from the
//! newest `RESULTS*.md` their `run.sh` wrote (summarize.py's tables).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// One table row, by column header.
pub type Row = HashMap<String, String>;

pub struct Peers {
    pub path: PathBuf,
    /// The file's "Run:" line (date and how), if any.
    pub run: Option<String>,
    /// HITL rows by config label without the "(N=…)" suffix.
    pub configs: HashMap<String, Row>,
    /// pgbench INSERT commits/s with synchronous_commit on, by clients.
    pub pgbench: HashMap<usize, f64>,
}

/// The configurations compared at each concurrency, as the issue lists them.
pub fn compared(concurrency: usize) -> &'static [&'static str] {
    match concurrency {
        1 => &["LangGraph sync c=1", "DBOS sync c=1"],
        8 => &["LangGraph async c=8 saver/worker", "DBOS async c=8"],
        _ => &[],
    }
}

impl Peers {
    /// The configurations to compare with at `concurrency`: those the issue
    /// lists, and the LangGraph configuration with the most full cycles/s
    /// at that concurrency when it is another (the bar is against
    /// LangGraph's best).
    pub fn compared_at(&self, concurrency: usize) -> Vec<String> {
        let mut configs: Vec<String> = compared(concurrency)
            .iter()
            .map(|c| c.to_string())
            .collect();
        let suffix = format!("c={concurrency}");
        let best = self
            .configs
            .keys()
            .filter(|label| {
                label.starts_with("LangGraph") && label.split(' ').any(|word| word == suffix)
            })
            .filter_map(|label| Some((self.figure(label, "full cycles/s")?, label)))
            // equal figures: the first label in order, whatever the map's order
            .max_by(|a, b| a.0.total_cmp(&b.0).then_with(|| b.1.cmp(a.1)));
        if let Some((_, label)) = best {
            if !configs.contains(label) {
                configs.push(label.clone());
            }
        }
        configs
    }
}

/// The newest results file among `dir/RESULTS*.md` and
/// `$PEERS_WORK/RESULTS.md` (where run.sh writes; default
/// /tmp/agentenkit-peers).
pub fn find(dir: &Path) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("RESULTS") && n.ends_with(".md"))
        })
        .collect();
    let work = std::env::var("PEERS_WORK").unwrap_or_else(|_| "/tmp/agentenkit-peers".into());
    candidates.push(Path::new(&work).join("RESULTS.md"));
    candidates
        .into_iter()
        .filter_map(|p| {
            let modified = std::fs::metadata(&p).and_then(|m| m.modified()).ok()?;
            Some((modified, p))
        })
        .max_by_key(|(m, _): &(SystemTime, PathBuf)| *m)
        .map(|(_, p)| p)
}

pub fn load(path: &Path) -> Option<Peers> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut peers = Peers {
        path: path.to_owned(),
        run: text
            .lines()
            .find_map(|l| l.strip_prefix("Run: "))
            .map(|r| r.split(", `").next().unwrap_or(r).to_owned()),
        configs: HashMap::new(),
        pgbench: HashMap::new(),
    };
    let mut header: Vec<String> = vec![];
    for line in text.lines() {
        let Some(inner) = line.trim().strip_prefix('|') else {
            header.clear();
            continue;
        };
        let cells: Vec<String> = inner
            .trim_end_matches('|')
            .split('|')
            .map(|c| c.trim().to_owned())
            .collect();
        if header.is_empty() {
            header = cells;
            continue;
        }
        if cells
            .iter()
            .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
        {
            continue;
        }
        let row: Row = header.iter().cloned().zip(cells).collect();
        let first = header.first().map(String::as_str).unwrap_or_default();
        if header.iter().any(|h| h == "full cycles/s") {
            let label = row.get(first).cloned().unwrap_or_default();
            let label = label.split(" (N=").next().unwrap_or_default().to_owned();
            peers.configs.insert(label, row);
        } else if first == "probe" {
            let probe = row.get("probe").map(String::as_str).unwrap_or_default();
            let on = row.get("synchronous_commit").is_some_and(|s| s == "on");
            let clients = row.get("clients").and_then(|c| c.parse::<usize>().ok());
            let tps = row.get("commits/s").and_then(|v| number(v));
            if let (true, true, Some(clients), Some(tps)) =
                (probe.starts_with("pgbench"), on, clients, tps)
            {
                peers.pgbench.insert(clients, tps);
            }
        }
    }
    Some(peers)
}

/// The first number of a cell: "1,234.5" -> 1234.5; "6.99 / 10.88" -> 6.99;
/// "13.00 (7.00+6.00)" -> 13.0.
pub fn number(cell: &str) -> Option<f64> {
    cell.split_whitespace()
        .next()?
        .replace(',', "")
        .parse()
        .ok()
}

impl Peers {
    pub fn figure(&self, config: &str, column: &str) -> Option<f64> {
        number(self.configs.get(config)?.get(column)?)
    }

    /// A configuration's machine CPU per cycle (ms): its table has no split
    /// by process, only the machine's busy share over its phases, of every
    /// one of `cores` cores.
    pub fn machine_cpu_ms(&self, config: &str, cores: usize) -> Option<f64> {
        let busy = self.figure(config, "machine busy %")?;
        let cycles = self.figure(config, "full cycles/s")?;
        (cycles > 0.0).then(|| busy / 100.0 * cores as f64 * 1000.0 / cycles)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers(rows: &[(&str, &str)]) -> Peers {
        Peers {
            path: PathBuf::from("RESULTS.md"),
            run: None,
            configs: rows
                .iter()
                .map(|(label, cycles)| {
                    let row: Row = [("full cycles/s".to_owned(), cycles.to_string())].into();
                    (label.to_string(), row)
                })
                .collect(),
            pgbench: HashMap::new(),
        }
    }

    #[test]
    fn langgraphs_best_configuration_at_a_concurrency_is_compared_too() {
        let p = peers(&[
            ("LangGraph async c=8 saver/worker", "75.1"),
            ("LangGraph sync c=8 saver/worker", "79.0"),
            ("LangGraph sync c=1 durability=exit", "100.2"),
            ("DBOS async c=8", "39.4"),
        ]);
        assert_eq!(
            p.compared_at(8),
            [
                "LangGraph async c=8 saver/worker",
                "DBOS async c=8",
                "LangGraph sync c=8 saver/worker"
            ]
        );
        // the listed one is the best: no row twice
        let p = peers(&[("LangGraph sync c=1", "58.6")]);
        assert_eq!(p.compared_at(1), ["LangGraph sync c=1", "DBOS sync c=1"]);
    }

    #[test]
    fn a_peers_machine_cpu_per_cycle_is_its_busy_share_of_every_core() {
        let mut p = peers(&[("LangGraph sync c=8 saver/worker", "81.2")]);
        let label = "LangGraph sync c=8 saver/worker";
        assert_eq!(p.machine_cpu_ms(label, 2), None, "no busy % column");
        p.configs
            .get_mut(label)
            .unwrap()
            .insert("machine busy %".into(), "68".into());
        let ms = p.machine_cpu_ms(label, 2).unwrap();
        assert!((ms - 0.68 * 2000.0 / 81.2).abs() < 1e-9, "{ms}");
        assert_eq!(p.machine_cpu_ms("DBOS async c=8", 2), None);
    }
}
