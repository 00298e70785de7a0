use agentenkit_core::{JournalEntry, RunId};
use agentenkit_store::RunView;
use axum::extract::State;
use axum::Json;

use crate::auth::Caller;
use crate::extract::{parse_id, PathText};
use crate::schemas::ErrorBody;
use crate::{ApiError, AppState};

/// A run: its status, place in the run tree, output or error, and usage.
#[utoipa::path(get, path = "/runs/{id}", tag = "runs",
    params(("id" = RunId, Path, description = "The run")),
    responses(
        (status = 200, body = RunView),
        (status = 401, body = ErrorBody),
        (status = 404, description = "No such run of the caller's", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn get(
    State(state): State<AppState>,
    Caller(owner): Caller,
    PathText(id): PathText,
) -> Result<Json<RunView>, ApiError> {
    let run: RunId = parse_id(&id, "run")?;
    Ok(Json(state.store.get_run(run, &owner).await?))
}

/// The run's journal: every checkpoint, in position order (SPEC §4 names).
#[utoipa::path(get, path = "/runs/{id}/journal", tag = "runs",
    params(("id" = RunId, Path, description = "The run")),
    responses(
        (status = 200, body = Vec<JournalEntry>),
        (status = 401, body = ErrorBody),
        (status = 404, description = "No such run of the caller's", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn journal(
    State(state): State<AppState>,
    Caller(owner): Caller,
    PathText(id): PathText,
) -> Result<Json<Vec<JournalEntry>>, ApiError> {
    let run: RunId = parse_id(&id, "run")?;
    Ok(Json(state.store.get_journal(run, &owner).await?))
}
