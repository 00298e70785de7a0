//! Forking a thread: a new thread whose conversation is this one's up to a
//! message, optionally going on with a new one (docs/conversations.md,
//! "Forking a thread").

use agentenkit_core::{RunId, ThreadId, ThreadStatus};
use agentenkit_runtime::trace;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::conversations::{check_content, counted, refuse_delayed_thread};
use crate::auth::{Scoped, ThreadsWrite};
use crate::extract::{parse_id, JsonBody, PathText};
use crate::schemas::ErrorBody;
use crate::{ApiError, AppState};

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ForkThread {
    /// The message the fork's conversation ends with, by its id in
    /// `GET /threads/{id}/messages`; the whole conversation when left out.
    /// A fork at a model's message, or at one of its calls' results, keeps
    /// that whole step.
    #[schema(minimum = 1)]
    at_message_id: Option<i64>,
    /// A message the fork goes on with: not blank, at most 256 KiB (of
    /// UTF-8), no NUL. It joins the run that goes on from the fork point at
    /// its next model call, or starts a turn when none does.
    #[schema(
        min_length = 1,
        max_length = 262144,
        pattern = "^[^\\u0000]*[^\\u0000\\u0009-\\u000d\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000][^\\u0000]*$"
    )]
    content: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForkedThread {
    /// The new thread.
    id: ThreadId,
    agent: String,
    status: ThreadStatus,
    /// The thread it was forked from.
    forked_from: ThreadId,
    /// The run that goes on in the fork: the turn forked in, when it had
    /// not ended at the fork point (its open requests asked again), or
    /// the turn `content` started. Left out when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    run_id: Option<RunId>,
}

/// Forks a thread: a new thread of the same owner and agent whose
/// conversation is this one's up to `atMessageId` (all of it when left
/// out), optionally going on with `content`. No tool that ran before the
/// fork point runs again; a request open at that point (an approval, a
/// question, a job) is asked again in the fork, never carried over as
/// answered. The thread forked is left as it was.
#[utoipa::path(post, path = "/threads/{id}/fork", tag = "threads",
    params(("id" = ThreadId, Path, description = "The thread to fork")),
    request_body = ForkThread,
    responses(
        (status = 201, body = ForkedThread, headers(("Location" = String,
            description = "`/threads/{id}` of the fork"))),
        (status = 400, description = "Malformed JSON, a message id out of range, or blank content", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 404, description = "No such thread of the caller's", body = ErrorBody),
        (status = 409, description = "`SubAgentMessage`: the message is a sub-agent's, not the conversation's", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 422, description = "`UnknownMessage`: `atMessageId` is not in the thread's conversation (never was, or an edit cut it away)", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn fork(
    State(state): State<AppState>,
    Scoped(owner, ..): Scoped<ThreadsWrite>,
    PathText(id): PathText,
    JsonBody(body): JsonBody<ForkThread>,
) -> Result<Response, ApiError> {
    let thread: ThreadId = parse_id(&id, "thread")?;
    if let Some(at) = body.at_message_id {
        if at < 1 {
            return Err(ApiError::BadRequest(
                "atMessageId must be a message id (1 or more)".into(),
            ));
        }
    }
    if let Some(content) = &body.content {
        check_content(content)?;
    }
    refuse_delayed_thread(&state, thread, &owner).await?;
    let trace = trace::current();
    let forked = state
        .store
        .fork_thread(
            thread,
            &owner,
            body.at_message_id,
            body.content.as_deref(),
            trace.as_ref(),
        )
        .await
        .map_err(|e| match e {
            // The body names it: the thread (the path's) was found.
            agentenkit_store::Error::NotFound { what: "message", id } => {
                ApiError::Unprocessable {
                    code: "UnknownMessage",
                    message: format!(
                        "message {id} is not in the thread's conversation (never, or cut away by an edit)"
                    ),
                }
            }
            e => e.into(),
        })?;
    counted("forked");
    let location = format!("/threads/{}", forked.thread.id);
    let body = ForkedThread {
        id: forked.thread.id,
        agent: forked.thread.agent,
        status: forked.thread.status,
        forked_from: thread,
        run_id: forked.run_id,
    };
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    if let Ok(location) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}
