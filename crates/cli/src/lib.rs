//! What the binaries share: options, wiring of store, queue and registry,
//! and serving the API. The integration tests use the same wiring.

pub mod agents;
pub mod broker;
pub mod chat;
pub mod decide;
pub mod demo;
pub mod http_server;
pub mod keys;
pub mod mcp;
pub mod ops;
pub mod outcome;
pub mod paging;
pub mod shown;
pub mod telemetry;
pub mod upgrade;

pub use http_server::{serve_api, serve_api_with, ServerLimits, API_DRAIN};
/// The allocator every binary of the project installs
/// (`#[global_allocator] static ALLOCATOR: agentenkit::Allocator = agentenkit::Allocator;`):
/// mimalloc. A cycle allocates and frees many small, short-lived values
/// (rows, JSON values, statement parameters); under glibc's malloc a third
/// of the bench process's instructions per cycle were the allocator's.
pub use mimalloc::MiMalloc as Allocator;
pub use telemetry::Telemetry;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentenkit_api::ApiKeys;
use agentenkit_queue::lazy::LazyQueue;
use agentenkit_queue::memory::MemoryQueue;
use agentenkit_queue::rabbit::RabbitQueue;
use agentenkit_queue::{QueueAdapter, Topology};
use agentenkit_runtime::Registry;
use agentenkit_store::{Store, StoreConfig};
use anyhow::Context;
use clap::{Args, ValueEnum};
use tokio_util::sync::CancellationToken;

pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/agentenkit";
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
pub const DEFAULT_CONFIG: &str = "agentenkit.toml";

/// Where the services are.
#[derive(Debug, Clone, Args)]
pub struct Connections {
    /// Postgres connection URL [default: postgres://postgres@127.0.0.1:5432/agentenkit].
    // Neither the value from the environment nor the default is printed by
    // --help: either may hold a password.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = DEFAULT_DATABASE_URL,
        hide_env_values = true,
        hide_default_value = true
    )]
    pub database_url: String,
    /// Postgres schema to work in (default: the server's search_path).
    #[arg(long, env = "AGENTENKIT_SCHEMA")]
    pub schema: Option<String>,
    /// RabbitMQ URL [default: amqp://guest:***@127.0.0.1:5672/%2f].
    #[arg(
        long,
        env = "AMQP_URL",
        default_value = DEFAULT_AMQP_URL,
        hide_env_values = true,
        hide_default_value = true
    )]
    pub amqp_url: String,
    /// A CA certificate (PEM file) trusted for an `amqps://` broker besides
    /// the platform's roots.
    #[arg(long, env = "AGENTENKIT_AMQP_CA_FILE")]
    pub amqp_ca_file: Option<PathBuf>,
    /// `classic`, or `quorum` for a RabbitMQ cluster (replicated queues,
    /// at-least-once dead-lettering through the delay queues).
    #[arg(long, env = "AGENTENKIT_QUEUE_TYPE", default_value = "classic")]
    pub queue_type: agentenkit_queue::QueueType,
    /// Prefix of every queue and exchange name.
    #[arg(long, env = "AGENTENKIT_QUEUE_PREFIX", default_value = "agentenkit")]
    pub queue_prefix: String,
    /// Let RabbitMQ delete the queues after this long unused, for throwaway
    /// environments (tests, previews); unset in production. Longer than
    /// any delay in use: a delay queue has no consumer.
    #[arg(long, env = "AGENTENKIT_QUEUE_EXPIRES", value_parser = parse_duration)]
    pub queue_expires: Option<Duration>,
    /// `rabbitmq` for a fleet; `memory` runs everything in one process.
    #[arg(long, env = "AGENTENKIT_QUEUE", value_enum, default_value_t = QueueKind::Rabbitmq)]
    pub queue: QueueKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QueueKind {
    Rabbitmq,
    Memory,
}

/// The agent file.
#[derive(Debug, Clone, Args)]
pub struct AgentConfig {
    /// The agent file (TOML).
    #[arg(long = "config", env = "AGENTENKIT_CONFIG", default_value = DEFAULT_CONFIG)]
    pub path: PathBuf,
}

impl AgentConfig {
    /// The agent file, with the tools of the MCP servers its agents name
    /// listed (an agent whose server cannot be listed is delayed, logged).
    pub async fn load(&self) -> anyhow::Result<Arc<Registry>> {
        let registry = Registry::load(&self.path, Vec::new()).await?;
        for (agent, why) in registry.delayed_agents() {
            tracing::warn!(agent = %agent, "not served by this process: {why}");
        }
        Ok(Arc::new(registry))
    }

    /// The agent file, for a process that sends notifications: every
    /// target's signing secret must be in the environment (a worker that
    /// could not sign would only fail its deliveries).
    pub async fn load_for_sending(&self) -> anyhow::Result<Arc<Registry>> {
        let registry = self.load().await?;
        let unusable = registry.notifications().unusable_secrets();
        if !unusable.is_empty() {
            anyhow::bail!(
                "{}: notification secrets not set in the environment, or too short to sign: {}",
                self.path.display(),
                unusable.join("; ")
            );
        }
        Ok(registry)
    }
}

impl Connections {
    pub fn store(&self) -> anyhow::Result<Store> {
        let mut config = StoreConfig::new(&self.database_url);
        config.schema = self.schema.clone();
        Ok(Store::connect(&config)?)
    }

    /// The broker; `delay_lanes` are the delays this process publishes
    /// often (its agents' TTLs), each given a one-hop delay queue.
    pub async fn queue(&self, delay_lanes: &[u64]) -> anyhow::Result<Arc<dyn QueueAdapter>> {
        Ok(match self.queue {
            QueueKind::Memory => Arc::new(MemoryQueue::new()),
            QueueKind::Rabbitmq => {
                let topology = Topology {
                    prefix: self.queue_prefix.clone(),
                    queue_expires: self.queue_expires,
                    delay_lanes: delay_lanes.to_vec(),
                    queue_type: self.queue_type,
                };
                let ca_pem = match &self.amqp_ca_file {
                    Some(path) => Some(std::fs::read_to_string(path).with_context(|| {
                        format!("reading the broker's CA certificate {}", path.display())
                    })?),
                    None => None,
                };
                Arc::new(
                    RabbitQueue::connect_with_ca(&self.amqp_url, topology, ca_pem)
                        .await
                        .with_context(|| {
                            format!("connecting to RabbitMQ at {}", redact(&self.amqp_url))
                        })?,
                )
            }
        })
    }
}

impl Connections {
    /// The broker, waiting for it: a long-running process (worker, API,
    /// reaper loop) started while RabbitMQ is unreachable (a connection
    /// error; wrong credentials are one too) retries with backoff (logging
    /// each failure) instead of exiting, so it is
    /// serving as soon as the broker is back rather than after a
    /// supervisor's crash-loop backoff. Gives up only when `shutdown` is
    /// cancelled.
    pub async fn queue_when_up(
        &self,
        delay_lanes: &[u64],
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Arc<dyn QueueAdapter>> {
        let mut backoff = Duration::from_millis(250);
        loop {
            match self.queue(delay_lanes).await {
                Ok(queue) => return Ok(queue),
                // Only an unreachable broker is waited for: a refused
                // declaration (a queue of another type, say) or an unreadable
                // CA file will not heal, and says so at once.
                Err(e)
                    if matches!(
                        e.downcast_ref::<agentenkit_queue::Error>(),
                        Some(agentenkit_queue::Error::Connection(_))
                    ) =>
                {
                    tracing::warn!(error = %format!("{e:#}"), retry_in = ?backoff, "RabbitMQ unreachable; waiting for it");
                }
                Err(e) => return Err(e),
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.cancelled() => anyhow::bail!("stopped while waiting for RabbitMQ"),
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }
}

impl Connections {
    /// The broker, connected in the background: the returned queue fails
    /// every call as an unreachable broker until [`Self::queue_when_up`]
    /// has connected (a refused declaration is logged and the queue stays
    /// away). For the API, which serves while the broker is away: its
    /// writes' messages wait in the outbox and its relay retries them.
    pub fn queue_in_background(
        &self,
        delay_lanes: &[u64],
        shutdown: &CancellationToken,
    ) -> Arc<LazyQueue> {
        let lazy = Arc::new(LazyQueue::new());
        let (connections, lanes, shutdown) = (self.clone(), delay_lanes.to_vec(), shutdown.clone());
        let connecting = lazy.clone();
        tokio::spawn(async move {
            match connections.queue_when_up(&lanes, &shutdown).await {
                Ok(queue) => {
                    tracing::info!("connected to RabbitMQ");
                    connecting.connected(queue);
                }
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "no broker: messages wait in the outbox")
                }
            }
        });
        lazy
    }
}

/// API keys from `AGENTENKIT_API_KEYS`, and the per-key limits.
#[derive(Debug, Clone, Args)]
pub struct KeyConfig {
    /// `owner:key,owner2:key2`
    #[arg(
        long,
        env = "AGENTENKIT_API_KEYS",
        default_value = "",
        hide_env_values = true
    )]
    pub api_keys: String,
    /// Open event streams one owner may hold; past it a stream is a 429.
    #[arg(long, env = "AGENTENKIT_MAX_STREAMS", default_value_t = agentenkit_api::DEFAULT_MAX_STREAMS)]
    pub max_streams: usize,
}

impl KeyConfig {
    pub fn load(&self) -> anyhow::Result<ApiKeys> {
        let keys = ApiKeys::parse(&self.api_keys)?;
        if keys.is_empty() {
            tracing::warn!("AGENTENKIT_API_KEYS is empty: every request will be refused with 401");
        }
        Ok(keys)
    }
}

/// Serves `/metrics` (Prometheus text) alone on `listen`, for processes
/// without the API (workers); returns the bound address.
pub async fn serve_metrics(
    listen: SocketAddr,
    shutdown: CancellationToken,
) -> anyhow::Result<SocketAddr> {
    let handle = agentenkit_api::metrics_handle()
        .context("another metrics recorder is installed in this process")?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let handle = handle.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4",
                    )],
                    handle.render(),
                )
            }
        }),
    );
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok(addr)
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// For people: one readable line per event.
    #[default]
    Text,
    /// For log shippers: one JSON object per line, span fields included
    /// (thread_id, run_id, tool_call_id).
    Json,
}

/// The log options every binary takes.
#[derive(Debug, Clone, Args)]
pub struct LogConfig {
    /// `text` or `json` (one object per line, for log shippers).
    #[arg(long, env = "AGENTENKIT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
}

/// Installs the tracing subscriber (binaries only): `RUST_LOG` filters,
/// logs go to stderr so stdout stays data; traces are exported as
/// `service` when the `OTEL_*` variables ask (see [`telemetry`]). Keep the
/// returned guard until the process ends: dropping it flushes the traces.
pub fn init_tracing(format: LogFormat, service: &'static str) -> anyhow::Result<Telemetry> {
    init_tracing_at("info,lapin=off", format, service)
}

/// Logs to stderr at `default` unless `RUST_LOG` says otherwise. Commands
/// whose output is for a person at a terminal (a transcript, a prompt, an
/// operator command) log at `warn` so that log lines do not land in it.
pub fn init_tracing_at(
    default: &str,
    format: LogFormat,
    service: &'static str,
) -> anyhow::Result<Telemetry> {
    telemetry::init(default, format, service)
}

/// A worker with the default settings, running until `shutdown`: what
/// `agentenkit dev` and the demo run beside their API.
pub fn spawn_worker(
    deployment: &agentenkit_runtime::Deployment,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<Result<(), agentenkit_runtime::worker::WorkerError>> {
    let worker =
        agentenkit_runtime::Worker::new(deployment, agentenkit_runtime::WorkerConfig::default());
    tokio::spawn(async move { worker.run(shutdown).await })
}

/// A token cancelled on Ctrl-C or SIGTERM.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(term) => term,
                    Err(_) => {
                        let _ = ctrl_c.await;
                        cancel.cancel();
                        return;
                    }
                };
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        tracing::info!("shutting down");
        cancel.cancel();
    });
    token
}

/// Parses `500ms`, `30s`, `5m`, `1h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: expected e.g. 30s, 500ms, 5m"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" | "" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!(
            "invalid duration unit in {text:?}: use ms, s, m or h"
        )),
    }
}

/// The URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{}:***{}", &url[..scheme + 3], user, &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Debug, Parser)]
    struct WithConnections {
        #[command(flatten)]
        connections: Connections,
        #[command(flatten)]
        keys: KeyConfig,
    }

    #[test]
    fn help_never_prints_a_secret_from_the_environment_or_a_default() {
        // Set for this process only; no other test reads these variables.
        std::env::set_var(
            "DATABASE_URL",
            "postgres://app:pg-secret@db:5432/agentenkit",
        );
        std::env::set_var("AMQP_URL", "amqp://app:mq-secret@mq:5672/%2f");
        std::env::set_var("AGENTENKIT_API_KEYS", "alice:key-secret");
        let help = WithConnections::command().render_long_help().to_string();
        for secret in ["pg-secret", "mq-secret", "key-secret", "guest:guest"] {
            assert!(!help.contains(secret), "--help shows {secret}:\n{help}");
        }
        assert!(
            help.contains("DATABASE_URL"),
            "the variables are still named"
        );
        let parsed = WithConnections::parse_from(["x"]);
        assert_eq!(
            parsed.connections.database_url,
            "postgres://app:pg-secret@db:5432/agentenkit"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("5 parsecs").is_err());
    }

    /// The agent files the repository ships must load.
    #[test]
    fn shipped_agent_files_load() {
        for path in ["../../agentenkit.toml", "../../deploy/agentenkit.toml"] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
            let registry =
                Registry::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let mailer = registry.agent("mailer").expect("mailer");
            assert!(mailer.intake.is_some());
        }
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("amqp://guest:guest@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
    }
}
