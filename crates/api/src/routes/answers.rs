//! Replies to open requests: approve, reject, and the webhook-facing
//! respond. Who answered is the key's owner, never a field of the body.

use agentenkit_core::reply::Verdict;
use agentenkit_core::{Owner, RunId, ThreadId, ToolCallId};
use agentenkit_store::{AnswerTarget, PendingInput};
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
    let verdict = Verdict::Approve {
        payload: body.payload,
    };
    deliver_to_run(&state, &owner, &body.run_id, &body.tool_call_id, verdict).await
}

pub async fn reject(
    State(state): State<AppState>,
    Caller(owner): Caller,
    JsonBody(body): JsonBody<Reject>,
) -> Result<Json<Delivery>, ApiError> {
    let verdict = Verdict::Reject {
        reason: body.reason,
    };
    deliver_to_run(&state, &owner, &body.run_id, &body.tool_call_id, verdict).await
}

/// Answers to a question set, resolved on the server against the stored
/// set (omitted questions take their defaults).
pub async fn answer(
    State(state): State<AppState>,
    Caller(owner): Caller,
    JsonBody(body): JsonBody<Answer>,
) -> Result<Json<Delivery>, ApiError> {
    let verdict = Verdict::Answer {
        answers: body.answers,
    };
    deliver_to_run(&state, &owner, &body.run_id, &body.tool_call_id, verdict).await
}

/// A question set left unanswered: the defaults, persisted as rejected.
pub async fn skip(
    State(state): State<AppState>,
    Caller(owner): Caller,
    JsonBody(body): JsonBody<Skip>,
) -> Result<Json<Delivery>, ApiError> {
    deliver_to_run(
        &state,
        &owner,
        &body.run_id,
        &body.tool_call_id,
        Verdict::Skip,
    )
    .await
}

pub async fn respond(
    State(state): State<AppState>,
    Caller(owner): Caller,
    JsonBody(body): JsonBody<Respond>,
) -> Result<Json<Delivery>, ApiError> {
    let thread: ThreadId = parse_id(&body.thread_id, "tool call")?;
    let verdict = Verdict::from_respond(body.approved, body.payload);
    deliver(
        &state,
        &owner,
        AnswerTarget::Thread(thread),
        &body.tool_call_id,
        verdict,
    )
    .await
}

/// approve / reject / answer / skip: the reply is addressed by run.
async fn deliver_to_run(
    state: &AppState,
    owner: &Owner,
    run_id: &str,
    call: &str,
    verdict: Verdict,
) -> Result<Json<Delivery>, ApiError> {
    let run: RunId = parse_id(run_id, "tool call")?;
    deliver(state, owner, AnswerTarget::Run(run), call, verdict).await
}

async fn deliver(
    state: &AppState,
    owner: &Owner,
    target: AnswerTarget,
    call: &str,
    verdict: Verdict,
) -> Result<Json<Delivery>, ApiError> {
    if call.is_empty() {
        return Err(ApiError::BadRequest("toolCallId must not be empty".into()));
    }
    let call = ToolCallId(call.to_owned());
    let answered = state.store.answer(owner, target, &call, &verdict).await?;
    state.relay.publish(&answered.outbox).await;
    let outcome = if answered.delivered {
        "delivered"
    } else {
        "refused"
    };
    ::metrics::counter!(agentenkit_runtime::metrics::ANSWERS, "outcome" => outcome).increment(1);
    Ok(Json(Delivery {
        delivered: answered.delivered,
        error: answered.error,
    }))
}

/// Every open request of the caller's threads.
pub async fn inbox(
    State(state): State<AppState>,
    Caller(owner): Caller,
) -> Result<Json<Vec<PendingInput>>, ApiError> {
    crate::reclaim_on_connect(&state, agentenkit_store::Scope::Owner(owner.clone())).await;
    Ok(Json(state.store.inbox(&owner).await?))
}
