use agentenkit_core::{JournalEntry, RunId};
use agentenkit_store::RunView;
use axum::extract::State;
use axum::Json;

use crate::auth::{Read, Scoped};
use crate::extract::{parse_id, PathText, QueryParams};
use crate::page::{bound, Page, PageQuery};
use crate::schemas::ErrorBody;
use crate::{ApiError, AppState};

/// A run: its status, place in the run tree, output or error, and usage.
#[utoipa::path(get, path = "/runs/{id}", tag = "runs",
    params(("id" = RunId, Path, description = "The run")),
    responses(
        (status = 200, body = RunView),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 404, description = "No such run of the caller's", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn get(
    State(state): State<AppState>,
    Scoped(owner, ..): Scoped<Read>,
    PathText(id): PathText,
) -> Result<Json<RunView>, ApiError> {
    let run: RunId = parse_id(&id, "run")?;
    Ok(Json(state.store.get_run(run, &owner).await?))
}

/// The run's journal: every checkpoint, in position order (SPEC §4 names),
/// a page at a time (`after` a position).
#[utoipa::path(get, path = "/runs/{id}/journal", tag = "runs",
    params(("id" = RunId, Path, description = "The run"), PageQuery),
    responses(
        (status = 200, body = Vec<JournalEntry>, headers(("Link" = String,
            description = "`<…?after=…&limit=…>; rel=\"next\"` while more may follow"))),
        (status = 400, description = "`after` or `limit` out of range", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 404, description = "No such run of the caller's", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn journal(
    State(state): State<AppState>,
    Scoped(owner, ..): Scoped<Read>,
    PathText(id): PathText,
    QueryParams(page): QueryParams<PageQuery>,
) -> Result<Page<JournalEntry>, ApiError> {
    let run: RunId = parse_id(&id, "run")?;
    let (after, limit) = page.parse("a journal position")?;
    let after = after.map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    let entries = state
        .store
        .get_journal(run, &owner, after, bound(limit))
        .await?;
    Ok(Page::of(
        entries,
        limit,
        &format!("/runs/{run}/journal"),
        |entry| entry.position.to_string(),
    ))
}
