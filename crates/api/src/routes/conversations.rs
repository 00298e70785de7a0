//! Talking to a thread: a message starts a turn, or, while a run is
//! active, waits behind it, interrupts it or rolls it back (`onActive`);
//! an edit cuts the thread back to a past user message and goes on from
//! there (docs/conversations.md).

use agentenkit_core::canonical::arguments_hash;
use agentenkit_core::conversation::OnActive;
use agentenkit_core::{Owner, RunId, ThreadId};
use agentenkit_runtime::trace;
use agentenkit_store::{Arrival, Once, PostedTurn, Sent};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use crate::auth::{Scoped, ThreadsWrite};
use crate::extract::{parse_id, JsonBody, PathPair, PathText};
use crate::schemas::ErrorBody;
use crate::{ApiError, AppState};

/// Longest user message accepted (characters are bytes here; the body
/// limit bounds it anyway).
const MAX_CONTENT_BYTES: usize = 256 * 1024;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PostMessage {
    /// The user's message: not blank, at most 256 KiB (of UTF-8), no NUL.
    #[schema(
        min_length = 1,
        max_length = 262144,
        // Something besides white space (Rust's `char::is_whitespace`).
        pattern = "^[^\\u0000]*[^\\u0000\\u0009-\\u000d\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000][^\\u0000]*$"
    )]
    content: String,
    /// What the message does while a run of the thread is active; default
    /// the agent's `on_active`, else `reject`.
    #[serde(default)]
    on_active: Option<OnActive>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartedRun {
    /// The run that answers the message (when queued, the run it will
    /// start).
    run_id: RunId,
    /// The message waits for the active run to end (`enqueue`). Left out
    /// when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    queued: bool,
    /// The message joins the active run `runId` at its next model call
    /// (`steer`). Left out when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    steered: bool,
    /// The runs the message stopped (`interrupt`, `rollback`, an edit).
    /// Left out when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    interrupted: Vec<RunId>,
}

impl From<PostedTurn> for StartedRun {
    fn from(posted: PostedTurn) -> Self {
        StartedRun {
            run_id: posted.run_id,
            queued: posted.queued,
            steered: posted.steered,
            interrupted: posted.interrupted,
        }
    }
}

/// Starts a turn: a run that answers the message. While a run of the
/// thread is active, `onActive` says what happens: `reject` (409),
/// `enqueue` (the turn starts when that run ends), `steer` (the message
/// joins that run at its next model call), `interrupt` (that run stops;
/// the turn starts) or `rollback` (that run stops and leaves the
/// conversation; 409 `SideEffects` when a tool that is not read-only ran
/// in it).
#[utoipa::path(post, path = "/threads/{id}/messages", tag = "threads",
    params(("id" = ThreadId, Path, description = "The thread"),
        ("Idempotency-Key" = Option<crate::schemas::IdempotencyKeyText>, Header,
         description = "1 to 255 visible ASCII characters, kept 24 hours: the same key with the same message gets what the first became (nothing is queued, steered or interrupted twice)")),
    request_body = PostMessage,
    responses(
        (status = 202, body = StartedRun, headers(("Idempotent-Replayed" = String,
            description = "`true` when this is what an earlier message with the key became"))),
        (status = 400, description = "Malformed JSON or blank content", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 404, description = "No such thread of the caller's", body = ErrorBody),
        (status = 409, description = "`RunActive`: a run is active or waiting (`onActive: reject`); `SideEffects`: a rollback of a run that ran a tool that is not read-only", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 422, description = "`IdempotencyKeyReused`: the key was used with another message", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn post_message(
    State(state): State<AppState>,
    Scoped(owner, ..): Scoped<ThreadsWrite>,
    PathText(id): PathText,
    headers: HeaderMap,
    JsonBody(body): JsonBody<PostMessage>,
) -> Result<Response, ApiError> {
    let thread: ThreadId = parse_id(&id, "thread")?;
    check_content(&body.content)?;
    let key = super::decisions::idempotency_key(&headers)?
        .map(|key| format!("POST /threads/{thread}/messages {key}"));
    let hash = arguments_hash(&json!({ "content": body.content, "onActive": body.on_active }));
    let registry = state.registry();
    let (agent, on_active) = what_it_does(&state, thread, &owner, body.on_active).await?;
    let trace = trace::current();
    let read_only;
    let arrival = match on_active {
        // With a key, a retry must find what the first became.
        OnActive::Reject if key.is_some() => Arrival::Reject,
        OnActive::Reject => {
            let started = state
                .store
                .start_run(thread, &owner, &body.content, trace.as_ref())
                .await?;
            counted("started");
            return Ok(accepted(StartedRun {
                run_id: started.run_id,
                queued: false,
                steered: false,
                interrupted: Vec::new(),
            }));
        }
        OnActive::Enqueue => Arrival::Enqueue,
        OnActive::Steer => Arrival::Steer,
        OnActive::Interrupt => Arrival::Interrupt,
        OnActive::Rollback => {
            read_only = registry.read_only_tools(agent.as_deref().unwrap_or_default());
            Arrival::Rollback {
                read_only: &read_only,
            }
        }
    };
    let sent = sent(&state, &body.content, trace.as_ref(), key.as_deref(), &hash);
    let posted = state.store.send_turn(thread, &owner, sent, arrival).await?;
    if posted.replayed {
        return Ok(replayed(posted));
    }
    counted(
        match (&arrival, posted.queued, posted.interrupted.is_empty()) {
            _ if posted.steered => "steered",
            (_, true, _) => "queued",
            (_, false, true) => "started",
            (Arrival::Rollback { .. }, false, false) => "rolled_back",
            (_, false, false) => "interrupted",
        },
    );
    Ok(accepted(posted.into()))
}

/// The thread's agent, when it is read, and what the message does to a run
/// still active: what it says, else its agent's `on_active`, else
/// `reject`. Only a process that could not list an MCP server, or whose
/// agents take messages to a busy thread by default, or a rollback, reads
/// the thread's agent first: every other turn costs what it did.
async fn what_it_does(
    state: &AppState,
    thread: ThreadId,
    owner: &Owner,
    said: Option<OnActive>,
) -> Result<(Option<String>, OnActive), ApiError> {
    let registry = state.registry();
    let needs_agent = !registry.delayed_agents().is_empty()
        || matches!(said, Some(OnActive::Rollback))
        || (said.is_none() && registry.any_on_active());
    let agent = match needs_agent {
        true => Some(state.store.thread_agent(thread, owner).await?),
        false => None,
    };
    if let Some(agent) = &agent {
        state.refuse_delayed(agent)?;
    }
    let on_active = said.unwrap_or_else(|| {
        agent
            .as_deref()
            .and_then(|agent| registry.agent(agent))
            .map_or(OnActive::Reject, |agent| agent.on_active)
    });
    Ok((agent, on_active))
}

/// What the person sent, with its `Idempotency-Key` (`key`, as the route
/// names it, and `hash`, the request's) when it came with one.
fn sent<'a>(
    state: &AppState,
    content: &'a str,
    trace: Option<&'a agentenkit_core::TraceContext>,
    key: Option<&'a str>,
    hash: &'a str,
) -> Sent<'a> {
    Sent {
        content,
        trace,
        once: key.map(|key| Once {
            key,
            request_hash: hash,
            keep_for: state.idempotency.keep_for,
        }),
    }
}

/// What an earlier message with the same `Idempotency-Key` became.
fn replayed(posted: PostedTurn) -> Response {
    let mut response = accepted(posted.into());
    response
        .headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    response
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EditMessage {
    /// The message as it should have been: not blank, at most 256 KiB (of
    /// UTF-8), no NUL.
    #[schema(
        min_length = 1,
        max_length = 262144,
        pattern = "^[^\\u0000]*[^\\u0000\\u0009-\\u000d\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000][^\\u0000]*$"
    )]
    content: String,
}

/// Edits a past user message: the thread is cut back to before it (an
/// active run is interrupted first; the turns from that message on leave
/// the conversation, their open requests are no longer current) and a new
/// turn starts from the edited text.
#[utoipa::path(post, path = "/threads/{id}/messages/{messageId}/edit", tag = "threads",
    params(
        ("id" = ThreadId, Path, description = "The thread"),
        ("messageId" = i64, Path, minimum = 1, description = "A user message, by its id in `GET /threads/{id}/messages`"),
        ("Idempotency-Key" = Option<crate::schemas::IdempotencyKeyText>, Header,
         description = "1 to 255 visible ASCII characters, kept 24 hours: the same key with the same edit gets what the first became"),
    ),
    request_body = EditMessage,
    responses(
        (status = 202, body = StartedRun, headers(("Idempotent-Replayed" = String,
            description = "`true` when this is what an earlier edit with the key became"))),
        (status = 400, description = "Malformed JSON or blank content", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "`Forbidden`: the key lacks the scope `missingScope` names", body = ErrorBody),
        (status = 404, description = "No such thread of the caller's, or no such message in its conversation", body = ErrorBody),
        (status = 409, description = "`NotAUserMessage`: the message is not a turn's user message", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 422, description = "`IdempotencyKeyReused`: the key was used with another edit", body = ErrorBody),
        (status = 500, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn edit_message(
    State(state): State<AppState>,
    Scoped(owner, ..): Scoped<ThreadsWrite>,
    PathPair(id, message): PathPair,
    headers: HeaderMap,
    JsonBody(body): JsonBody<EditMessage>,
) -> Result<Response, ApiError> {
    let thread: ThreadId = parse_id(&id, "thread")?;
    let message: i64 = parse_id(&message, "message")?;
    check_content(&body.content)?;
    let key = super::decisions::idempotency_key(&headers)?
        .map(|key| format!("POST /threads/{thread}/messages/{message}/edit {key}"));
    let hash = arguments_hash(&json!({ "content": body.content }));
    refuse_delayed_thread(&state, thread, &owner).await?;
    let trace = trace::current();
    let sent = sent(&state, &body.content, trace.as_ref(), key.as_deref(), &hash);
    let posted = state.store.edit_turn(thread, &owner, message, sent).await?;
    if posted.replayed {
        return Ok(replayed(posted));
    }
    counted("edited");
    Ok(accepted(posted.into()))
}

/// Counts a message by what it did.
pub(super) fn counted(outcome: &'static str) {
    ::metrics::counter!(agentenkit_runtime::metrics::TURN_MESSAGES, "outcome" => outcome)
        .increment(1);
}

fn accepted(started: StartedRun) -> Response {
    (StatusCode::ACCEPTED, Json(started)).into_response()
}

/// A 503 when the thread's agent waits for an MCP server this process
/// could not list (read only in such a process).
pub(super) async fn refuse_delayed_thread(
    state: &AppState,
    thread: ThreadId,
    owner: &Owner,
) -> Result<(), ApiError> {
    if !state.registry().delayed_agents().is_empty() {
        let agent = state.store.thread_agent(thread, owner).await?;
        state.refuse_delayed(&agent)?;
    }
    Ok(())
}

/// A user message's text: not blank, no NUL, at most
/// [`MAX_CONTENT_BYTES`].
pub(super) fn check_content(content: &str) -> Result<(), ApiError> {
    if content.trim().is_empty() {
        return Err(ApiError::BadRequest("content must not be empty".into()));
    }
    if content.contains('\0') {
        return Err(ApiError::BadRequest(
            "content must not contain NUL characters".into(),
        ));
    }
    if content.len() > MAX_CONTENT_BYTES {
        return Err(ApiError::BadRequest(format!(
            "content is longer than {MAX_CONTENT_BYTES} bytes"
        )));
    }
    Ok(())
}
