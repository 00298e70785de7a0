//! agentenkit: migrate the database, run everything in one process, or
//! watch a demo conversation.

use std::net::SocketAddr;
use std::time::Duration;

use agentenkit::ops::OpsCommand;
use agentenkit::{
    init_tracing, init_tracing_at, parse_duration, serve_api, shutdown_on_signal, AgentConfig,
    Connections, KeyConfig, LogConfig, DEFAULT_LISTEN,
};
use agentenkit_api::AppState;
use agentenkit_runtime::reaper::{reap_every, ReaperConfig};
use agentenkit_runtime::Relay;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    version,
    about = "A durable agent runtime whose runs can wait for a person"
)]
struct Cli {
    #[command(flatten)]
    log: LogConfig,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Applies the database migrations (idempotent).
    Migrate {
        #[command(flatten)]
        connections: Connections,
    },
    /// API, worker and reaper loop in one process.
    Dev {
        #[command(flatten)]
        connections: Connections,
        #[command(flatten)]
        agents: AgentConfig,
        #[command(flatten)]
        keys: KeyConfig,
        #[arg(long, env = "AGENTENKIT_LISTEN", default_value = DEFAULT_LISTEN)]
        listen: SocketAddr,
        /// How often the reaper pass runs.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        reap_every: Duration,
    },
    /// Talk to an agent on the terminal; approvals are asked here.
    Chat {
        #[command(flatten)]
        connections: Connections,
        #[command(flatten)]
        agents: AgentConfig,
        /// The agent to talk to.
        #[arg(long)]
        agent: String,
        /// The owner of the thread (as an API key's owner would be).
        #[arg(long, env = "AGENTENKIT_OWNER", default_value = "local")]
        owner: String,
    },
    /// A scripted conversation end to end, printed as a transcript.
    Demo {
        #[command(flatten)]
        connections: Connections,
    },
    /// Agents as the database knows them: the versions processes recorded.
    Agents {
        #[command(flatten)]
        connections: Connections,
        #[command(subcommand)]
        command: agentenkit::agents::AgentsCommand,
    },
    /// The agent file's MCP servers as this machine reaches them now.
    Mcp {
        #[command(flatten)]
        agents: AgentConfig,
        #[command(subcommand)]
        command: agentenkit::mcp::McpCommand,
    },
    /// API keys with scopes, in the database: create, list, revoke.
    Keys {
        #[command(flatten)]
        connections: Connections,
        #[command(subcommand)]
        command: agentenkit::keys::KeysCommand,
    },
    /// Prints the API's OpenAPI 3.1 document (as `GET /openapi.json` serves
    /// it), for client generators.
    Openapi,
    /// Operator commands over the HTTP API (AGENTENKIT_URL, AGENTENKIT_API_KEY).
    #[command(flatten)]
    Ops(OpsCommand),
}

/// The service its traces are exported as, unless `OTEL_SERVICE_NAME` says.
const SERVICE: &str = "agentenkit";

#[global_allocator]
static ALLOCATOR: agentenkit::Allocator = agentenkit::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _telemetry = match &cli.command {
        // Output for a person at a terminal: no log lines in it.
        Command::Chat { .. }
        | Command::Demo { .. }
        | Command::Ops(_)
        | Command::Keys { .. }
        | Command::Mcp { .. }
        | Command::Agents { .. } => init_tracing_at("warn,lapin=off", cli.log.log_format, SERVICE),
        Command::Migrate { .. } | Command::Dev { .. } | Command::Openapi => {
            init_tracing(cli.log.log_format, SERVICE)
        }
    }?;
    match cli.command {
        Command::Migrate { connections } => {
            let applied = connections.store()?.migrate().await?;
            println!("{}", serde_json::json!({ "applied": applied }));
        }
        Command::Dev {
            connections,
            agents,
            keys,
            listen,
            reap_every: every,
        } => dev(connections, agents, keys, listen, every).await?,
        Command::Chat {
            connections,
            agents,
            agent,
            owner,
        } => agentenkit::chat::run(connections, agents, agent, owner).await?,
        Command::Demo { connections } => agentenkit::demo::run(connections).await?,
        Command::Agents {
            connections,
            command,
        } => {
            let store = connections.store()?;
            store.migrate().await?;
            let (output, found) = command.run(&store).await?;
            print!("{output}");
            if !found {
                std::process::exit(1);
            }
        }
        Command::Mcp { agents, command } => {
            let (output, all_listed) = command.run(&agents.path).await?;
            print!("{output}");
            if !all_listed {
                std::process::exit(1);
            }
        }
        Command::Keys {
            connections,
            command,
        } => {
            let store = connections.store()?;
            store.migrate().await?;
            let (output, done) = command.run(&store).await?;
            print!("{output}");
            if !done {
                std::process::exit(1);
            }
        }
        Command::Openapi => println!(
            "{}",
            serde_json::to_string_pretty(&agentenkit_api::openapi_document())?
        ),
        Command::Ops(command) => {
            let outcome = command.run().await?;
            print!("{}", outcome.output);
            std::io::Write::flush(&mut std::io::stdout())?;
            if outcome.exit_code != 0 {
                std::process::exit(outcome.exit_code);
            }
        }
    }
    Ok(())
}

/// `agentenkit dev`: the API, a worker and the reaper in one process.
async fn dev(
    connections: Connections,
    agents: AgentConfig,
    keys: KeyConfig,
    listen: SocketAddr,
    every: Duration,
) -> anyhow::Result<()> {
    let store = connections.store()?;
    store.migrate().await?;
    let registry = agents.load_for_sending().await?;
    let queue = connections.queue(&registry.delay_lanes()).await?;
    let shutdown = shutdown_on_signal();
    // One process, one deployment: the worker, the reaper loop and the
    // API write, publish and notify alike.
    let deployment = agentenkit_runtime::Deployment::assemble(
        store,
        Relay::new(queue),
        registry,
        agentenkit_runtime::notify::DEFAULT_CONCURRENCY,
    );
    let worker_task = agentenkit::spawn_worker(&deployment, shutdown.clone());
    let reaper = tokio::spawn(reap_every(
        deployment.clone(),
        ReaperConfig::default(),
        every,
        shutdown.clone(),
    ));
    let state = AppState::new(deployment, keys.load()?).with_max_streams(keys.max_streams);
    let (addr, served) = serve_api(state, listen, shutdown).await?;
    tracing::info!(%addr, queue = ?connections.queue, "agentenkit dev: API, worker and reaper running");
    println!("agentenkit dev: the inbox page is at http://{addr}/ui/ (sign in with an API key)");
    served.await?;
    worker_task.await??;
    reaper.await?;
    Ok(())
}
