//! The HTTP API of agentenkit (SPEC §9): JSON, camelCase, bearer keys.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agentenkit_queue::QueueAdapter;
use agentenkit_runtime::{Deployment, Registry, Relay};
use agentenkit_store::Store;
use axum::extract::DefaultBodyLimit;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

mod auth;
mod error;
mod extract;
mod free_form;
mod hub;
mod openapi;
mod page;
mod routes;
mod schemas;
mod traced;
mod ui;
mod unread;

pub use auth::{ApiKeys, ApiKeysError};
pub use error::ApiError;
pub use openapi::document as openapi_document;

/// Bodies above this are refused with 413.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How often a process with open streams asks the store for new events: the
/// most a live stream lags a commit, and one indexed query per interval.
pub const STREAM_POLL: Duration = Duration::from_millis(20);

/// Open streams one owner may hold (`AGENTENKIT_MAX_STREAMS`); past it a
/// stream request is a 429.
pub const DEFAULT_MAX_STREAMS: usize = 64;

/// How long a key made with `agentenkit keys` is trusted after its last
/// lookup: a revoked key is refused within this.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(5);

/// How long a request's body may take to arrive whole.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one event stream lasts before the server ends it.
pub const STREAM_LIFETIME: Duration = Duration::from_secs(3600);

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub queue: Arc<dyn QueueAdapter>,
    pub relay: Relay,
    pub keys: Arc<ApiKeys>,
    /// Keys made with `agentenkit keys`, as looked up lately.
    pub key_cache: Arc<auth::KeyCache>,
    pub metrics: Option<PrometheusHandle>,
    pub hub: Arc<hub::EventHub>,
    /// A stream re-reads its thread this often even without a wake-up, in
    /// case one was missed (a lagging subscriber, a failing poll).
    pub stream_reread: Duration,
    /// A stream ends after this long (its client reconnects with
    /// `Last-Event-ID` and is authenticated afresh).
    pub stream_lifetime: Duration,
    /// Cancelled when the server stops: open streams end (the client
    /// reconnects elsewhere with `Last-Event-ID`), so a graceful shutdown
    /// does not wait for them for ever.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// How long a batch's idempotency key holds (`POST /agent/decisions`).
    pub idempotency: agentenkit_store::KeyTimes,
    /// `GET /openapi.json`, rendered on first request: for a caller with
    /// a key (the deployment's agents listed), and for anyone.
    openapi: Arc<OnceLock<bytes::Bytes>>,
    openapi_public: Arc<OnceLock<bytes::Bytes>>,
    /// What the process serves with (its relay, notifier and the
    /// registries of the agent versions runs are pinned to).
    deployment: Deployment,
    /// Sends the events this process's answers and stops claimed for it
    /// (when the deployment has notification targets).
    pub sends_here: Option<agentenkit_runtime::notify::SendsHere>,
    /// Set once this process's agent versions are recorded: `/readyz`
    /// fails until then (the server sets it; see
    /// `Registry::record_versions_until_done`).
    pub versions_recorded: Arc<std::sync::atomic::AtomicBool>,
    /// A request's body must arrive whole within this (408 otherwise).
    pub body_read_timeout: Duration,
}

impl AppState {
    /// 503 for a turn of `agent` when this process left it out because an
    /// MCP server it names could not be listed at start.
    pub(crate) fn refuse_delayed(&self, agent: &str) -> Result<(), error::ApiError> {
        match self.registry().delayed_agents().get(agent) {
            Some(why) => Err(error::ApiError::Unavailable(format!(
                "agent {agent:?} is not served here now: {why}"
            ))),
            None => Ok(()),
        }
    }

    /// The API of `deployment`: its answers and stops write as the
    /// deployment's processes do (published through its relay, notified,
    /// sent from here), and check a run of another version by the
    /// deployment's registries of it.
    pub fn new(deployment: Deployment, keys: ApiKeys) -> Self {
        Self {
            sends_here: deployment.sends_here().cloned(),
            relay: deployment.relay().clone(),
            hub: Arc::new(hub::EventHub::new(
                deployment.store().clone(),
                STREAM_POLL,
                DEFAULT_MAX_STREAMS,
            )),
            stream_reread: Duration::from_secs(5),
            stream_lifetime: STREAM_LIFETIME,
            store: deployment.store().clone(),
            queue: deployment.queue(),
            keys: Arc::new(keys),
            key_cache: Arc::new(auth::KeyCache::new(KEY_CACHE_TTL)),
            metrics: metrics_handle(),
            shutdown: tokio_util::sync::CancellationToken::new(),
            idempotency: agentenkit_store::KeyTimes::default(),
            openapi: Arc::default(),
            openapi_public: Arc::default(),
            versions_recorded: Arc::default(),
            body_read_timeout: BODY_READ_TIMEOUT,
            deployment,
        }
    }

    /// Replies and reclaims as the runtime offers them to Rust callers,
    /// sharing the registries of the agent versions its answers were
    /// checked by.
    pub fn replies(&self) -> agentenkit_runtime::Replies {
        agentenkit_runtime::Replies::new(self.store.clone(), self.deployment.pinned().clone())
    }

    /// Says of each open approval that needs several people how many: the
    /// rule of its tool in the version of its agent the run is pinned to,
    /// which is what its answers are counted by (its count so far comes
    /// from the row). A version this process cannot build leaves the card
    /// without a count (an answer then says why).
    pub(crate) async fn count_approvals(&self, inputs: &mut [agentenkit_store::PendingInput]) {
        let approvals = inputs
            .iter_mut()
            .filter(|input| input.kind == agentenkit_core::ToolKind::Approval);
        for input in approvals {
            let pinned = self.deployment.pinned();
            let version = input.agent_version.as_deref();
            let registry = match pinned.for_run(&self.store, &input.run_name, version).await {
                Ok(registry) => registry,
                Err(e) => {
                    tracing::warn!(error = %e, run_id = %input.run_id, "approval rule of a version not known here");
                    continue;
                }
            };
            let rule = registry.approval_rule(&input.tool_name);
            if !rule.is_single() {
                input.approvals_required = Some(rule.required);
                input.approvals_given.get_or_insert(0);
            }
        }
    }

    /// Replies as `caller`'s key gives them: only the kinds of request its
    /// scopes may answer, its id recorded with each decision.
    pub(crate) fn replies_of(&self, caller: &auth::Caller) -> agentenkit_runtime::Replies {
        self.replies()
            .as_key(caller.scopes, caller.approver.clone())
    }

    /// The OpenAPI document of this deployment (its agents listed).
    /// The document of this build, which names no agent: what a caller
    /// without a key is shown.
    pub(crate) fn openapi_public_json(&self) -> bytes::Bytes {
        self.openapi_public
            .get_or_init(|| {
                serde_json::to_vec_pretty(&openapi::document())
                    .unwrap_or_default()
                    .into()
            })
            .clone()
    }

    /// What this API serves with.
    pub fn deployment(&self) -> &Deployment {
        &self.deployment
    }

    /// The registry new turns are served from (the agent file as its MCP
    /// servers list it now).
    pub fn registry(&self) -> Arc<Registry> {
        self.deployment.registry()
    }

    pub(crate) fn openapi_json(&self) -> bytes::Bytes {
        self.openapi
            .get_or_init(|| {
                let registry = self.registry();
                let mut agents: Vec<&str> = registry.agent_names().collect();
                agents.sort_unstable();
                let doc = openapi::document_for(&agents);
                serde_json::to_vec_pretty(&doc).unwrap_or_default().into()
            })
            .clone()
    }

    /// The same state publishing through `relay` (its store's writes and
    /// its notifier's retries too).
    pub fn with_relay(self, relay: Relay) -> Self {
        let deployment = self.deployment.with_relay(relay);
        Self {
            store: deployment.store().clone(),
            relay: deployment.relay().clone(),
            queue: deployment.queue(),
            sends_here: deployment.sends_here().cloned(),
            deployment,
            ..self
        }
    }

    /// The same state with another per-owner limit of open streams.
    pub fn with_max_streams(mut self, max_per_owner: usize) -> Self {
        self.hub = Arc::new(hub::EventHub::new(
            self.store.clone(),
            STREAM_POLL,
            max_per_owner.max(1),
        ));
        self
    }
}

/// The process-wide Prometheus recorder, installed on first use. `None`
/// when another recorder was installed first.
pub fn metrics_handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            use agentenkit_runtime::metrics as m;
            use metrics_exporter_prometheus::Matcher;
            // Real histograms (buckets), not the exporter's default
            // summaries, so they aggregate across processes.
            let buckets: [(&str, &[f64]); 3] = [
                (
                    m::SEGMENT_SECONDS,
                    &[
                        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                        10.0, 30.0,
                    ],
                ),
                (
                    m::ANSWER_WAIT_SECONDS,
                    &[
                        0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0,
                    ],
                ),
                (
                    m::EXPIRY_LATENESS_SECONDS,
                    &[
                        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
                    ],
                ),
            ];
            let mut builder = PrometheusBuilder::new();
            for (name, bounds) in buckets {
                builder = builder
                    .set_buckets_for_metric(Matcher::Full(name.to_owned()), bounds)
                    .ok()?;
            }
            builder.install_recorder().ok()
        })
        .clone()
}

pub fn router(state: AppState) -> Router {
    let router = routes::router()
        .0
        .merge(ui::router())
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(unread::close_if_body_unread));
    // A span per request only in a process that exports traces (set up
    // before the router is built): none is made, or looked for, otherwise.
    let router = if agentenkit_runtime::trace::exporting() {
        router.layer(axum::middleware::from_fn(traced::span_of_request))
    } else {
        router
    };
    // Outermost: a method none of HTTP's own is refused before any other
    // layer (the span above included) looks at the request.
    router
        .layer(axum::middleware::from_fn(traced::refuse_unknown_method))
        .with_state(state)
}

/// `reclaimIfOrphaned` for what a client is about to look at: overdue
/// requests expire now rather than at the next reaper pass. One indexed
/// query when there is nothing to do (the usual case); a failure only logs
/// (the reaper will get to it).
pub(crate) async fn reclaim_on_connect(state: &AppState, scope: agentenkit_store::Scope) {
    let replies = state.replies();
    let reclaimed = match &scope {
        agentenkit_store::Scope::Thread(thread) => replies.reclaim_if_orphaned(*thread).await,
        agentenkit_store::Scope::Owner(owner) => replies.reclaim_owner(owner).await,
        agentenkit_store::Scope::All => return,
    };
    if let Err(e) = reclaimed {
        tracing::warn!(error = %e, ?scope, "reclaim on connect failed");
    }
}
