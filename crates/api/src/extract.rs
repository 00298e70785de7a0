//! A JSON body extractor whose every rejection is an [`ApiError`]: 413 over
//! the size limit, 400 with serde's message for malformed or mistyped JSON.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::ApiError;

pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge
            } else {
                ApiError::BadRequest(rejection.body_text())
            }
        })?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::BadRequest(format!("invalid JSON body: {e}")))
    }
}

/// Parses a path id; a malformed id names nothing, so it is a 404 like an
/// unknown one.
pub fn parse_id<T: std::str::FromStr>(text: &str, what: &str) -> Result<T, ApiError> {
    text.parse()
        .map_err(|_| ApiError::NotFound(format!("{what} not found")))
}
