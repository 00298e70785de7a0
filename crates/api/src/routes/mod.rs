//! Routes, one module per resource. Each handler is registered together
//! with its OpenAPI description (`routes!`), so the document served at
//! `/openapi.json` lists exactly the routes that exist.

use axum::http::{Method, Uri};
use axum::Router;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::schemas::ApiDoc;
use crate::{ApiError, AppState};

mod agents;
mod answers;
mod conversations;
mod decisions;
mod forks;
mod health;
mod inbox;
mod runs;
mod stream;
mod threads;

/// The routes and the document describing them.
pub fn router() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let (router, doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(threads::create))
        .routes(routes!(threads::get))
        .routes(routes!(conversations::post_message, threads::list_messages))
        .routes(routes!(conversations::edit_message))
        .routes(routes!(forks::fork))
        .routes(routes!(threads::list_events))
        .routes(routes!(threads::stop))
        .routes(routes!(stream::stream))
        .routes(routes!(runs::get))
        .routes(routes!(runs::journal))
        .routes(routes!(answers::approve))
        .routes(routes!(answers::reject))
        .routes(routes!(answers::answer))
        .routes(routes!(answers::skip))
        .routes(routes!(answers::respond))
        .routes(routes!(decisions::decide))
        .routes(routes!(inbox::inbox))
        .routes(routes!(inbox::thread_pending_inputs))
        .routes(routes!(agents::list))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::metrics))
        .routes(routes!(health::openapi))
        .split_for_parts();
    let router = router
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method);
    (router, doc)
}

/// Every error is JSON, an unknown route too.
async fn unknown_route(uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route {}", uri.path()))
}

async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{} does not take {method}", uri.path()))
}
