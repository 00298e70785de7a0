//! Routes, one module per resource.

use axum::http::{Method, Uri};
use axum::routing::{get, post};
use axum::Router;

use crate::{ApiError, AppState};

mod answers;
mod health;
mod runs;
mod stream;
mod threads;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/threads", post(threads::create))
        .route("/threads/{id}", get(threads::get))
        .route(
            "/threads/{id}/messages",
            post(threads::post_message).get(threads::list_messages),
        )
        .route("/threads/{id}/events", get(threads::list_events))
        .route("/threads/{id}/stop", post(threads::stop))
        .route("/threads/{id}/stream", get(stream::stream))
        .route("/runs/{id}", get(runs::get))
        .route("/runs/{id}/journal", get(runs::journal))
        .route("/agent/tool-call/approve", post(answers::approve))
        .route("/agent/tool-call/reject", post(answers::reject))
        .route("/agent/tool-call/answer", post(answers::answer))
        .route("/agent/tool-call/skip", post(answers::skip))
        .route("/agent/hitl/respond", post(answers::respond))
        .route("/agent/inbox", get(answers::inbox))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
}

/// Every error is JSON, an unknown route too.
async fn unknown_route(uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route {}", uri.path()))
}

async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{} does not take {method}", uri.path()))
}
