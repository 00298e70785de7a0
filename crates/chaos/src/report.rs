//! The chaos run's figures, printed for people and written as JSON.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{json, Value};

use super::check::Findings;
use super::client::ClientStats;
use super::faults::{FaultKind, FaultLog};
use super::load::Scenario;
use super::{ChaosConfig, Leftovers};

/// Read every second while the load ran.
#[derive(Debug, Default, Clone)]
pub struct Sampled {
    pub most_without_timer: u64,
    pub oldest_past_due: Duration,
}

#[derive(Debug)]
pub struct Report {
    pub seed: u64,
    pub config: ChaosConfig,
    pub findings: Findings,
    pub faults: FaultLog,
    pub requests: u64,
    pub retries: u64,
    pub connection_errors: u64,
    pub server_errors: BTreeMap<u16, u64>,
    pub gave_up: u64,
    pub slow_requests: u64,
    pub sampled: Sampled,
    pub left: Leftovers,
    pub load_time: Duration,
    pub tool_hits: usize,
    pub mix: BTreeMap<Scenario, usize>,
    /// Processes that exited without being killed (then restarted).
    pub own_exits: Vec<(String, u64)>,
    pub dead_letters: Option<u32>,
    /// What was kept for inspection.
    pub kept: Option<String>,
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: &ChaosConfig,
        findings: Findings,
        faults: FaultLog,
        stats: &ClientStats,
        sampled: Sampled,
        left: Leftovers,
        load_time: Duration,
        tool_hits: usize,
    ) -> Report {
        let mut mix = BTreeMap::new();
        for index in 0..config.runs {
            *mix.entry(Scenario::of_run(index)).or_default() += 1;
        }
        Report {
            seed: config.seed,
            config: config.clone(),
            findings,
            faults,
            requests: stats.requests.load(Ordering::Relaxed),
            retries: stats.retries.load(Ordering::Relaxed),
            connection_errors: stats.connection_errors.load(Ordering::Relaxed),
            server_errors: stats.server_errors.lock().expect("not poisoned").clone(),
            gave_up: stats.gave_up.load(Ordering::Relaxed),
            slow_requests: stats.slow.load(Ordering::Relaxed),
            sampled,
            left,
            load_time,
            tool_hits,
            mix,
            own_exits: Vec::new(),
            dead_letters: None,
            kept: None,
        }
    }

    /// Problems beyond the checker's: requests open or runs unfinished at
    /// the end, an open request without a timer, a dead-lettered message,
    /// a fault kind that was asked for and never happened.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.left.open_requests > 0 {
            problems.push(format!(
                "{} requests still open at the end",
                self.left.open_requests
            ));
        }
        if self.left.unfinished_runs > 0 {
            problems.push(format!(
                "{} runs unfinished at the end",
                self.left.unfinished_runs
            ));
        }
        let without_timer = self.left.open_without_timer as u64 + self.sampled.most_without_timer;
        if without_timer > 0 {
            problems.push(format!("{without_timer} requests open without a timer"));
        }
        if let Some(n) = self.dead_letters.filter(|n| *n > 0) {
            problems.push(format!("{n} messages dead-lettered"));
        }
        let mut wanted: Vec<FaultKind> = self.config.outages.clone();
        if self.config.kill_workers {
            wanted.push(FaultKind::WorkerKill);
        }
        for kind in wanted {
            if !self.faults.counts.contains_key(&kind) {
                problems.push(format!("no {} happened", kind.label()));
            }
        }
        problems
    }

    pub fn passed(&self) -> bool {
        self.findings.violations() == 0 && self.problems().is_empty()
    }

    fn slowest_takeover(&self, clean_only: bool) -> Option<Option<Duration>> {
        self.faults
            .takeovers
            .iter()
            .filter(|(_, clean)| *clean || !clean_only)
            .map(|(waited, _)| *waited)
            // `None` (never) is the slowest of all.
            .max_by_key(|w| w.map_or(u128::MAX, |d| d.as_millis()))
    }

    fn slowest_broker_return(&self) -> Option<Option<Duration>> {
        self.faults
            .broker_returns
            .iter()
            .map(|(_, waited)| *waited)
            .max_by_key(|w| w.map_or(u128::MAX, |d| d.as_millis()))
    }

    pub fn to_json(&self) -> Value {
        let f = &self.findings;
        let ms = |d: Option<Option<Duration>>| match d {
            None => Value::Null,
            Some(None) => json!("never"),
            Some(Some(d)) => json!(d.as_millis() as u64),
        };
        json!({
            "passed": self.passed(),
            "params": {
                "runs": self.config.runs,
                "concurrency": self.config.concurrency,
                "workers": self.config.workers,
                "seed": self.seed,
                "queueType": self.config.queue_type.to_string(),
                "expiryTtlMs": self.config.expiry_ttl.as_millis() as u64,
                "toolLatencyMs": self.config.tool_latency.as_millis() as u64,
                "outageEveryMs": self.config.outage_every.as_millis() as u64,
            },
            "mix": self.mix.iter().map(|(s, n)| (format!("{s:?}"), json!(n))).collect::<serde_json::Map<_, _>>(),
            "faults": self.faults.counts.iter().map(|(k, n)| (format!("{k:?}"), json!(n))).collect::<serde_json::Map<_, _>>(),
            "client": {
                "requests": self.requests, "retries": self.retries,
                "connectionErrors": self.connection_errors,
                "serverErrors": self.server_errors.iter().map(|(s, n)| (s.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
                "gaveUp": self.gave_up,
                "slowOver2s": self.slow_requests,
            },
            "runs": { "total": f.runs, "completed": f.completed, "failed": f.failed.len(), "stuck": f.stuck.len() },
            "requests": f.requests,
            "answers": { "sent": f.answers_sent, "delivered": f.delivered, "tooLate": f.too_late },
            "effects": {
                "approvedSends": f.approved_sends, "sendKeys": f.send_keys, "sendCalls": f.send_calls,
                "approvedJobs": f.approved_jobs, "jobKeys": f.job_keys, "jobCalls": f.job_calls,
                "repeatsWithSameKey": f.repeats.len(),
            },
            "expiries": f.expiries,
            "lost": f.lost.len(), "doubled": f.doubled.len(), "early": f.early.len(),
            "unresolved": f.unresolved.len(), "unexpected": f.unexpected.len(),
            "problems": self.problems(),
            "slowestMs": {
                "settle": f.slowest_settle.as_ref().map(|(d, _)| d.as_millis() as u64),
                "expiryAfterDue": f.slowest_expiry.map(|d| d.as_millis() as u64),
                "takeoverAfterKill": ms(self.slowest_takeover(true)),
                "takeoverAfterKillAnyOverlap": ms(self.slowest_takeover(false)),
                "handledAfterBrokerReturn": ms(self.slowest_broker_return()),
            },
            "takeoverKills": self.faults.takeovers.len(),
            "takeoverRuns": self.faults.runs_caught,
            "dueDuringBrokerOutages": self.faults.broker_returns.iter().map(|(n, _)| n).sum::<usize>(),
            "loadSeconds": self.load_time.as_secs_f64(),
        })
    }
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn slowest(d: Option<Option<Duration>>) -> String {
    match d {
        None => "-".into(),
        Some(None) => "never (over 120 s)".into(),
        Some(Some(d)) => secs(d),
    }
}

impl fmt::Display for Report {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let f = &self.findings;
        let c = &self.config;
        writeln!(
            out,
            "agentenkit chaos: {} runs, {} at once, {} workers, queue type {}, seed {}, expiry TTL {} ms, tool latency {} ms, load {}",
            c.runs,
            c.concurrency,
            c.workers,
            c.queue_type,
            self.seed,
            c.expiry_ttl.as_millis(),
            c.tool_latency.as_millis(),
            secs(self.load_time)
        )?;
        let mix: Vec<String> = self.mix.iter().map(|(s, n)| format!("{s:?} {n}")).collect();
        writeln!(out, "  mix:      {}", mix.join(", "))?;
        let faults: Vec<String> = self
            .faults
            .counts
            .iter()
            .map(|(k, n)| format!("{} ×{n}", k.label()))
            .collect();
        writeln!(out, "  faults:   {}", faults.join(", "))?;
        for (kind, took) in &self.faults.outages {
            writeln!(out, "            {} took {}", kind.label(), secs(*took))?;
        }
        if !self.own_exits.is_empty() {
            let exits: Vec<String> = self
                .own_exits
                .iter()
                .map(|(p, n)| format!("{p} ×{n}"))
                .collect();
            writeln!(
                out,
                "            exited by themselves (restarted): {}",
                exits.join(", ")
            )?;
        }
        let server: Vec<String> = self
            .server_errors
            .iter()
            .map(|(s, n)| format!("{s} ×{n}"))
            .collect();
        writeln!(
            out,
            "  clients:  {} requests, {} retried (connection errors {}, 5xx: {}), {} given up, {} slower than 2 s",
            self.requests,
            self.retries,
            self.connection_errors,
            if server.is_empty() { "none".into() } else { server.join(", ") },
            self.gave_up,
            self.slow_requests
        )?;
        writeln!(
            out,
            "  runs:     {} completed, {} failed, {} stuck; {} requests, {} expired",
            f.completed,
            f.failed.len(),
            f.stuck.len(),
            f.requests,
            f.expiries
        )?;
        writeln!(
            out,
            "  answers:  {} sent, {} delivered, {} too late (delivered: false)",
            f.answers_sent, f.delivered, f.too_late
        )?;
        writeln!(
            out,
            "  effects:  send: {} approved calls, {} distinct keys, {} calls; job: {} approved, {} keys, {} calls; {} repeated with the same key",
            f.approved_sends, f.send_keys, f.send_calls, f.approved_jobs, f.job_keys, f.job_calls, f.repeats.len()
        )?;
        writeln!(
            out,
            "  verdicts: lost {}, doubled {}, early {}, stuck {}, unresolved {}, unexpected answers {}",
            f.lost.len(),
            f.doubled.len(),
            f.early.len(),
            f.stuck.len(),
            f.unresolved.len(),
            f.unexpected.len()
        )?;
        writeln!(
            out,
            "  slowest:  settle {}{}; expiry after its expiresAt {}\n            takeover after a kill {} ({} with an outage overlapping; {} runs caught running by {} kills)\n            handled after the broker returned {} ({} messages fell due while it was stopped)",
            f.slowest_settle.as_ref().map_or("-".into(), |(d, _)| secs(*d)),
            f.slowest_settle.as_ref().map_or(String::new(), |(_, run)| format!(" ({run})")),
            f.slowest_expiry.map_or("-".into(), secs),
            slowest(self.slowest_takeover(true)),
            slowest(self.slowest_takeover(false)),
            self.faults.runs_caught,
            self.faults.takeovers.len(),
            slowest(self.slowest_broker_return()),
            self.faults.broker_returns.iter().map(|(n, _)| n).sum::<usize>(),
        )?;
        writeln!(
            out,
            "  sampled:  most open without a timer {}, oldest open past its expiresAt {}",
            self.sampled.most_without_timer,
            secs(self.sampled.oldest_past_due)
        )?;
        for line in f.repeats.iter().take(5) {
            writeln!(out, "  repeat:   {line}")?;
        }
        let broken = f
            .failed
            .iter()
            .chain(&f.stuck)
            .chain(&f.unresolved)
            .chain(&f.doubled)
            .chain(&f.lost)
            .chain(&f.early)
            .chain(&f.unexpected)
            .take(30);
        for line in broken {
            writeln!(out, "  BROKEN:   {line}")?;
        }
        for problem in self.problems() {
            writeln!(out, "  BROKEN:   {problem}")?;
        }
        if let Some(kept) = &self.kept {
            writeln!(out, "  kept:     {kept}")?;
        }
        write!(
            out,
            "  verdict:  {}",
            if self.passed() { "PASS" } else { "FAIL" }
        )
    }
}
