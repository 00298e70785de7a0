//! A process serving its agent file as its MCP servers list it now: when a
//! server says its tools changed, or while agents wait for a server that
//! could not be listed (tried again, backing off), the file is listed
//! again; if that makes other versions, they are recorded, new turns start
//! on them, and runs pinned to the ones replaced keep theirs.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Deployment;
use crate::{metrics, Registry};

/// The first wait before agents that wait for a server are tried again;
/// doubled after each try, up to [`LONGEST_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LONGEST_RETRY: Duration = Duration::from_secs(60);

/// Changes that come together (a server that changes several tools) are
/// listed once; a server that says so without end is listed at most about
/// once a second.
const SETTLE: Duration = Duration::from_secs(1);

impl Deployment {
    /// Serves `next` (this deployment's file, listed again) from now on,
    /// when it serves otherwise than the registry in use: its versions
    /// recorded first (so any process can serve runs pinned to them),
    /// then new turns pinned to them. `false` when nothing changed.
    pub async fn serve_relisted(&self, next: Registry) -> crate::Result<bool> {
        let current = self.registry();
        if !current.serves_otherwise(&next) {
            return Ok(false);
        }
        next.record_versions(self.connected())
            .await
            .map_err(crate::Error::Store)?;
        for version in next.agent_versions() {
            let before = current
                .agent_version(&version.agent)
                .map(|v| v.hash.as_str());
            if before != Some(version.hash.as_str()) {
                tracing::info!(
                    agent = %version.agent,
                    from = before.map(crate::versions::AgentVersion::short).unwrap_or("(not served)"),
                    to = crate::versions::AgentVersion::short(&version.hash),
                    "new turns start on another version: its MCP servers list other tools now"
                );
                ::metrics::counter!(metrics::RELISTED_VERSIONS).increment(1);
            }
        }
        for (agent, why) in next.delayed_agents() {
            tracing::warn!(agent = %agent, "not served by this process: {why}");
        }
        // New turns are pinned to the new versions (recorded: any worker
        // can serve them) before this process serves them from memory.
        self.store.repin_agent_versions(
            next.agent_versions()
                .map(|v| (v.agent.clone(), v.hash.clone()))
                .collect(),
        );
        self.pinned.replace_current(Arc::new(next));
        Ok(true)
    }

    /// Until `shutdown`, lists the file again whenever one of its MCP
    /// servers says its tools changed, and, while agents wait for a server
    /// that could not be listed (or a listing failed), after 1 s, then
    /// twice as long each time up to a minute. One watcher per process;
    /// nothing to do for a file without servers.
    pub fn watch_servers(
        &self,
        shutdown: CancellationToken,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let servers = self.registry().mcp_servers();
        // A worker and an API of one deployment would list every change
        // twice.
        if servers.is_empty() || !self.pinned.start_watching(true) {
            return None;
        }
        let deployment = self.clone();
        Some(tokio::spawn(async move {
            let mut changes: Vec<_> = servers.iter().map(|s| s.tools_changed()).collect();
            let mut retry = FIRST_RETRY;
            let mut failed = false;
            loop {
                let waiting = failed || !deployment.registry().delayed_agents().is_empty();
                let changed =
                    futures::future::select_all(changes.iter_mut().map(|c| Box::pin(c.changed())));
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = changed => tokio::time::sleep(SETTLE).await,
                    _ = tokio::time::sleep(retry), if waiting => {
                        retry = (retry * 2).min(LONGEST_RETRY);
                    }
                }
                for change in &mut changes {
                    change.borrow_and_update();
                }
                let Some(listed) = deployment.registry().relisted().await else {
                    break;
                };
                let served = match listed {
                    Ok(next) => deployment.serve_relisted(next).await,
                    Err(e) => Err(e),
                };
                failed = served.is_err();
                match served {
                    Ok(true) => retry = FIRST_RETRY,
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "the agent file could not be listed again")
                    }
                }
            }
            deployment.pinned.start_watching(false);
        }))
    }
}
