//! One error type for every handler: 4xx with a clear message (not logged
//! as errors), 5xx with a generic body (logged once, with the cause).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

#[derive(Debug)]
pub enum ApiError {
    BadRequest(String),
    Unauthorized,
    /// 403: the key lacks the scope named.
    Forbidden {
        missing: agentenkit_core::KeyScope,
    },
    /// 403: a multi-party approval from a key in none of its groups.
    NotAnApprover(Vec<String>),
    NotFound(String),
    MethodNotAllowed(String),
    Conflict {
        code: &'static str,
        message: String,
    },
    PayloadTooLarge,
    Unprocessable {
        code: &'static str,
        message: String,
    },
    /// 422 with the issues, each `{path, message}`.
    InvalidAnswers(Vec<agentenkit_core::questions::Issue>),
    /// 422 with the issues of edited arguments, each `{path, message}`.
    InvalidArguments(Vec<agentenkit_core::questions::Issue>),
    /// 409 with the runs whose open requests share the call id.
    AmbiguousToolCall(Vec<agentenkit_core::RunId>),
    /// 408: the request's body did not arrive within the API's deadline.
    RequestTimeout(std::time::Duration),
    /// 429: a per-owner limit (open streams) is reached.
    TooManyRequests(String),
    /// 503 with `Retry-After`: a dependency is unreachable or saturated.
    Unavailable(String),
    Internal(String),
}

impl ApiError {
    fn parts(&self) -> (StatusCode, &'static str, String) {
        match self {
            ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, "BadRequest", m.clone()),
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "a valid `Authorization: Bearer <key>` header is required".into(),
            ),
            ApiError::Forbidden { missing } => (
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!("this key lacks the scope {missing}; nothing was done"),
            ),
            ApiError::NotAnApprover(groups) => (
                StatusCode::FORBIDDEN,
                "NotAnApprover",
                format!(
                    "only a key in one of the groups {} may approve this call; nothing was recorded",
                    groups.join(", ")
                ),
            ),
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, "NotFound", m.clone()),
            ApiError::MethodNotAllowed(m) => {
                (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", m.clone())
            }
            ApiError::Conflict { code, message } => (StatusCode::CONFLICT, code, message.clone()),
            ApiError::PayloadTooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "PayloadTooLarge",
                format!("the body is larger than {} bytes", crate::MAX_BODY_BYTES),
            ),
            ApiError::Unprocessable { code, message } => {
                (StatusCode::UNPROCESSABLE_ENTITY, code, message.clone())
            }
            ApiError::InvalidAnswers(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "InvalidAnswers",
                "the answers do not fit the question set; nothing was recorded".into(),
            ),
            ApiError::InvalidArguments(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "InvalidArguments",
                "the edited arguments do not fit the tool's input schema; nothing was recorded"
                    .into(),
            ),
            ApiError::AmbiguousToolCall(runs) => (
                StatusCode::CONFLICT,
                "AmbiguousToolCallId",
                format!(
                    "{} open requests of this thread have this toolCallId (runs {}); answer one by runId through /agent/tool-call/*",
                    runs.len(),
                    runs.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
                ),
            ),
            ApiError::RequestTimeout(deadline) => (
                StatusCode::REQUEST_TIMEOUT,
                "RequestTimeout",
                format!(
                    "the request's body did not arrive within {} ms; nothing was done",
                    deadline.as_millis()
                ),
            ),
            ApiError::TooManyRequests(m) => {
                (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests", m.clone())
            }
            ApiError::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, "Unavailable", m.clone()),
            ApiError::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "Internal",
                "internal error".into(),
            ),
        }
    }
}

impl ApiError {
    /// The status and JSON body of this error: what a response carries, and
    /// what a batch item's result holds.
    pub(crate) fn status_and_body(&self) -> (StatusCode, serde_json::Value) {
        let (status, code, message) = self.parts();
        let mut body = json!({ "error": code, "message": message });
        if let ApiError::InvalidAnswers(issues) | ApiError::InvalidArguments(issues) = self {
            // The checkers stop one past the cap, so a body stays small
            // whatever the request held.
            let (shown, more) = agentenkit_core::questions::shown_issues(issues);
            body["issues"] = json!(shown);
            if more {
                body["moreIssues"] = json!(true);
            }
        }
        if let ApiError::AmbiguousToolCall(runs) = self {
            body["runIds"] = json!(runs);
        }
        if let ApiError::Forbidden { missing } = self {
            body["missingScope"] = json!(missing.as_str());
        }
        (status, body)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(cause) = &self {
            tracing::error!(%cause, "request failed");
        }
        let (status, body) = self.status_and_body();
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        match self {
            ApiError::Unauthorized => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"agentenkit\""),
                );
            }
            ApiError::Unavailable(_)
            | ApiError::TooManyRequests(_)
            | ApiError::Conflict {
                code: "IdempotencyKeyInUse",
                ..
            } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}

impl From<agentenkit_runtime::Error> for ApiError {
    fn from(e: agentenkit_runtime::Error) -> Self {
        use agentenkit_runtime::Error as E;
        match e {
            E::Store(e) => e.into(),
            E::InvalidInput(message) => ApiError::BadRequest(message),
            E::VersionUnavailable(message) => ApiError::Unavailable(message),
            E::UnknownAgent(name) => ApiError::Unprocessable {
                code: "UnknownAgent",
                message: format!("unknown agent {name:?}"),
            },
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<agentenkit_store::Error> for ApiError {
    fn from(e: agentenkit_store::Error) -> Self {
        use agentenkit_store::Error as E;
        if e.is_unavailable() || e.is_conflict() {
            tracing::warn!(error = %e, "the database is unavailable; answering 503");
            return ApiError::Unavailable(
                "the database is busy or unreachable; try again (replies and stops are safe to repeat)".into(),
            );
        }
        match e {
            E::NotFound { what, .. } => ApiError::NotFound(format!("{what} not found")),
            E::RunActive { run_id, .. } => ApiError::Conflict {
                code: "RunActive",
                message: format!(
                    "the thread has an active run {run_id}; wait for it to finish or stop it"
                ),
            },
            E::SideEffects { run_id, tool } => ApiError::Conflict {
                code: "SideEffects",
                message: format!(
                    "run {run_id} already called {tool}, which is not read-only: \
                     a rollback would pretend its effect did not happen; interrupt instead"
                ),
            },
            E::NotATurn { message_id } => ApiError::Conflict {
                code: "NotAUserMessage",
                message: format!("message {message_id} is not a user message of a turn"),
            },
            E::SubAgentMessage { message_id } => ApiError::Conflict {
                code: "SubAgentMessage",
                message: format!(
                    "message {message_id} is a sub-agent's; fork at a message of the thread's conversation"
                ),
            },
            E::ReplyMismatch { kind } => ApiError::Conflict {
                code: "HumanReplyMismatchError",
                message: format!(
                    "this call waits for approve or reject ({kind}), not for answers; nothing was recorded"
                ),
            },
            E::InvalidAnswers(issues) => ApiError::InvalidAnswers(issues),
            E::InvalidArguments(issues) => ApiError::InvalidArguments(issues),
            E::CannotEdit { kind } => ApiError::Conflict {
                code: "CannotEditArguments",
                message: format!(
                    "only an approval's arguments can be edited; this call is a {kind}; nothing was recorded"
                ),
            },
            E::ArgumentsHashMismatch { expected, actual } => ApiError::Conflict {
                code: "ArgumentsHashMismatch",
                message: format!(
                    "the call's arguments hash to {actual}, not {expected}: they are not what was shown; nothing was recorded"
                ),
            },
            E::AmbiguousToolCall { run_ids, .. } => ApiError::AmbiguousToolCall(run_ids),
            E::Forbidden { missing } => ApiError::Forbidden { missing },
            E::NotAnApprover { groups } => ApiError::NotAnApprover(groups),
            E::IdempotencyKeyReused { .. } => ApiError::Unprocessable {
                code: "IdempotencyKeyReused",
                message: "this Idempotency-Key was used with another request body; use a new key"
                    .into(),
            },
            E::IdempotencyKeyTakenOver { .. } => ApiError::Conflict {
                code: "IdempotencyKeyTakenOver",
                message: "this request held its Idempotency-Key so long that a retry took it over; \
                          the retry's response stands"
                    .into(),
            },
            other => ApiError::Internal(other.to_string()),
        }
    }
}
