//! Open requests, a page at a time: the caller's inbox across threads, and
//! one thread's (when `GET /threads/{id}` says there are more than it
//! shows).

use agentenkit_core::ThreadId;
use agentenkit_store::PendingInput;
use axum::extract::State;

use crate::auth::{Read, Scoped};
use crate::extract::{parse_id, PathText, QueryParams};
use crate::page::{bound, cursor, CursorQuery, Page};
use crate::schemas::ErrorBody;
use crate::{ApiError, AppState};

/// Every open request of the caller's threads, oldest first, a page at a
/// time: a full page's `Link` header names the next. A request made while
/// a client pages may land on a page it has passed: the inbox is a snapshot
/// to read again (every few seconds), not a feed.
#[utoipa::path(get, path = "/agent/inbox", tag = "replies",
    params(CursorQuery),
    responses(
        (status = 200, body = Vec<PendingInput>, headers(("Link" = String,
            description = "`<…?after=…&limit=…>; rel=\"next\"` while more may follow"))),
        (status = 400, description = "`after` is not a cursor or `limit` out of range", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn inbox(
    State(state): State<AppState>,
    Scoped(owner, ..): Scoped<Read>,
    QueryParams(page): QueryParams<CursorQuery>,
) -> Result<Page<PendingInput>, ApiError> {
    let (after, limit) = page.parse()?;
    crate::reclaim_on_connect(&state, agentenkit_store::Scope::Owner(owner.clone())).await;
    let mut open = state
        .store
        .inbox(&owner, after.as_ref(), bound(limit))
        .await?;
    state.count_approvals(&mut open.items).await;
    Ok(Page::of(open, limit, "/agent/inbox", |input| {
        cursor(&input.position())
    }))
}

/// The thread's open requests, oldest first, a page at a time (the same
/// order and cursor as the inbox): `GET /threads/{id}` shows the first 100
/// and says `morePendingInputs` when there are more.
#[utoipa::path(get, path = "/threads/{id}/pending-inputs", tag = "threads",
    params(("id" = ThreadId, Path, description = "The thread"), CursorQuery),
    responses(
        (status = 200, body = Vec<PendingInput>, headers(("Link" = String,
            description = "`<…?after=…&limit=…>; rel=\"next\"` while more may follow"))),
        (status = 400, description = "`after` is not a cursor or `limit` out of range", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 404, description = "No such thread of the caller's", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn thread_pending_inputs(
    State(state): State<AppState>,
    Scoped(owner, ..): Scoped<Read>,
    PathText(id): PathText,
    QueryParams(page): QueryParams<CursorQuery>,
) -> Result<Page<PendingInput>, ApiError> {
    let thread: ThreadId = parse_id(&id, "thread")?;
    let (after, limit) = page.parse()?;
    let mut open = state
        .store
        .thread_pending_inputs(thread, &owner, after.as_ref(), bound(limit))
        .await?;
    state.count_approvals(&mut open.items).await;
    Ok(Page::of(
        open,
        limit,
        &format!("/threads/{thread}/pending-inputs"),
        |input| cursor(&input.position()),
    ))
}
