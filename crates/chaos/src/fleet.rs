//! The processes under test: the API, the workers and the reaper, each the
//! binary beside the chaos binary, restarted whenever it dies — at once
//! when the chaos run killed it, after a pause when it exited by itself (a
//! worker started while the broker is down exits, as under a supervisor).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

/// How long a process that exited by itself waits before it is restarted.
const RESTART_PAUSE: Duration = Duration::from_millis(500);

/// One supervised process slot.
pub struct Supervised {
    pub name: String,
    pid: AtomicU32,
    killed_by_us: AtomicBool,
    pub kills: AtomicU64,
    /// Exits the chaos run did not cause (each followed by a restart).
    pub own_exits: AtomicU64,
}

impl Supervised {
    /// SIGKILLs the process if it runs; the supervisor restarts it.
    pub async fn kill(&self) -> bool {
        let pid = self.pid.load(Ordering::SeqCst);
        if pid == 0 {
            return false;
        }
        self.killed_by_us.store(true, Ordering::SeqCst);
        let killed = tokio::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .stderr(Stdio::null())
            .status()
            .await
            .map(|s| s.success())
            .unwrap_or(false);
        if killed {
            self.kills.fetch_add(1, Ordering::Relaxed);
        }
        killed
    }

    pub fn running(&self) -> bool {
        self.pid.load(Ordering::SeqCst) != 0
    }
}

/// What every process is started with.
#[derive(Clone)]
pub struct Launch {
    pub bin_dir: PathBuf,
    pub log_dir: PathBuf,
    pub env: Vec<(String, String)>,
}

impl Launch {
    /// Starts `binary` with `args` under a supervisor that restarts it until
    /// `stop` is cancelled (then kills it).
    pub fn supervise(
        &self,
        name: &str,
        binary: &str,
        args: &[&str],
        stop: CancellationToken,
    ) -> anyhow::Result<Arc<Supervised>> {
        let path = self.bin_dir.join(binary);
        if !path.exists() {
            anyhow::bail!(
                "no {binary} beside the chaos binary in {} (build it: cargo build --release --bins)",
                self.bin_dir.display()
            );
        }
        let slot = Arc::new(Supervised {
            name: name.to_owned(),
            pid: AtomicU32::new(0),
            killed_by_us: AtomicBool::new(false),
            kills: AtomicU64::new(0),
            own_exits: AtomicU64::new(0),
        });
        let log = self.log_dir.join(format!("{name}.log"));
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let env = self.env.clone();
        let supervised = slot.clone();
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let mut child = match start(&path, &args, &env, &log) {
                    Ok(child) => child,
                    Err(e) => {
                        tracing::error!(process = %supervised.name, error = %e, "could not start");
                        tokio::time::sleep(RESTART_PAUSE).await;
                        continue;
                    }
                };
                supervised
                    .pid
                    .store(child.id().unwrap_or(0), Ordering::SeqCst);
                tokio::select! {
                    _ = child.wait() => {}
                    _ = stop.cancelled() => {
                        let _ = child.kill().await;
                    }
                }
                supervised.pid.store(0, Ordering::SeqCst);
                if !supervised.killed_by_us.swap(false, Ordering::SeqCst) && !stop.is_cancelled() {
                    supervised.own_exits.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(RESTART_PAUSE).await;
                }
            }
        });
        Ok(slot)
    }
}

fn start(
    path: &Path,
    args: &[String],
    env: &[(String, String)],
    log: &Path,
) -> anyhow::Result<tokio::process::Child> {
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let err = out.try_clone()?;
    tokio::process::Command::new(path)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", path.display()))
}

/// The directory of the running binary (where its sibling binaries are).
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    me.parent()
        .map(Path::to_path_buf)
        .context("the chaos binary has no directory")
}
