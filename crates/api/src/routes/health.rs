use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};

use crate::{ApiError, AppState};

pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// Ready when both the database and the broker answer.
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    // The cause is logged, not echoed: this route needs no key.
    state.store.ready().await.map_err(|e| {
        tracing::warn!(error = %e, "not ready: database");
        ApiError::Unavailable("the database is unreachable".into())
    })?;
    state.queue.ready().await.map_err(|e| {
        tracing::warn!(error = %e, "not ready: broker");
        ApiError::Unavailable("the broker is unreachable".into())
    })?;
    Ok(Json(json!({ "status": "ready" })))
}

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let text = state
        .metrics
        .as_ref()
        .map(|h| h.render())
        .unwrap_or_default();
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}
