//! Where the machine's CPU goes during a phase: this process (clients and
//! worker), Postgres (every `postgres` process: backends, WAL writer,
//! checkpointer), RabbitMQ (its Erlang VM and helpers) and everything else.
//! On a machine where all of them share the cores, the sum per cycle is the
//! ceiling: cycles/s can not pass cores × 1000 / (total CPU ms per cycle).

use std::collections::BTreeMap;

/// utime + stime of every process, by pid, with what it is.
pub struct CpuSample {
    ticks: BTreeMap<u32, (Group, i64)>,
    machine_busy_ticks: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    Agentenkit,
    Postgres,
    Rabbitmq,
    Other,
}

impl Group {
    pub const ALL: [Group; 4] = [
        Group::Agentenkit,
        Group::Postgres,
        Group::Rabbitmq,
        Group::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Group::Agentenkit => "agentenkit (bench: clients + worker)",
            Group::Postgres => "postgres",
            Group::Rabbitmq => "rabbitmq",
            Group::Other => "other",
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Group::Agentenkit => "agentenkit",
            Group::Postgres => "postgres",
            Group::Rabbitmq => "rabbitmq",
            Group::Other => "other",
        }
    }

    fn of(pid: u32, own: u32, comm: &str) -> Group {
        if pid == own || comm.starts_with("agentenkit") {
            Group::Agentenkit
        } else if comm == "postgres" {
            Group::Postgres
        } else if matches!(
            comm,
            "beam.smp" | "erl_child_setup" | "inet_gethost" | "epmd"
        ) {
            Group::Rabbitmq
        } else {
            Group::Other
        }
    }
}

/// USER_HZ: /proc reports CPU time in hundredths of a second.
const MS_PER_TICK: f64 = 10.0;

impl CpuSample {
    pub fn now() -> CpuSample {
        let own = std::process::id();
        let mut ticks = BTreeMap::new();
        if let Ok(entries) = std::fs::read_dir("/proc") {
            for entry in entries.flatten() {
                let Some(pid) = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| n.parse::<u32>().ok())
                else {
                    continue;
                };
                let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                    continue;
                };
                if let Some((comm, cpu)) = parse_stat(&stat) {
                    ticks.insert(pid, (Group::of(pid, own, comm), cpu));
                }
            }
        }
        CpuSample {
            ticks,
            machine_busy_ticks: machine_busy_ticks(),
        }
    }

    /// CPU ms of each group from `self` to `later`. A process started in
    /// between counts whole; one that ended in between is lost (the bench
    /// keeps its connections, so Postgres backends live through a phase).
    /// `Other` is what the machine was busy with beyond the three, so the
    /// groups add up to the machine's busy time.
    pub fn ms_by_group(&self, later: &CpuSample) -> BTreeMap<Group, f64> {
        let mut ms: BTreeMap<Group, f64> = Group::ALL.iter().map(|g| (*g, 0.0)).collect();
        for (pid, (group, cpu)) in &later.ticks {
            let before = match self.ticks.get(pid) {
                Some((_, before)) => *before,
                None => 0,
            };
            if *group != Group::Other {
                *ms.entry(*group).or_default() += (cpu - before).max(0) as f64 * MS_PER_TICK;
            }
        }
        let busy = (later.machine_busy_ticks - self.machine_busy_ticks) as f64 * MS_PER_TICK;
        let named: f64 = ms.values().sum();
        ms.insert(Group::Other, (busy - named).max(0.0));
        ms
    }
}

/// `(comm, utime + stime)` of a `/proc/<pid>/stat` line. The command name
/// is in parentheses and may itself hold spaces or parentheses.
pub fn parse_stat(stat: &str) -> Option<(&str, i64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?;
    let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    // After the name: state is field 3 of the line, utime 14, stime 15.
    let utime: i64 = fields.get(11)?.parse().ok()?;
    let stime: i64 = fields.get(12)?.parse().ok()?;
    Some((comm, utime + stime))
}

/// `(total, idle + iowait)` ticks of all cores, from /proc/stat.
pub fn machine_ticks() -> (i64, i64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu: Vec<i64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let idle = cpu.get(3).copied().unwrap_or(0) + cpu.get(4).copied().unwrap_or(0);
    (cpu.iter().sum(), idle)
}

/// Busy time of all cores (total minus idle and iowait), in ticks.
fn machine_busy_ticks() -> i64 {
    let (total, idle) = machine_ticks();
    total - idle
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_name_and_cpu_even_with_spaces_in_the_name() {
        let line = "4242 (postgres: a (b) c) S 1 2 3 4 5 6 7 8 9 10 120 30 0 0 20 0 1 0";
        assert_eq!(parse_stat(line), Some(("postgres: a (b) c", 150)));
        assert_eq!(parse_stat("4242 (x) S 1"), None);
        assert_eq!(Group::of(7, 1, "beam.smp"), Group::Rabbitmq);
        assert_eq!(Group::of(7, 1, "postgres"), Group::Postgres);
        assert_eq!(Group::of(1, 1, "tokio-runtime-w"), Group::Agentenkit);
        assert_eq!(Group::of(7, 1, "agentenkit-work"), Group::Agentenkit);
    }

    #[test]
    fn the_groups_add_up_to_the_machines_busy_time() {
        let before = CpuSample {
            ticks: BTreeMap::from([(1, (Group::Postgres, 10)), (2, (Group::Agentenkit, 5))]),
            machine_busy_ticks: 100,
        };
        let later = CpuSample {
            ticks: BTreeMap::from([
                (1, (Group::Postgres, 30)),
                (2, (Group::Agentenkit, 15)),
                (3, (Group::Rabbitmq, 4)),
            ]),
            machine_busy_ticks: 140,
        };
        let ms = before.ms_by_group(&later);
        assert_eq!(ms[&Group::Postgres], 200.0);
        assert_eq!(ms[&Group::Agentenkit], 100.0);
        assert_eq!(ms[&Group::Rabbitmq], 40.0);
        assert_eq!(ms[&Group::Other], 60.0);
        assert_eq!(ms.values().sum::<f64>(), 400.0);
    }
}
