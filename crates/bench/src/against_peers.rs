//! The bench's figures beside the peers' (LangGraph, DBOS): cycles/s,
//! normalized by each side's INSERT baseline, and machine CPU per cycle.

use super::meter::Baseline;
use super::peers::Peers;
use super::report::{baseline_at, fmt, ConfigResult};

pub fn print(results: &[ConfigResult], baselines: &[Baseline], peers: Option<&Peers>) {
    let Some(peers) = peers else {
        println!("\nNo peer results found (../shared/peers/RESULTS*.md): no peer ratios.");
        return;
    };
    println!(
        "\n## Against the peers\n\nPeer figures from {} (run {}): measured in an earlier run, not in this one, \
         unless `make bench-peers` just re-ran them. 'normalized' divides each side by the INSERT baseline of its own run \
         (ours: tokio-postgres loop above; peers: pgbench) before taking the ratio.\n",
        peers.path.display(),
        peers.run.as_deref().unwrap_or("date unknown")
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "Machine CPU per cycle: ours from /proc by process (the CPU table above); a peer's is its machine busy % \
         times {cores} cores per cycle (its table has no split by process).\n"
    );
    println!("| c | agentenkit full cycles/s | peer config | peer full cycles/s | ratio agentenkit/peer | normalized ratio | agentenkit machine CPU ms/cycle | peer machine CPU ms/cycle | CPU ratio peer/agentenkit | peer commits/cycle | peer bytes/parked | peer resume p50 ms |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in results {
        for config in &peers.compared_at(r.concurrency) {
            let Some(theirs) = peers.figure(config, "full cycles/s") else {
                println!(
                    "| {} | {} | {config} | n/a | n/a | n/a | {} | n/a | n/a | n/a | n/a | n/a |",
                    r.concurrency,
                    fmt(r.cycles_per_s(), 1),
                    fmt(r.machine_cpu_ms_per_cycle(), 2)
                );
                continue;
            };
            let normalized = match (
                baseline_at(baselines, r.concurrency),
                peers.pgbench.get(&r.concurrency),
            ) {
                (Some(ours), Some(pgbench)) => format!(
                    "{:.2}",
                    (r.cycles_per_s() / ours.commits_per_s) / (theirs / pgbench)
                ),
                _ => "n/a".into(),
            };
            let other = |column: &str, d: usize| {
                peers
                    .figure(config, column)
                    .map_or("n/a".into(), |v| fmt(v, d))
            };
            let ours_cpu = r.machine_cpu_ms_per_cycle();
            let theirs_cpu = peers.machine_cpu_ms(config, cores);
            println!(
                "| {} | {} | {config} | {} | {:.2} | {normalized} | {} | {} | {} | {} | {} | {} |",
                r.concurrency,
                fmt(r.cycles_per_s(), 1),
                fmt(theirs, 1),
                r.cycles_per_s() / theirs,
                fmt(ours_cpu, 2),
                theirs_cpu.map_or("n/a".into(), |ms| fmt(ms, 2)),
                theirs_cpu.map_or("n/a".into(), |ms| format!("{:.2}", ms / ours_cpu)),
                other("commits/cycle (park+resume)", 2),
                other("bytes/parked", 0),
                other("resume p50 / p99 ms", 2),
            );
        }
    }
    let pgb: Vec<String> = baselines
        .iter()
        .map(|b| {
            let theirs = peers.pgbench.get(&b.clients);
            format!(
                "c={}: ours {} commits/s, peers' pgbench {}",
                b.clients,
                fmt(b.commits_per_s, 1),
                theirs.map_or("n/a".into(), |t| fmt(*t, 1))
            )
        })
        .collect();
    println!(
        "\nINSERT baselines (synchronous_commit on): {}.",
        pgb.join("; ")
    );
}
