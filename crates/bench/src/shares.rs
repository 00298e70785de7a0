//! The fair-shares pass (docs/budgets.md, "Fair shares"): one owner queues
//! a burst of runs on 2 worker processes; while it drains, a second owner
//! starts a few runs, and the delay until each of them starts is measured.
//! Once with the burst's agent under no cap (the queue first in, first
//! out: the baseline) and once under `max_concurrent_runs`, sampling how
//! many runs of each owner are running meanwhile.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentenkit_core::{Owner, RunStatus};

use serde_json::{json, Value};

use crate::fleet::{Fleet, BURST_CAP};

/// How often the second owner's runs are looked at while they wait.
const POLL: Duration = Duration::from_millis(10);

/// One variant's figures.
pub struct SharesRun {
    /// `burst` or `burst_fifo`.
    pub agent: &'static str,
    /// Start delays of the second owner's runs, sorted.
    pub delays: Vec<Duration>,
    /// The most runs of one owner seen `running` at a sample.
    pub most_running: i64,
    /// How long the burst took to drain (from its workers' start to its
    /// last completion).
    pub burst_wall: Duration,
}

impl SharesRun {
    /// The `p`-th percentile of the delays (nearest rank).
    pub fn delay_at(&self, p: f64) -> Duration {
        percentile(&self.delays, p)
    }
}

/// The pass: both variants.
pub struct FairShares {
    pub burst: usize,
    pub late: usize,
    pub runs: Vec<SharesRun>,
}

impl FairShares {
    /// The pass's table, for the report.
    pub fn print(&self) {
        println!(
            "\nFair shares (owner A queues {} runs of one agent, then 2 worker processes start; owner B starts {} runs \
             50 ms apart while they drain; start delay: B's POST to its run leaving `queued`, polled every 10 ms):",
            self.burst, self.late
        );
        println!("| agent | p50 start delay ms | p99 start delay ms | max | most runs of one owner running | A's burst drained in s |");
        println!("|---|---|---|---|---|---|");
        for r in &self.runs {
            let cap = match r.agent {
                "burst" => format!("max_concurrent_runs = {BURST_CAP}"),
                _ => "no cap (first in, first out)".to_owned(),
            };
            println!(
                "| {cap} | {:.1} | {:.1} | {:.1} | {} | {:.2} |",
                r.delay_at(50.0).as_secs_f64() * 1e3,
                r.delay_at(99.0).as_secs_f64() * 1e3,
                r.delay_at(100.0).as_secs_f64() * 1e3,
                r.most_running,
                r.burst_wall.as_secs_f64(),
            );
        }
        if let [fifo, capped] = &self.runs[..] {
            let (a, b) = (
                fifo.delay_at(99.0).as_secs_f64(),
                capped.delay_at(99.0).as_secs_f64(),
            );
            if a > 0.0 {
                println!(
                    "p99 start delay under the cap: {:.3}× the first-in-first-out baseline's.",
                    b / a
                );
            }
        }
    }

    /// The pass's figures, for the report's JSON.
    pub fn json(&self) -> Value {
        json!({
            "burst": self.burst, "late": self.late,
            "runs": self.runs.iter().map(|r| json!({
                "agent": r.agent,
                "p50_start_delay_ms": r.delay_at(50.0).as_secs_f64() * 1e3,
                "p99_start_delay_ms": r.delay_at(99.0).as_secs_f64() * 1e3,
                "most_running_of_one_owner": r.most_running,
                "burst_wall_s": r.burst_wall.as_secs_f64(),
            })).collect::<Vec<_>>(),
        })
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub async fn fair_shares(fleet: &Fleet, burst: usize, late: usize) -> anyhow::Result<FairShares> {
    let mut runs = Vec::new();
    for agent in ["burst_fifo", "burst"] {
        runs.push(variant(fleet, agent, burst, late).await?);
        eprintln!("fair shares: {agent} done");
    }
    Ok(FairShares { burst, late, runs })
}

async fn variant(
    fleet: &Fleet,
    agent: &'static str,
    burst: usize,
    late: usize,
) -> anyhow::Result<SharesRun> {
    let bursting = Owner("bench-burst".into());
    let second = Owner("bench-late".into());
    // The burst is queued before any worker runs: its segments (or, under
    // the cap, its held runs) wait whole when the second owner comes.
    let queued = fleet.start_runs(&bursting, agent, burst, 8).await?;
    let workers = [fleet.spawn_worker().await?, fleet.spawn_worker().await?];
    let outcome = async {
        let sampling = Arc::new(AtomicBool::new(true));
        let most = Arc::new(AtomicI64::new(0));
        let client = fleet.sql_client().await?;
        let sampler = tokio::spawn(sample(
            client,
            fleet.schema().to_owned(),
            sampling.clone(),
            most.clone(),
        ));
        let start = Instant::now();
        // The second owner's runs, 50 ms apart, while the burst drains.
        let mut waits = Vec::new();
        for _ in 0..late {
            let asked = Instant::now();
            let run = fleet.start_runs(&second, agent, 1, 1).await?[0];
            let store = fleet.store().clone();
            waits.push(tokio::spawn(async move {
                loop {
                    let queued = store.runs_with_status(&[run], RunStatus::Queued).await?;
                    if queued.is_empty() {
                        return anyhow::Ok(asked.elapsed());
                    }
                    tokio::time::sleep(POLL).await;
                }
            }));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut delays = Vec::new();
        for wait in waits {
            delays.push(wait.await??);
        }
        delays.sort();
        fleet.settle(&queued, RunStatus::Completed).await?;
        let burst_wall = start.elapsed();
        sampling.store(false, Ordering::Relaxed);
        sampler.await??;
        anyhow::Ok(SharesRun {
            agent,
            delays,
            most_running: most.load(Ordering::Relaxed),
            burst_wall,
        })
    }
    .await;
    for worker in workers {
        worker.stop().await;
    }
    outcome
}

/// Samples the most runs of one owner running at once (a worker holds
/// them), every 20 ms.
async fn sample(
    client: tokio_postgres::Client,
    schema: String,
    sampling: Arc<AtomicBool>,
    most: Arc<AtomicI64>,
) -> anyhow::Result<()> {
    let sql = format!(
        "SELECT coalesce(max(n), 0) FROM (
             SELECT count(*) n FROM {schema}.runs r JOIN {schema}.threads t ON t.id = r.thread_id
             WHERE r.status = 'running' GROUP BY t.owner) o"
    );
    while sampling.load(Ordering::Relaxed) {
        let running: i64 = client.query_one(&sql, &[]).await?.get(0);
        most.fetch_max(running, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let delays: Vec<Duration> = (1..=20).map(Duration::from_millis).collect();
        assert_eq!(percentile(&delays, 50.0), Duration::from_millis(10));
        assert_eq!(percentile(&delays, 99.0), Duration::from_millis(20));
        assert_eq!(percentile(&delays, 100.0), Duration::from_millis(20));
        assert_eq!(percentile(&[], 99.0), Duration::ZERO);
    }
}
