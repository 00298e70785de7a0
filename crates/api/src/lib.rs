//! The HTTP API of agentenkit (SPEC §9): JSON, camelCase, bearer keys.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agentenkit_queue::QueueAdapter;
use agentenkit_runtime::{Registry, Relay};
use agentenkit_store::Store;
use axum::extract::DefaultBodyLimit;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

mod auth;
mod error;
mod extract;
mod hub;
mod routes;

pub use auth::{ApiKeys, ApiKeysError};
pub use error::ApiError;

/// Bodies above this are refused with 413.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How often a process with open streams asks the store for new events: the
/// most a live stream lags a commit, and one indexed query per interval.
pub const STREAM_POLL: Duration = Duration::from_millis(20);

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub queue: Arc<dyn QueueAdapter>,
    pub relay: Relay,
    pub registry: Arc<Registry>,
    pub keys: Arc<ApiKeys>,
    pub metrics: Option<PrometheusHandle>,
    pub hub: Arc<hub::EventHub>,
    /// A stream re-reads its thread this often even without a wake-up, in
    /// case one was missed (a lagging subscriber, a failing poll).
    pub stream_reread: Duration,
}

impl AppState {
    pub fn new(
        store: Store,
        queue: Arc<dyn QueueAdapter>,
        registry: Arc<Registry>,
        keys: ApiKeys,
    ) -> Self {
        Self {
            relay: Relay::new(queue.clone()),
            hub: Arc::new(hub::EventHub::new(store.clone(), STREAM_POLL)),
            stream_reread: Duration::from_secs(5),
            store,
            queue,
            registry,
            keys: Arc::new(keys),
            metrics: metrics_handle(),
        }
    }
}

/// The process-wide Prometheus recorder, installed on first use. `None`
/// when another recorder was installed first.
pub fn metrics_handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| PrometheusBuilder::new().install_recorder().ok())
        .clone()
}

pub fn router(state: AppState) -> Router {
    routes::router()
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// `reclaimIfOrphaned` for what a client is about to look at: overdue
/// requests expire now rather than at the next reaper pass. One indexed
/// query when there is nothing to do (the usual case); a failure only logs
/// (the reaper will get to it).
pub(crate) async fn reclaim_on_connect(state: &AppState, scope: agentenkit_store::Scope) {
    match state.store.has_reclaimable_requests(&scope).await {
        Ok(false) => return,
        Ok(true) => {}
        Err(e) => {
            tracing::warn!(error = %e, ?scope, "reclaim on connect failed");
            return;
        }
    }
    let config = agentenkit_runtime::reaper::ReaperConfig::default();
    if let Err(e) =
        agentenkit_runtime::reaper::reclaim_requests(&state.store, &state.relay, &config, &scope)
            .await
    {
        tracing::warn!(error = %e, ?scope, "reclaim on connect failed");
    }
}
