use agentenkit_core::ThreadId;
use agentenkit_store::{EventView, MessageView, ThreadView};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::extract::{parse_id, JsonBody, PathText, QueryParams};
use crate::{ApiError, AppState};

/// Longest user message accepted (characters are bytes here; the body
/// limit bounds it anyway).
const MAX_CONTENT_BYTES: usize = 256 * 1024;
const MAX_EVENTS_PER_PAGE: i64 = 1000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateThread {
    agent: String,
    #[serde(default)]
    metadata: Option<Value>,
}

pub async fn create(
    State(state): State<AppState>,
    Caller(owner): Caller,
    JsonBody(body): JsonBody<CreateThread>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    if state.registry.agent(&body.agent).is_none() {
        return Err(ApiError::Unprocessable {
            code: "UnknownAgent",
            message: format!("unknown agent {:?}", body.agent),
        });
    }
    let metadata = match body.metadata {
        None | Some(Value::Null) => json!({}),
        Some(m @ Value::Object(_)) if !m.to_string().contains("\\u0000") => m,
        Some(Value::Object(_)) => {
            return Err(ApiError::BadRequest(
                "metadata must not contain NUL characters".into(),
            ))
        }
        Some(_) => return Err(ApiError::BadRequest("metadata must be an object".into())),
    };
    let thread = state
        .store
        .create_thread(&owner, &body.agent, &metadata)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "id": thread.id, "agent": thread.agent, "status": thread.status })),
    ))
}

pub async fn get(
    State(state): State<AppState>,
    Caller(owner): Caller,
    PathText(id): PathText,
) -> Result<Json<ThreadView>, ApiError> {
    let thread: ThreadId = parse_id(&id, "thread")?;
    Ok(Json(state.store.get_thread(thread, &owner).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostMessage {
    content: String,
}

pub async fn post_message(
    State(state): State<AppState>,
    Caller(owner): Caller,
    PathText(id): PathText,
    JsonBody(body): JsonBody<PostMessage>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let thread: ThreadId = parse_id(&id, "thread")?;
    if body.content.trim().is_empty() {
        return Err(ApiError::BadRequest("content must not be empty".into()));
    }
    if body.content.contains('\0') {
        return Err(ApiError::BadRequest(
            "content must not contain NUL characters".into(),
        ));
    }
    if body.content.len() > MAX_CONTENT_BYTES {
        return Err(ApiError::BadRequest(format!(
            "content is longer than {MAX_CONTENT_BYTES} bytes"
        )));
    }
    let started = state.store.start_run(thread, &owner, &body.content).await?;
    state.relay.publish(&started.outbox).await;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "runId": started.run_id })),
    ))
}

pub async fn list_messages(
    State(state): State<AppState>,
    Caller(owner): Caller,
    PathText(id): PathText,
) -> Result<Json<Vec<MessageView>>, ApiError> {
    let thread: ThreadId = parse_id(&id, "thread")?;
    Ok(Json(state.store.list_messages(thread, &owner).await?))
}

#[derive(Deserialize)]
pub struct EventsQuery {
    after: Option<String>,
}

pub async fn list_events(
    State(state): State<AppState>,
    Caller(owner): Caller,
    PathText(id): PathText,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Result<Json<Vec<EventView>>, ApiError> {
    let thread: ThreadId = parse_id(&id, "thread")?;
    let after = match query.after.as_deref() {
        None | Some("") => 0,
        Some(text) => text.parse::<i64>().map_err(|_| {
            ApiError::BadRequest(format!("after must be an event id, not {text:?}"))
        })?,
    };
    Ok(Json(
        state
            .store
            .list_events(thread, &owner, after, MAX_EVENTS_PER_PAGE)
            .await?,
    ))
}

/// Stops the thread's current run tree.
pub async fn stop(
    State(state): State<AppState>,
    Caller(owner): Caller,
    PathText(id): PathText,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let thread: ThreadId = parse_id(&id, "thread")?;
    let stopped = state.store.stop_thread(thread, &owner).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "stopped": stopped }))))
}
