use agentenkit_core::{JournalEntry, RunId};
use agentenkit_store::RunView;
use axum::extract::State;
use axum::Json;

use crate::auth::Caller;
use crate::extract::{parse_id, PathText};
use crate::{ApiError, AppState};

pub async fn get(
    State(state): State<AppState>,
    Caller(owner): Caller,
    PathText(id): PathText,
) -> Result<Json<RunView>, ApiError> {
    let run: RunId = parse_id(&id, "run")?;
    Ok(Json(state.store.get_run(run, &owner).await?))
}

pub async fn journal(
    State(state): State<AppState>,
    Caller(owner): Caller,
    PathText(id): PathText,
) -> Result<Json<Vec<JournalEntry>>, ApiError> {
    let run: RunId = parse_id(&id, "run")?;
    Ok(Json(state.store.get_journal(run, &owner).await?))
}
