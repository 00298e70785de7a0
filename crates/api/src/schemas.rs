//! What the OpenAPI document shares across routes: the schemas of JSON
//! Postgres can store, of answers and of stream events, every error's
//! body, and the document's head (`ApiDoc`: title, security, tags) that
//! `routes::router` adds each route to.

use serde::Serialize;
use serde_json::{json, Value};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{Modify, OpenApi, PartialSchema, ToSchema};

/// Text Postgres can store: anything but NUL (`\u0000`), which every body
/// is checked for (a 400 names where it was found).
pub const STORABLE_TEXT: &str = "^[^\\u0000]*$";

/// Any JSON value Postgres can store: no NUL in any string or key.
pub struct StorableJson;

impl PartialSchema for StorableJson {
    fn schema() -> RefOr<Schema> {
        built(json!({
            "description": "Any JSON value without a NUL character in a string or a key.",
            "anyOf": [
                { "type": "string", "pattern": STORABLE_TEXT },
                { "type": ["number", "boolean", "null"] },
                { "type": "array", "items": { "$ref": "#/components/schemas/StorableJson" } },
                { "$ref": "#/components/schemas/StorableObject" },
            ]
        }))
    }
}

impl ToSchema for StorableJson {}

/// A JSON object Postgres can store (metadata, payloads).
pub struct StorableObject;

impl PartialSchema for StorableObject {
    fn schema() -> RefOr<Schema> {
        built(json!({
            "type": "object",
            "description": "A JSON object without a NUL character in a string or a key.",
            "propertyNames": { "type": "string", "pattern": STORABLE_TEXT },
            "additionalProperties": { "$ref": "#/components/schemas/StorableJson" },
        }))
    }
}

impl ToSchema for StorableObject {}

/// A tool call id as a request names one (`agentenkit_core::ToolCallId::check`):
/// 1 to 256 characters, none a control character or a bidirectional
/// formatting one.
pub struct ToolCallIdText;

impl PartialSchema for ToolCallIdText {
    fn schema() -> RefOr<Schema> {
        built(json!({
            "type": "string",
            "description": "The model's id of the call: 1 to 256 characters, no control or bidirectional formatting character.",
            "minLength": 1,
            "maxLength": agentenkit_core::ToolCallId::MAX_LEN,
            "pattern": TOOL_CALL_ID_PATTERN,
        }))
    }
}

impl ToSchema for ToolCallIdText {}

/// The characters a tool call id may hold: none of Unicode's control
/// characters (Cc) or bidirectional formatting characters.
pub const TOOL_CALL_ID_PATTERN: &str =
    "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u202A-\\u202E\\u2066-\\u2069]*$";

/// A call's `argumentsHash`: SHA-256 of its arguments in RFC 8785
/// canonical form, lowercase hex.
pub struct ArgumentsHash;

impl PartialSchema for ArgumentsHash {
    fn schema() -> RefOr<Schema> {
        built(json!({
            "type": "string",
            "description": "SHA-256 of the call's arguments in RFC 8785 (JCS) canonical form, as 64 lowercase hex digits: what the request showed as argumentsHash.",
            "pattern": "^[0-9a-f]{64}$",
        }))
    }
}

impl ToSchema for ArgumentsHash {}

/// An `Idempotency-Key` header: 1 to 255 visible ASCII characters.
pub struct IdempotencyKeyText;

impl PartialSchema for IdempotencyKeyText {
    fn schema() -> RefOr<Schema> {
        built(json!({
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "pattern": "^[\\x21-\\x7E]{1,255}$",
        }))
    }
}

impl ToSchema for IdempotencyKeyText {}

/// An `argumentsHash` a request sent: 64 lowercase hex digits, else 400.
pub fn checked_hash(hash: Option<String>) -> Result<Option<String>, crate::ApiError> {
    match hash {
        Some(text)
            if text.len() != 64
                || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
        {
            Err(crate::ApiError::BadRequest(format!(
                "argumentsHash must be 64 lowercase hex digits (SHA-256), not {:?}",
                text.chars().take(80).collect::<String>()
            )))
        }
        other => Ok(other),
    }
}

/// Answers to a question set: question id → the chosen values.
pub struct AnswerMap;

impl PartialSchema for AnswerMap {
    fn schema() -> RefOr<Schema> {
        built(json!({
            "type": "object",
            "description": "Question id → the chosen values; an omitted question takes its defaults, an empty array is an explicit \"none\".",
            "propertyNames": { "type": "string", "pattern": STORABLE_TEXT },
            "additionalProperties": {
                "type": "array",
                "items": { "type": "string", "pattern": STORABLE_TEXT },
            },
        }))
    }
}

impl ToSchema for AnswerMap {}

/// One event of `GET /threads/{id}/stream`, as an SSE client parses it.
pub struct StreamEvent;

impl PartialSchema for StreamEvent {
    fn schema() -> RefOr<Schema> {
        built(json!({
            "type": "object",
            "description": "One Server-Sent Event: `id` is the event id, `event` its type, `data` the event as JSON text.",
            "required": ["id", "event", "data"],
            "properties": {
                "id": { "type": "string", "pattern": "^[0-9]+$" },
                "event": { "$ref": "#/components/schemas/EventType" },
                // `contentSchema` is added by `document` (utoipa's types
                // have no place for it).
                "data": { "type": "string", "contentMediaType": "application/json" },
            },
        }))
    }
}

impl ToSchema for StreamEvent {}

/// A schema written as JSON (the builders cannot say everything these
/// say); the unit tests read each one back.
fn built(schema: Value) -> RefOr<Schema> {
    serde_json::from_value(schema).expect("a constant schema")
}

/// Every error answer: a stable code, a message for people, and for some
/// codes the details a client acts on.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// `BadRequest`, `Unauthorized`, `Forbidden`, `NotFound`, `MethodNotAllowed`,
    /// `RunActive`, `HumanReplyMismatchError`, `AmbiguousToolCallId`,
    /// `PayloadTooLarge`, `UnknownAgent`, `InvalidAnswers`, `RequestTimeout`,
    /// `TooManyRequests`, `Unavailable` or `Internal`.
    pub error: String,
    pub message: String,
    /// With `InvalidAnswers`: every issue found, at once.
    #[schema(nullable = false)]
    pub issues: Option<Vec<agentenkit_core::questions::Issue>>,
    /// With `AmbiguousToolCallId`: the runs whose open requests share the id.
    #[schema(nullable = false)]
    pub run_ids: Option<Vec<agentenkit_core::RunId>>,
    /// With `Forbidden`: the scope the key lacks (`read`,
    /// `respond:approvals`, `respond:questions`, `settle:jobs`,
    /// `threads:write` or `admin`).
    #[schema(nullable = false)]
    pub missing_scope: Option<String>,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "agentenkit",
        description = "A durable agent runtime whose runs stop and wait for a person. \
            Every route but the health probes, `/metrics` and this document needs \
            `Authorization: Bearer <key>`; another owner's thread, run or tool call \
            is a 404, never revealed."
    ),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    components(schemas(ErrorBody, StorableJson, StorableObject, AnswerMap, StreamEvent, ToolCallIdText, IdempotencyKeyText)),
    tags(
        (name = "threads", description = "Threads, their turns and what happened in them"),
        (name = "runs", description = "One run and its journal"),
        (name = "replies", description = "Answers to open requests: approvals, question sets, jobs"),
        (name = "agents", description = "The agents of the deployment's agent file"),
        (name = "operations", description = "Probes, metrics and this document"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A key of `AGENTENKIT_API_KEYS`; its owner owns what it creates.",
                    ))
                    .build(),
            ),
        );
    }
}
