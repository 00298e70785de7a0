//! agentenkit-api: the HTTP API.

use std::net::SocketAddr;

use agentenkit::{
    init_tracing, serve_api, shutdown_on_signal, AgentConfig, Connections, KeyConfig, LogConfig,
    DEFAULT_LISTEN,
};
use agentenkit_api::AppState;
use clap::Parser;

#[global_allocator]
static ALLOCATOR: agentenkit::Allocator = agentenkit::Allocator;

#[derive(Debug, Parser)]
#[command(version, about = "Serves the agentenkit HTTP API")]
struct Cli {
    #[command(flatten)]
    log: LogConfig,
    #[command(flatten)]
    connections: Connections,
    #[command(flatten)]
    agents: AgentConfig,
    #[command(flatten)]
    keys: KeyConfig,
    /// Address to listen on.
    #[arg(long, env = "AGENTENKIT_LISTEN", default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _telemetry = init_tracing(cli.log.log_format, "agentenkit-api")?;
    let shutdown = shutdown_on_signal();
    let deployment = agentenkit_runtime::Deployment::assemble(
        cli.connections.store()?,
        // Served at once, the broker or not: see `queue_in_background`.
        agentenkit_runtime::Relay::new(cli.connections.queue_in_background(&[], &shutdown)),
        cli.agents.load().await?,
        agentenkit_runtime::notify::DEFAULT_CONCURRENCY,
    );
    let state = AppState::new(deployment, cli.keys.load()?).with_max_streams(cli.keys.max_streams);
    let (addr, served) = serve_api(state, cli.listen, shutdown).await?;
    tracing::info!(%addr, "API listening");
    served.await?;
    Ok(())
}
