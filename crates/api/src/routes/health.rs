use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::schemas::ErrorBody;
use crate::{ApiError, AppState};

#[derive(Serialize, ToSchema)]
pub struct Health {
    /// `ok` (liveness) or `ready` (readiness).
    status: &'static str,
    /// With readiness: `up`, or `away` while the broker is unreachable
    /// (the API serves on: what must follow a commit waits in the outbox).
    #[serde(skip_serializing_if = "Option::is_none")]
    broker: Option<&'static str>,
    /// With readiness, when some are: how many agents this process does
    /// not serve because an MCP server they name could not be listed at
    /// start (which, and why, is logged; the others are served).
    #[serde(rename = "delayedAgents", skip_serializing_if = "Option::is_none")]
    delayed_agents: Option<usize>,
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "operations", security(()),
    responses((status = 200, body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok",
        broker: None,
        delayed_agents: None,
    })
}

/// Readiness: the database answers and this process's agent versions are
/// recorded (workers of another file serve its runs by them). The broker
/// is reported, not required:
/// while it is away, reads, answers and new turns still commit, and their
/// messages wait in the outbox for it (`agentenkit_broker_up` is 0).
#[utoipa::path(get, path = "/readyz", tag = "operations", security(()),
    responses(
        (status = 200, body = Health),
        (status = 503, description = "The database is unreachable, or this process's agent versions are not recorded yet", body = ErrorBody),
    ))]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    // The cause is logged, not echoed: this route needs no key.
    state.store.ready().await.map_err(|e| {
        tracing::warn!(error = %e, "not ready: database");
        ApiError::Unavailable("the database is unreachable".into())
    })?;
    if !state
        .versions_recorded
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        return Err(ApiError::Unavailable(
            "the agent versions are not recorded yet (retrying)".into(),
        ));
    }
    let broker = match state.queue.ready().await {
        Ok(()) => "up",
        Err(e) => {
            tracing::warn!(error = %e, "the broker is away; serving on, messages wait in the outbox");
            "away"
        }
    };
    ::metrics::gauge!(agentenkit_runtime::metrics::BROKER_UP).set(if broker == "up" {
        1.0
    } else {
        0.0
    });
    let delayed = state.registry().delayed_agents().len();
    Ok(Json(Health {
        status: "ready",
        broker: Some(broker),
        delayed_agents: (delayed > 0).then_some(delayed),
    }))
}

/// Prometheus text: the counters and histograms docs/observability.md lists.
#[utoipa::path(get, path = "/metrics", tag = "operations", security(()),
    responses((status = 200, content_type = "text/plain; version=0.0.4", body = String)))]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let text = state
        .metrics
        .as_ref()
        .map(|h| h.render())
        .unwrap_or_default();
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// This document (OpenAPI 3.1). With a key that may read (as
/// `GET /agents` needs), `agent` of `POST /threads` lists the deployment's
/// agents; otherwise no agent is named.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", security((), ("bearer" = [])),
    responses((status = 200, content_type = "application/json", body = Object)))]
pub async fn openapi(
    State(state): State<AppState>,
    caller: Result<crate::auth::Caller, crate::error::ApiError>,
) -> impl IntoResponse {
    let reads = caller.is_ok_and(|caller| caller.require(agentenkit_core::KeyScope::Read).is_ok());
    let doc = if reads {
        state.openapi_json()
    } else {
        state.openapi_public_json()
    };
    ([(CONTENT_TYPE, "application/json")], doc)
}
