//! Replies to open requests: approve, reject, and the webhook-facing
//! respond. Who answered is the key's owner, never a field of the body.

use agentenkit_core::{RunId, ThreadId};
use agentenkit_runtime::replies::Decision;
use agentenkit_store::Answered;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::auth::{Approvals, Caller, Questions, Responder};
use crate::extract::{parse_id, JsonBody};
use crate::schemas::{checked_hash, ErrorBody};
use crate::{ApiError, AppState};

/// What became of a reply. `delivered: false` is not an error of the
/// request: the call was already answered, expired or cancelled, and
/// `error` says which.
#[derive(Debug, Serialize, ToSchema)]
pub struct Delivery {
    delivered: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    error: Option<String>,
    /// For a call that needs several approvals, when this one was counted
    /// and it waits for more: how many it has and needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    approvals: Option<ApprovalCount>,
}

/// Approvals a call has, of those it needs.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalCount {
    given: u32,
    required: u32,
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Approve {
    #[schema(format = Uuid)]
    run_id: String,
    #[schema(value_type = crate::schemas::ToolCallIdText)]
    tool_call_id: String,
    /// Given to the tool (approvals) or returned as the job's result; at
    /// most 256 KiB of JSON.
    #[serde(default, deserialize_with = "crate::free_form::payload")]
    #[schema(value_type = Option<crate::schemas::StorableJson>)]
    payload: Option<Value>,
    /// Edited arguments: the call runs with these instead of the proposed
    /// ones (approvals only; they must fit the tool's input schema, else
    /// 422 and nothing changes; at most 256 KiB of JSON). The model is told
    /// they were edited.
    #[serde(default, deserialize_with = "crate::free_form::arguments")]
    #[schema(value_type = Option<crate::schemas::StorableJson>)]
    arguments: Option<Value>,
    /// A note the model reads with the tool's result.
    #[serde(default)]
    #[schema(pattern = "^[^\\u0000]*$")]
    message: Option<String>,
    /// The `argumentsHash` of the request as it was shown: when the call's
    /// arguments hash otherwise, 409 and nothing changes.
    #[serde(default)]
    #[schema(value_type = Option<crate::schemas::ArgumentsHash>)]
    arguments_hash: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reject {
    #[schema(format = Uuid)]
    run_id: String,
    #[schema(value_type = crate::schemas::ToolCallIdText)]
    tool_call_id: String,
    /// Why: the model reads it.
    #[serde(default)]
    #[schema(pattern = "^[^\\u0000]*$")]
    reason: Option<String>,
    /// As for approve: 409 when the call's arguments hash otherwise.
    #[serde(default)]
    #[schema(value_type = Option<crate::schemas::ArgumentsHash>)]
    arguments_hash: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Answer {
    #[schema(format = Uuid)]
    run_id: String,
    #[schema(value_type = crate::schemas::ToolCallIdText)]
    tool_call_id: String,
    /// At most 256 KiB of JSON.
    #[serde(deserialize_with = "crate::free_form::answers")]
    #[schema(value_type = crate::schemas::AnswerMap)]
    answers: Value,
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Skip {
    #[schema(format = Uuid)]
    run_id: String,
    #[schema(value_type = crate::schemas::ToolCallIdText)]
    tool_call_id: String,
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Respond {
    #[schema(format = Uuid)]
    thread_id: String,
    #[schema(value_type = crate::schemas::ToolCallIdText)]
    tool_call_id: String,
    approved: bool,
    /// Given to the tool (approvals) or returned as the job's result; at
    /// most 256 KiB of JSON.
    #[serde(default, deserialize_with = "crate::free_form::payload")]
    #[schema(value_type = Option<crate::schemas::StorableJson>)]
    payload: Option<Value>,
    /// As for approve: 409 when the call's arguments hash otherwise.
    #[serde(default)]
    #[schema(value_type = Option<crate::schemas::ArgumentsHash>)]
    arguments_hash: Option<String>,
}

/// Approves a call waiting for approval, or settles a job (`payload` is its
/// result). Who answered is the key's owner.
#[utoipa::path(post, path = "/agent/tool-call/approve", tag = "replies",
    request_body = Approve,
    responses(
        (status = 200, body = Delivery),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 404, description = "No open or answered call with these ids of the caller's", body = ErrorBody),
        (status = 409, description = "`HumanReplyMismatchError`: the call takes no reply of this kind; `ArgumentsHashMismatch`: its arguments are not those the `argumentsHash` names; `CannotEditArguments`: edits of a call that is no approval", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 422, description = "`InvalidArguments`: the edited arguments do not fit the tool's input schema, with every issue", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn approve(
    State(state): State<AppState>,
    Responder(caller, _): Responder<Approvals>,
    JsonBody(body): JsonBody<Approve>,
) -> Result<Json<Delivery>, ApiError> {
    decide(&state, &caller, body.decision()?).await
}

/// Rejects a call: the model sees the rejection and the reason.
#[utoipa::path(post, path = "/agent/tool-call/reject", tag = "replies",
    request_body = Reject,
    responses(
        (status = 200, body = Delivery),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 404, description = "No open or answered call with these ids of the caller's", body = ErrorBody),
        (status = 409, description = "`HumanReplyMismatchError`: the call takes no reply of this kind; `ArgumentsHashMismatch`: its arguments are not those the `argumentsHash` names", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn reject(
    State(state): State<AppState>,
    Responder(caller, _): Responder<Approvals>,
    JsonBody(body): JsonBody<Reject>,
) -> Result<Json<Delivery>, ApiError> {
    decide(&state, &caller, body.decision()?).await
}

/// Answers to a question set, resolved on the server against the stored
/// set (omitted questions take their defaults).
#[utoipa::path(post, path = "/agent/tool-call/answer", tag = "replies",
    request_body = Answer,
    responses(
        (status = 200, body = Delivery),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 404, description = "No open or answered call with these ids of the caller's", body = ErrorBody),
        (status = 409, description = "`HumanReplyMismatchError`: the call waits for approve or reject", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 422, description = "`InvalidAnswers`, with every issue", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn answer(
    State(state): State<AppState>,
    Responder(caller, _): Responder<Questions>,
    JsonBody(body): JsonBody<Answer>,
) -> Result<Json<Delivery>, ApiError> {
    decide(&state, &caller, body.decision()?).await
}

/// A question set left unanswered: the defaults, persisted as rejected.
#[utoipa::path(post, path = "/agent/tool-call/skip", tag = "replies",
    request_body = Skip,
    responses(
        (status = 200, body = Delivery),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 404, description = "No open or answered call with these ids of the caller's", body = ErrorBody),
        (status = 409, description = "`HumanReplyMismatchError`: the call waits for approve or reject", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn skip(
    State(state): State<AppState>,
    Responder(caller, _): Responder<Questions>,
    JsonBody(body): JsonBody<Skip>,
) -> Result<Json<Delivery>, ApiError> {
    decide(&state, &caller, body.decision()?).await
}

/// The webhook-facing reply, by thread and call id: `approved` with an
/// optional payload.
#[utoipa::path(post, path = "/agent/hitl/respond", tag = "replies",
    request_body = Respond,
    responses(
        (status = 200, body = Delivery),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 404, description = "No open or answered call with these ids of the caller's", body = ErrorBody),
        (status = 409, description = "`AmbiguousToolCallId`: open requests of several runs share the id (answer by runId), or `HumanReplyMismatchError`", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn respond(
    State(state): State<AppState>,
    Responder(caller, _): Responder<Approvals>,
    JsonBody(body): JsonBody<Respond>,
) -> Result<Json<Delivery>, ApiError> {
    let thread: ThreadId = parse_id(&body.thread_id, "tool call")?;
    let replies = state.replies_of(&caller);
    let owner = caller.owner;
    let answered = match checked_hash(body.arguments_hash)? {
        None => {
            replies
                .respond(
                    &owner,
                    thread,
                    &body.tool_call_id,
                    body.approved,
                    body.payload,
                )
                .await?
        }
        Some(hash) => {
            replies
                .respond_to_hash(
                    &owner,
                    thread,
                    &body.tool_call_id,
                    body.approved,
                    body.payload,
                    &hash,
                )
                .await?
        }
    };
    Ok(delivery(answered))
}

/// A malformed run id names no call of the caller's: 404 like an unknown one.
fn run_id(text: &str) -> Result<RunId, ApiError> {
    parse_id(text, "tool call")
}

fn delivery(answered: Answered) -> Json<Delivery> {
    Json(Delivery::from(answered))
}

impl Delivery {
    /// What a delivered reply answers.
    pub(super) fn delivered() -> Self {
        Delivery {
            delivered: true,
            error: None,
            approvals: None,
        }
    }
}

impl From<Answered> for Delivery {
    fn from(answered: Answered) -> Self {
        Delivery {
            delivered: answered.delivered,
            error: answered.error,
            approvals: answered
                .approvals
                .map(|(given, required)| ApprovalCount { given, required }),
        }
    }
}

/// A decision about one call of one run, as an approve, reject, answer or
/// skip body (or a batch's item) says it.
pub(super) struct Decided {
    pub run: RunId,
    pub call: String,
    pub decision: Decision,
}

async fn decide(
    state: &AppState,
    caller: &Caller,
    decided: Decided,
) -> Result<Json<Delivery>, ApiError> {
    let answered = state
        .replies_of(caller)
        .decide(
            &caller.owner,
            decided.run,
            &decided.call,
            decided.decision,
            None,
        )
        .await?;
    Ok(delivery(answered))
}

impl Approve {
    pub(super) fn decision(self) -> Result<Decided, ApiError> {
        Ok(Decided {
            run: run_id(&self.run_id)?,
            call: self.tool_call_id,
            decision: Decision::Approve(agentenkit_runtime::replies::Approve {
                payload: self.payload,
                arguments: self.arguments,
                message: self.message,
                arguments_hash: checked_hash(self.arguments_hash)?,
            }),
        })
    }
}

impl Reject {
    pub(super) fn decision(self) -> Result<Decided, ApiError> {
        Ok(Decided {
            run: run_id(&self.run_id)?,
            call: self.tool_call_id,
            decision: Decision::Reject(agentenkit_runtime::replies::Reject {
                reason: self.reason,
                arguments_hash: checked_hash(self.arguments_hash)?,
            }),
        })
    }
}

impl Answer {
    pub(super) fn decision(self) -> Result<Decided, ApiError> {
        Ok(Decided {
            run: run_id(&self.run_id)?,
            call: self.tool_call_id,
            decision: Decision::Answer(self.answers),
        })
    }
}

impl Skip {
    pub(super) fn decision(self) -> Result<Decided, ApiError> {
        Ok(Decided {
            run: run_id(&self.run_id)?,
            call: self.tool_call_id,
            decision: Decision::Skip,
        })
    }
}
