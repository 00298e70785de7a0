//! The figures of one configuration, and how they are printed.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use super::cpu::Group;
use super::hub::Publishes;
use super::meter::{percentile_ms, Baseline, Delta};
use super::peers::Peers;

pub struct ConfigResult {
    pub concurrency: usize,
    pub n: usize,
    pub wall_park: Duration,
    pub wall_resume: Duration,
    /// Sorted columns: park latency, store calls (publish confirmed
    /// included), start_run call → delivered, worker.
    pub park: Vec<Vec<Duration>>,
    /// Sorted columns: respond→resumed, respond→completed, answer call
    /// (publish confirmed included), answer call → delivered, worker → tool
    /// ran, tool → ack.
    pub resume: Vec<Vec<Duration>>,
    pub cpu_ms: f64,
    pub busy_pct: f64,
    /// CPU ms over both phases, by process group (adds up to the
    /// machine's busy time).
    pub cpu_by_group: BTreeMap<Group, f64>,
    pub park_delta: Delta,
    pub resume_delta: Delta,
    pub cycle_delta: Delta,
    pub rss_per_parked: f64,
    /// What each statement cost per cycle, dearest first (empty without
    /// pg_stat_statements).
    pub statement_costs: Vec<crate::statements::PerCycle>,
    pub bytes_per_table_parked: BTreeMap<String, f64>,
    /// The same growth for each table and each index apart.
    pub bytes_per_relation_parked: BTreeMap<String, f64>,
    pub nacks: u64,
    /// Broker writes over the measured phases (all N cycles).
    pub publishes: Publishes,
}

/// Column `j` of `columns`, empty when absent.
fn col(columns: &[Vec<Duration>], j: usize) -> &[Duration] {
    columns.get(j).map_or(&[], Vec::as_slice)
}

impl ConfigResult {
    pub fn park_latency(&self) -> &[Duration] {
        col(&self.park, 0)
    }
    pub fn resumed(&self) -> &[Duration] {
        col(&self.resume, 0)
    }
    pub fn completed(&self) -> &[Duration] {
        col(&self.resume, 1)
    }
    pub fn parks_per_s(&self) -> f64 {
        self.n as f64 / self.wall_park.as_secs_f64()
    }
    pub fn resumes_per_s(&self) -> f64 {
        self.n as f64 / self.wall_resume.as_secs_f64()
    }
    pub fn cycles_per_s(&self) -> f64 {
        self.n as f64 / (self.wall_park + self.wall_resume).as_secs_f64()
    }
    pub fn commits_per_s(&self) -> f64 {
        self.cycle_delta.commits * self.cycles_per_s()
    }
    /// The machine's CPU per cycle, every process's (ms).
    pub fn machine_cpu_ms_per_cycle(&self) -> f64 {
        self.cpu_by_group.values().sum::<f64>() / self.n.max(1) as f64
    }
}

/// The round-trip pass: the same cycle through a counting proxy.
pub struct RoundTrips {
    pub n: usize,
    pub park: crate::wire::WirePer,
    pub resume: crate::wire::WirePer,
}

/// The passes after the measured configurations; each may be skipped.
#[derive(Default)]
pub struct Passes {
    pub round_trips: Option<RoundTrips>,
    pub scaling: Option<crate::fleet::Scaling>,
    pub park_many: Option<crate::fleet::ParkMany>,
    pub fair_shares: Option<crate::shares::FairShares>,
}

impl RoundTrips {
    pub fn cycle(&self) -> f64 {
        self.park.round_trips + self.resume.round_trips
    }
}

pub struct Params {
    pub n: usize,
    pub warmup: usize,
    /// Tables analyzed after the warm-up (`--analyze-after-warmup`).
    pub analyzed: bool,
    pub queue: String,
    pub postgres: String,
    pub pool_size: usize,
    pub prefetch: u16,
    pub baseline_secs: f64,
    pub stats_flush_secs: f64,
    /// `--notify`: where each cycle's events were sent.
    pub notifications: Option<String>,
}

fn p50_99(d: &[Duration]) -> String {
    format!(
        "{:.2} / {:.2}",
        percentile_ms(d, 50.0),
        percentile_ms(d, 99.0)
    )
}

/// `1234.5` -> "1,234.5" (`decimals` digits).
pub fn fmt(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    let text = format!("{:.*}", decimals, v.abs());
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let mut out = String::new();
    for (i, ch) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    let sign = if v < 0.0 { "-" } else { "" };
    if frac.is_empty() {
        format!("{sign}{out}")
    } else {
        format!("{sign}{out}.{frac}")
    }
}

pub(crate) fn baseline_at(baselines: &[Baseline], c: usize) -> Option<&Baseline> {
    baselines.iter().find(|b| b.clients == c)
}

/// The report's own tables; the comparison with the peers follows it
/// (`against_peers::print`).
pub fn print_markdown(
    params: &Params,
    results: &[ConfigResult],
    baselines: &[Baseline],
    passes: &Passes,
    total: Duration,
) {
    print_parameters(params, results, total);
    print_figures(results, baselines);
    print_latency_split(results);
    print_cycle_costs(results);
    print_bytes_by_table(results);
    print_row_writes(results);
    print_cpu_by_group(results);
    print_passes(passes);
    print_handbacks(results);
    let by_statement: Vec<_> = results
        .iter()
        .map(|r| {
            (
                format!("agentenkit c={}", r.concurrency),
                r.statement_costs.clone(),
            )
        })
        .collect();
    crate::statements::print(&by_statement, 15);
}

fn print_parameters(params: &Params, results: &[ConfigResult], total: Duration) {
    println!("# agentenkit-bench: park → approve → resume → complete\n");
    println!(
        "Parameters: N={} parked runs per configuration (+{} warm-up cycles excluded{}), concurrency {}; \
         one in-process worker (prefetch {}), store pool {} connections; queue: {}; PostgreSQL {}. \
         Baseline: single-row INSERT per transaction from tokio-postgres, {} s per client count. \
         Counters read after {} s idle (stats flush).{} Whole bench: {:.0} s.\n",
        params.n,
        params.warmup,
        if params.analyzed {
            ", then every table analyzed"
        } else {
            ", from freshly truncated and vacuumed tables"
        },
        results.iter().map(|r| r.concurrency.to_string()).collect::<Vec<_>>().join(","),
        params.prefetch,
        params.pool_size,
        params.queue,
        params.postgres,
        params.baseline_secs,
        params.stats_flush_secs,
        params
            .notifications
            .as_ref()
            .map(|n| format!(" Notifications: {n}."))
            .unwrap_or_default(),
        total.as_secs_f64()
    );
}

/// The main table: throughput, latency, CPU, bytes and commits per
/// configuration, beside the same-run INSERT baseline.
fn print_figures(results: &[ConfigResult], baselines: &[Baseline]) {
    println!("| config | parks/s | resumes/s | full cycles/s | park p50 / p99 ms | respond→resumed p50 / p99 ms | respond→completed p50 / p99 ms | process CPU ms/cycle | machine busy % | bytes/parked | bytes/completed | commits/cycle (park+resume) | WAL bytes/cycle | PG commits/s reached | INSERT baseline commits/s (same c) | reached / baseline | RSS bytes/parked |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in results {
        let base = baseline_at(baselines, r.concurrency);
        println!(
            "| agentenkit c={} (N={}) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} ({}+{}) | {} | {} | {} | {} | {} |",
            r.concurrency,
            r.n,
            fmt(r.parks_per_s(), 1),
            fmt(r.resumes_per_s(), 1),
            fmt(r.cycles_per_s(), 1),
            p50_99(r.park_latency()),
            p50_99(r.resumed()),
            p50_99(r.completed()),
            fmt(r.cpu_ms / r.n as f64, 2),
            fmt(r.busy_pct, 0),
            fmt(r.park_delta.bytes, 0),
            fmt(r.cycle_delta.bytes, 0),
            fmt(r.cycle_delta.commits, 2),
            fmt(r.park_delta.commits, 2),
            fmt(r.resume_delta.commits, 2),
            fmt(r.cycle_delta.wal_bytes, 0),
            fmt(r.commits_per_s(), 0),
            base.map_or("n/a".into(), |b| fmt(b.commits_per_s, 1)),
            base.map_or("n/a".into(), |b| format!("{:.2}", r.commits_per_s() / b.commits_per_s)),
            fmt(r.rss_per_parked, 0),
        );
    }
    println!("\nNotes: commits = pg_stat_database.xact_commit delta / N (read-only transactions count too), minus the meter's own and one start-up commit per new session; \
              process CPU is the bench process, which holds the clients *and* the worker; latencies are nearest-rank over N; \
              'resumed' = the approved tool ran, 'completed' = the worker acked the run's last segment (the peers' resume latency ends at completion).");
}

fn print_latency_split(results: &[ConfigResult]) {
    println!("\nWhere the latency goes, p50 / p99 ms. 'store' = the bench's own store calls, each with the publish of what it wrote to the outbox, confirmed by the broker; \
              'delivered' = the call that wrote the segment → the worker got it (often before the confirm); 'worker' = got it → acked (lease, replay, model/tool steps, commits, outbox publishes):\n");
    println!("| config | park: store (create_thread + start_run) | park: delivered | park: worker | resume: store (answer) | resume: delivered | resume: worker → tool ran | resume: tool ran → acked |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in results {
        let cells: Vec<String> = (1..4)
            .map(|j| p50_99(col(&r.park, j)))
            .chain((2..6).map(|j| p50_99(col(&r.resume, j))))
            .collect();
        println!("| agentenkit c={} | {} |", r.concurrency, cells.join(" | "));
    }
}

fn print_cycle_costs(results: &[ConfigResult]) {
    println!("\nWhat a cycle costs (per cycle, park + resume). Statements are pg_stat_statements calls in the database (BEGIN/COMMIT included; n/a when the extension is not loaded); \
              WAL flushes are pg_stat_wal.wal_sync (cluster-wide, after group commit); publishes are broker publishes through the adapter, delay hops the delay queues those pass through; \
              seq scans are pg_stat_user_tables.seq_scan of the schema's tables and the rows they read (a prepared statement planned while its table was \
              nearly empty, as after the truncate every configuration starts from, keeps a sequential-scan plan until ANALYZE re-plans it, so the rows read grow with N):\n");
    println!("| config | transactions | statements | WAL flushes | broker publishes (delayed) | delay hops | seq scans (rows they read) |");
    println!("|---|---|---|---|---|---|---|");
    for r in results {
        let n = r.n.max(1) as f64;
        println!(
            "| agentenkit c={} | {} ({}+{}) | {} | {} | {} ({}) | {} | {} ({}) |",
            r.concurrency,
            fmt(r.cycle_delta.commits, 2),
            fmt(r.park_delta.commits, 2),
            fmt(r.resume_delta.commits, 2),
            r.cycle_delta.statements.map_or("n/a".into(), |s| fmt(s, 2)),
            fmt(r.cycle_delta.wal_syncs, 2),
            fmt(r.publishes.publishes as f64 / n, 2),
            fmt(r.publishes.delayed as f64 / n, 2),
            fmt(r.publishes.delay_hops as f64 / n, 2),
            fmt(r.cycle_delta.seq_scans, 2),
            fmt(r.cycle_delta.seq_rows_read, 0),
        );
    }
}

/// The separate passes, each when it ran.
fn print_passes(passes: &Passes) {
    if let Some(t) = &passes.round_trips {
        println!(
            "\nSQL round trips per cycle: {} ({} park + {} resume), {} bytes sent and {} received per cycle \
             (a separate pass of N={} cycles at c=1 through a counting TCP proxy in front of Postgres: \
             a round trip is a burst of client bytes after an answer, so pipelined statements count once; \
             the clients' store calls and the worker's together).",
            fmt(t.cycle(), 2),
            fmt(t.park.round_trips, 2),
            fmt(t.resume.round_trips, 2),
            fmt(t.park.bytes_sent + t.resume.bytes_sent, 0),
            fmt(t.park.bytes_received + t.resume.bytes_received, 0),
            t.n
        );
    }
    if let Some(s) = &passes.scaling {
        let figures: Vec<String> = s
            .cycles_per_s
            .iter()
            .map(|(w, v)| format!("{w} process(es) {} cycles/s", fmt(*v, 1)))
            .collect();
        println!(
            "\nWorker processes (agentenkit-worker, each its own pool and broker connection; the bench's \
             clients at c={}, N={} cycles, completion read from the runs table): {}; ratio {}.",
            s.c,
            s.n,
            figures.join(", "),
            s.ratio().map_or("n/a".into(), |r| format!("{r:.2}×")),
        );
    }
    if let Some(f) = &passes.fair_shares {
        f.print();
    }
    if let Some(m) = &passes.park_many {
        let figures: Vec<String> = m
            .samples
            .iter()
            .map(|(n, rss)| format!("{n}: {}", fmt(*rss as f64 / 1_048_576.0, 1)))
            .collect();
        println!(
            "\nPark-many (one worker process, {} threads parked at c={} in {:.0} s): worker RSS MiB at parked = {}; \
             largest drift from the first parked sample {}.",
            m.total,
            m.c,
            m.wall.as_secs_f64(),
            figures.join(", "),
            m.drift().map_or("n/a".into(), |d| format!("{:.1} %", d * 100.0)),
        );
    }
}

fn print_handbacks(results: &[ConfigResult]) {
    for r in results {
        if r.nacks > 0 || r.cycle_delta.sessions > 2 {
            println!(
                "c={}: {} segments handed back (nack), {} new Postgres sessions during the measured phases (their statement prepares count as commits).",
                r.concurrency, r.nacks, r.cycle_delta.sessions
            );
        }
    }
}

fn delta_json(d: &Delta) -> Value {
    json!({
        "commits": d.commits, "raw_commits": d.raw_commits, "new_sessions": d.sessions,
        "wal_bytes": d.wal_bytes, "wal_fsyncs": d.wal_syncs, "bytes": d.bytes,
        "statements": d.statements, "seq_scans": d.seq_scans, "seq_rows_read": d.seq_rows_read,
        "row_writes": d.row_writes.iter().map(|(table, w)| (table.clone(), json!({
            "inserted": w.inserted, "updated": w.updated, "hot_updated": w.hot_updated, "deleted": w.deleted,
        }))).collect::<serde_json::Map<_, _>>(),
    })
}

fn lat_json(d: &[Duration]) -> Value {
    let mean = d.iter().map(Duration::as_secs_f64).sum::<f64>() * 1000.0 / d.len().max(1) as f64;
    json!({
        "p50_ms": percentile_ms(d, 50.0), "p99_ms": percentile_ms(d, 99.0),
        "mean_ms": mean, "max_ms": percentile_ms(d, 100.0),
    })
}

pub fn to_json(
    params: &Params,
    results: &[ConfigResult],
    baselines: &[Baseline],
    peers: Option<&Peers>,
    passes: &Passes,
) -> Value {
    json!({
        "worker_processes": passes.scaling.as_ref().map(|s| json!({
            "n": s.n, "concurrency": s.c,
            "cycles_per_s": s.cycles_per_s.iter().map(|(w, v)| json!({ "processes": w, "cycles_per_s": v })).collect::<Vec<_>>(),
            "ratio": s.ratio(),
        })),
        "fair_shares": passes.fair_shares.as_ref().map(crate::shares::FairShares::json),
        "park_many": passes.park_many.as_ref().map(|m| json!({
            "total": m.total, "concurrency": m.c, "wall_s": m.wall.as_secs_f64(),
            "rss_bytes": m.samples.iter().map(|(n, rss)| json!({ "parked": n, "rss": rss })).collect::<Vec<_>>(),
            "drift": m.drift(),
        })),
        "round_trips": passes.round_trips.as_ref().map(|t| json!({
            "n": t.n, "concurrency": 1,
            "per_cycle": t.cycle(), "per_park": t.park.round_trips, "per_resume": t.resume.round_trips,
            "bytes_sent_per_cycle": t.park.bytes_sent + t.resume.bytes_sent,
            "bytes_received_per_cycle": t.park.bytes_received + t.resume.bytes_received,
        })),
        "system": "agentenkit",
        "params": {
            "n": params.n, "warmup": params.warmup, "analyzed_after_warmup": params.analyzed, "queue": params.queue,
            "postgres": params.postgres, "pool_size": params.pool_size, "prefetch": params.prefetch,
            "baseline_secs": params.baseline_secs, "stats_flush_secs": params.stats_flush_secs,
            "notifications": params.notifications,
        },
        "baselines": baselines.iter().map(|b| json!({
            "clients": b.clients, "commits_per_s": b.commits_per_s,
            "latency_avg_ms": b.latency_ms, "transactions": b.transactions,
        })).collect::<Vec<_>>(),
        "results": results.iter().map(|r| json!({
            "concurrency": r.concurrency, "n": r.n,
            "wall_s": {"park": r.wall_park.as_secs_f64(), "resume": r.wall_resume.as_secs_f64()},
            "park_per_s": r.parks_per_s(), "resume_per_s": r.resumes_per_s(), "cycle_per_s": r.cycles_per_s(),
            "park_latency": lat_json(r.park_latency()),
            "respond_to_resumed_latency": lat_json(r.resumed()),
            "respond_to_completed_latency": lat_json(r.completed()),
            "park_stages": {"store": lat_json(col(&r.park, 1)),
                            "delivered": lat_json(col(&r.park, 2)), "worker": lat_json(col(&r.park, 3))},
            "resume_stages": {"store": lat_json(col(&r.resume, 2)),
                              "delivered": lat_json(col(&r.resume, 3)),
                              "worker_to_tool": lat_json(col(&r.resume, 4)),
                              "tool_to_ack": lat_json(col(&r.resume, 5))},
            "process_cpu_ms_per_cycle": r.cpu_ms / r.n as f64, "machine_busy_pct": r.busy_pct,
            "cpu_ms_per_cycle_by_process": r.cpu_by_group.iter()
                .map(|(g, ms)| (g.key().to_owned(), json!(ms / r.n as f64)))
                .collect::<serde_json::Map<_, _>>(),
            "park": delta_json(&r.park_delta), "resume": delta_json(&r.resume_delta),
            "cycle": delta_json(&r.cycle_delta),
            "bytes_per_parked_by_table": r.bytes_per_table_parked,
            "bytes_per_parked_by_relation": r.bytes_per_relation_parked,
            "pg_commits_per_s_reached": r.commits_per_s(),
            "rss_bytes_per_parked": r.rss_per_parked, "nacks": r.nacks,
            "broker_publishes_per_cycle": r.publishes.publishes as f64 / r.n.max(1) as f64,
            "broker_delayed_publishes_per_cycle": r.publishes.delayed as f64 / r.n.max(1) as f64,
            "delay_hops_per_cycle": r.publishes.delay_hops as f64 / r.n.max(1) as f64,
        })).collect::<Vec<_>>(),
        "peers_file": peers.map(|p| p.path.display().to_string()),
    })
}

/// Where a parked thread's bytes are: the table that grows most is where
/// narrowing what a park stores pays.
fn print_bytes_by_table(results: &[ConfigResult]) {
    let mut tables: Vec<&str> = results
        .iter()
        .flat_map(|r| {
            r.bytes_per_table_parked
                .iter()
                .filter(|(_, bytes)| **bytes > 0.0)
                .map(|(table, _)| table.as_str())
        })
        .collect();
    tables.sort_unstable();
    tables.dedup();
    if tables.is_empty() {
        return;
    }
    println!(
        "\nBytes per parked thread by table (growth of pg_total_relation_size: heap, indexes and TOAST):\n"
    );
    println!("| config | {} |", tables.join(" | "));
    println!("|---|{}", "---|".repeat(tables.len()));
    for r in results {
        let cells: Vec<String> = tables
            .iter()
            .map(|t| fmt(r.bytes_per_table_parked.get(*t).copied().unwrap_or(0.0), 0))
            .collect();
        println!("| agentenkit c={} | {} |", r.concurrency, cells.join(" | "));
    }
    print_bytes_by_relation(results);
}

/// Row versions per cycle by table: a version an update leaves behind is
/// dead space until pruned or vacuumed, and a non-HOT one adds an entry to
/// every index of its table, which is where a parked thread's bytes beyond
/// its live rows come from.
fn print_row_writes(results: &[ConfigResult]) {
    let mut tables: Vec<&str> = results
        .iter()
        .flat_map(|r| r.cycle_delta.row_writes.keys().map(String::as_str))
        .filter(|t| *t != "schema_migrations")
        .collect();
    tables.sort_unstable();
    tables.dedup();
    if tables.is_empty() {
        return;
    }
    println!("\nRow versions written per cycle by table (pg_stat_user_tables: inserted / updated, of them HOT / deleted; park + resume):\n");
    println!("| config | {} |", tables.join(" | "));
    println!("|---|{}", "---|".repeat(tables.len()));
    for r in results {
        let cells: Vec<String> = tables
            .iter()
            .map(|t| {
                let w = r
                    .cycle_delta
                    .row_writes
                    .get(*t)
                    .copied()
                    .unwrap_or_default();
                format!(
                    "{} / {} ({} HOT) / {}",
                    fmt(w.inserted, 2),
                    fmt(w.updated, 2),
                    fmt(w.hot_updated, 2),
                    fmt(w.deleted, 2)
                )
            })
            .collect();
        println!("| agentenkit c={} | {} |", r.concurrency, cells.join(" | "));
    }
}

/// The same growth for each table (heap, TOAST and maps) and each index
/// apart, largest first: an index can cost more than the rows it points at.
fn print_bytes_by_relation(results: &[ConfigResult]) {
    let Some(first) = results.first() else {
        return;
    };
    let mut relations: Vec<(&str, f64)> = first
        .bytes_per_relation_parked
        .iter()
        .filter(|(_, bytes)| **bytes > 0.0)
        .map(|(name, bytes)| (name.as_str(), *bytes))
        .collect();
    relations.sort_by(|a, b| b.1.total_cmp(&a.1));
    if relations.is_empty() {
        return;
    }
    let configs: Vec<String> = results
        .iter()
        .map(|r| format!("c={}", r.concurrency))
        .collect();
    println!("\nBytes per parked thread by relation (tables: pg_table_size; indexes: pg_relation_size):\n");
    println!("| relation | {} |", configs.join(" | "));
    println!("|---|{}", "---|".repeat(configs.len()));
    for (name, _) in relations {
        let cells: Vec<String> = results
            .iter()
            .map(|r| {
                fmt(
                    r.bytes_per_relation_parked
                        .get(name)
                        .copied()
                        .unwrap_or(0.0),
                    0,
                )
            })
            .collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
}

/// Where the machine's CPU went, per cycle: on a machine whose cores all
/// of them share, the total bounds cycles/s.
fn print_cpu_by_group(results: &[ConfigResult]) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "\nWhere the machine's CPU goes, ms per cycle (utime + stime from /proc over both phases; 'other' = the machine's busy time beyond these). \
         Ceiling = {cores} cores x 1000 / total: the cycles/s this machine could reach were every core busy with the same work:\n"
    );
    let names: Vec<&str> = Group::ALL.iter().map(|g| g.label()).collect();
    println!(
        "| config | {} | total | ceiling cycles/s | reached cycles/s |",
        names.join(" | ")
    );
    println!("|---|{}---|---|---|", "---|".repeat(names.len()));
    for r in results {
        let n = r.n.max(1) as f64;
        let per: Vec<f64> = Group::ALL
            .iter()
            .map(|g| r.cpu_by_group.get(g).copied().unwrap_or(0.0) / n)
            .collect();
        let total: f64 = per.iter().sum();
        let cells: Vec<String> = per.iter().map(|ms| fmt(*ms, 2)).collect();
        println!(
            "| agentenkit c={} | {} | {} | {} | {} |",
            r.concurrency,
            cells.join(" | "),
            fmt(total, 2),
            fmt(cores as f64 * 1000.0 / total, 0),
            fmt(r.cycles_per_s(), 1),
        );
    }
}
