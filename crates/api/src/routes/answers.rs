//! Replies to open requests: approve, reject, and the webhook-facing
//! respond. Who answered is the key's owner, never a field of the body.

use agentenkit_core::{RunId, ThreadId};
use agentenkit_store::{Answered, PendingInput};
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::auth::Caller;
use crate::extract::{parse_id, JsonBody};
use crate::{ApiError, AppState};

#[derive(Debug, Serialize)]
pub struct Delivery {
    delivered: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Approve {
    run_id: String,
    tool_call_id: String,
    #[serde(default)]
    payload: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reject {
    run_id: String,
    tool_call_id: String,
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Answer {
    run_id: String,
    tool_call_id: String,
    answers: Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Skip {
    run_id: String,
    tool_call_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Respond {
    thread_id: String,
    tool_call_id: String,
    approved: bool,
    #[serde(default)]
    payload: Option<Value>,
}

pub async fn approve(
    State(state): State<AppState>,
    Caller(owner): Caller,
    JsonBody(body): JsonBody<Approve>,
) -> Result<Json<Delivery>, ApiError> {
    let run = run_id(&body.run_id)?;
    let answered = state
        .replies()
        .approve(&owner, run, &body.tool_call_id, body.payload)
        .await?;
    Ok(delivery(answered))
}

pub async fn reject(
    State(state): State<AppState>,
    Caller(owner): Caller,
    JsonBody(body): JsonBody<Reject>,
) -> Result<Json<Delivery>, ApiError> {
    let run = run_id(&body.run_id)?;
    let answered = state
        .replies()
        .reject(&owner, run, &body.tool_call_id, body.reason)
        .await?;
    Ok(delivery(answered))
}

/// Answers to a question set, resolved on the server against the stored
/// set (omitted questions take their defaults).
pub async fn answer(
    State(state): State<AppState>,
    Caller(owner): Caller,
    JsonBody(body): JsonBody<Answer>,
) -> Result<Json<Delivery>, ApiError> {
    let run = run_id(&body.run_id)?;
    let answered = state
        .replies()
        .answer(&owner, run, &body.tool_call_id, body.answers)
        .await?;
    Ok(delivery(answered))
}

/// A question set left unanswered: the defaults, persisted as rejected.
pub async fn skip(
    State(state): State<AppState>,
    Caller(owner): Caller,
    JsonBody(body): JsonBody<Skip>,
) -> Result<Json<Delivery>, ApiError> {
    let run = run_id(&body.run_id)?;
    let answered = state
        .replies()
        .skip(&owner, run, &body.tool_call_id)
        .await?;
    Ok(delivery(answered))
}

pub async fn respond(
    State(state): State<AppState>,
    Caller(owner): Caller,
    JsonBody(body): JsonBody<Respond>,
) -> Result<Json<Delivery>, ApiError> {
    let thread: ThreadId = parse_id(&body.thread_id, "tool call")?;
    let answered = state
        .replies()
        .respond(
            &owner,
            thread,
            &body.tool_call_id,
            body.approved,
            body.payload,
        )
        .await?;
    Ok(delivery(answered))
}

/// A malformed run id names no call of the caller's: 404 like an unknown one.
fn run_id(text: &str) -> Result<RunId, ApiError> {
    parse_id(text, "tool call")
}

fn delivery(answered: Answered) -> Json<Delivery> {
    Json(Delivery {
        delivered: answered.delivered,
        error: answered.error,
    })
}

/// Every open request of the caller's threads.
pub async fn inbox(
    State(state): State<AppState>,
    Caller(owner): Caller,
) -> Result<Json<Vec<PendingInput>>, ApiError> {
    crate::reclaim_on_connect(&state, agentenkit_store::Scope::Owner(owner.clone())).await;
    Ok(Json(state.store.inbox(&owner).await?))
}
