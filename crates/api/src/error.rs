//! One error type for every handler: 4xx with a clear message (not logged
//! as errors), 5xx with a generic body (logged once, with the cause).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

#[derive(Debug)]
pub enum ApiError {
    BadRequest(String),
    Unauthorized,
    NotFound(String),
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
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, "NotFound", m.clone()),
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
            ApiError::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, "Unavailable", m.clone()),
            ApiError::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "Internal",
                "internal error".into(),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(cause) = &self {
            tracing::error!(%cause, "request failed");
        }
        let (status, code, message) = self.parts();
        let mut body = json!({ "error": code, "message": message });
        if let ApiError::InvalidAnswers(issues) = &self {
            body["issues"] = json!(issues);
        }
        (status, Json(body)).into_response()
    }
}

impl From<agentenkit_store::Error> for ApiError {
    fn from(e: agentenkit_store::Error) -> Self {
        use agentenkit_store::Error as E;
        match e {
            E::NotFound { what, .. } => ApiError::NotFound(format!("{what} not found")),
            E::RunActive { run_id, .. } => ApiError::Conflict {
                code: "RunActive",
                message: format!(
                    "the thread has an active run {run_id}; wait for it to finish or stop it"
                ),
            },
            E::ReplyMismatch { kind } => ApiError::Conflict {
                code: "HumanReplyMismatchError",
                message: format!(
                    "this call waits for approve or reject ({kind}), not for answers; nothing was recorded"
                ),
            },
            E::InvalidAnswers(issues) => ApiError::InvalidAnswers(issues),
            other => ApiError::Internal(other.to_string()),
        }
    }
}
