use agentenkit_core::{RunId, ThreadId, ThreadStatus};
use agentenkit_store::{EventView, MessageView, ThreadView};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};

use crate::auth::{Read, Scoped, ThreadsWrite};
use crate::extract::{parse_event_id, parse_id, JsonBody, PathText, QueryParams};
use crate::page::{bound, parse_limit, Page, PageQuery};
use crate::schemas::ErrorBody;
use crate::{ApiError, AppState};

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateThread {
    /// An agent of the agent file (`GET /agents`).
    agent: String,
    /// Kept with the thread and returned with it; at most 64 KiB of JSON.
    #[serde(default, deserialize_with = "crate::free_form::metadata")]
    #[schema(value_type = Option<crate::schemas::StorableObject>)]
    metadata: Option<Value>,
}

#[derive(Serialize, ToSchema)]
pub struct CreatedThread {
    id: ThreadId,
    agent: String,
    status: ThreadStatus,
}

/// Starts a thread with an agent; its first turn is a message.
#[utoipa::path(post, path = "/threads", tag = "threads",
    request_body = CreateThread,
    responses(
        (status = 201, body = CreatedThread),
        (status = 400, description = "Malformed JSON, or metadata that is not an object", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 422, description = "`UnknownAgent`", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, description = "`Unavailable`: the database or broker, or the agent waits for an MCP server this process could not list", body = ErrorBody),
    ))]
pub async fn create(
    State(state): State<AppState>,
    Scoped(owner, ..): Scoped<ThreadsWrite>,
    JsonBody(body): JsonBody<CreateThread>,
) -> Result<(StatusCode, Json<CreatedThread>), ApiError> {
    state.refuse_delayed(&body.agent)?;
    if state.registry().agent(&body.agent).is_none() {
        return Err(ApiError::Unprocessable {
            code: "UnknownAgent",
            message: format!("unknown agent {:?}", body.agent),
        });
    }
    let metadata = match body.metadata {
        None | Some(Value::Null) => json!({}),
        // NUL anywhere in a body was refused by `JsonBody` already.
        Some(m @ Value::Object(_)) => m,
        Some(_) => return Err(ApiError::BadRequest("metadata must be an object".into())),
    };
    let thread = state
        .store
        .create_thread(&owner, &body.agent, &metadata)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedThread {
            id: thread.id,
            agent: thread.agent,
            status: thread.status,
        }),
    ))
}

/// A thread, its status and its open requests.
#[utoipa::path(get, path = "/threads/{id}", tag = "threads",
    params(("id" = ThreadId, Path, description = "The thread")),
    responses(
        (status = 200, body = ThreadView),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 404, description = "No such thread of the caller's", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn get(
    State(state): State<AppState>,
    Scoped(owner, ..): Scoped<Read>,
    PathText(id): PathText,
) -> Result<Json<ThreadView>, ApiError> {
    let thread: ThreadId = parse_id(&id, "thread")?;
    let mut view = state.store.get_thread(thread, &owner).await?;
    view.spent = state.store.thread_spending(thread).await?;
    state.count_approvals(&mut view.pending_inputs).await;
    Ok(Json(view))
}

/// The conversation: user and assistant messages, tool calls and results,
/// oldest first, a page at a time.
#[utoipa::path(get, path = "/threads/{id}/messages", tag = "threads",
    params(("id" = ThreadId, Path, description = "The thread"), PageQuery),
    responses(
        (status = 200, body = Vec<MessageView>, headers(("Link" = String,
            description = "`<…?after=…&limit=…>; rel=\"next\"` while more may follow"))),
        (status = 400, description = "`after` or `limit` out of range", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 404, description = "No such thread of the caller's", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn list_messages(
    State(state): State<AppState>,
    Scoped(owner, ..): Scoped<Read>,
    PathText(id): PathText,
    QueryParams(page): QueryParams<PageQuery>,
) -> Result<Page<MessageView>, ApiError> {
    let thread: ThreadId = parse_id(&id, "thread")?;
    let (after, limit) = page.parse("a message id")?;
    let messages = state
        .store
        .list_messages(thread, &owner, after.unwrap_or(0), bound(limit))
        .await?;
    Ok(Page::of(
        messages,
        limit,
        &format!("/threads/{thread}/messages"),
        |message| message.id.to_string(),
    ))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events with a larger id (the last id seen); default 0.
    #[param(value_type = Option<i64>, minimum = 0, nullable = false)]
    after: Option<String>,
    /// At most this many (1 to 1000, the default).
    #[param(value_type = Option<i64>, minimum = 1, maximum = 1000, nullable = false)]
    limit: Option<String>,
}

/// The thread's events after `after`, oldest first, a page at a time (at
/// most `limit` and 4 MiB of JSON; a full page's `Link` header names the
/// next).
#[utoipa::path(get, path = "/threads/{id}/events", tag = "threads",
    params(("id" = ThreadId, Path, description = "The thread"), EventsQuery),
    responses(
        (status = 200, body = Vec<EventView>, headers(("Link" = String,
            description = "`<…?after=…&limit=…>; rel=\"next\"` while more may follow"))),
        (status = 400, description = "`after` is not an event id or `limit` out of range", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 404, description = "No such thread of the caller's", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn list_events(
    State(state): State<AppState>,
    Scoped(owner, ..): Scoped<Read>,
    PathText(id): PathText,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Result<Page<EventView>, ApiError> {
    let thread: ThreadId = parse_id(&id, "thread")?;
    let after = match query.after.as_deref() {
        None => 0,
        Some(text) => parse_event_id(text, "after")?,
    };
    let limit = parse_limit(query.limit.as_deref())?;
    let events = state
        .store
        .list_events(thread, &owner, after, bound(limit))
        .await?;
    Ok(Page::of(
        events,
        limit,
        &format!("/threads/{thread}/events"),
        |event| event.id.to_string(),
    ))
}

#[derive(Serialize, ToSchema)]
pub struct Stopped {
    /// The runs stopped: the current run and its sub-agents (none when the
    /// thread was idle).
    stopped: Vec<RunId>,
}

/// Stops the thread's current run tree.
#[utoipa::path(post, path = "/threads/{id}/stop", tag = "threads",
    params(("id" = ThreadId, Path, description = "The thread")),
    responses(
        (status = 202, body = Stopped),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 404, description = "No such thread of the caller's", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn stop(
    State(state): State<AppState>,
    Scoped(owner, ..): Scoped<ThreadsWrite>,
    PathText(id): PathText,
) -> Result<(StatusCode, Json<Stopped>), ApiError> {
    let thread: ThreadId = parse_id(&id, "thread")?;
    let stopped = state.store.stop_thread(thread, &owner).await?;
    Ok((StatusCode::ACCEPTED, Json(Stopped { stopped })))
}
