//! The OpenAPI 3.1 document of the API, generated from the handlers'
//! `#[utoipa::path]` attributes and the types they take and return, so it
//! cannot drift from the routes: `routes::router` registers each handler
//! and its description in one call.

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
    /// `BadRequest`, `Unauthorized`, `NotFound`, `MethodNotAllowed`,
    /// `RunActive`, `HumanReplyMismatchError`, `AmbiguousToolCallId`,
    /// `PayloadTooLarge`, `UnknownAgent`, `InvalidAnswers`,
    /// `TooManyRequests`, `Unavailable` or `Internal`.
    pub error: String,
    pub message: String,
    /// With `InvalidAnswers`: every issue found, at once.
    #[schema(nullable = false)]
    pub issues: Option<Vec<agentenkit_core::questions::Issue>>,
    /// With `AmbiguousToolCallId`: the runs whose open requests share the id.
    #[schema(nullable = false)]
    pub run_ids: Option<Vec<agentenkit_core::RunId>>,
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
    components(schemas(ErrorBody, StorableJson, StorableObject, AnswerMap, StreamEvent)),
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

/// The document of this build, for any deployment.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(crate::routes::router().1).unwrap_or(Value::Null);
    if let Some(data) = doc.pointer_mut("/components/schemas/StreamEvent/properties/data") {
        data["contentSchema"] = json!({ "$ref": "#/components/schemas/EventView" });
    }
    doc
}

/// The document a deployment serves at `GET /openapi.json`: this build's,
/// with `agent` of `POST /threads` narrowed to the agents of its file.
pub fn document_for(agents: &[&str]) -> Value {
    let mut doc = document();
    if !agents.is_empty() {
        if let Some(agent) = doc.pointer_mut("/components/schemas/CreateThread/properties/agent") {
            agent["enum"] = json!(agents);
        }
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route of SPEC §9 is in the document with the methods it takes.
    #[test]
    fn the_document_covers_every_route() {
        let doc = document();
        let expected: &[(&str, &[&str])] = &[
            ("/threads", &["post"]),
            ("/threads/{id}", &["get"]),
            ("/threads/{id}/messages", &["get", "post"]),
            ("/threads/{id}/events", &["get"]),
            ("/threads/{id}/stream", &["get"]),
            ("/threads/{id}/stop", &["post"]),
            ("/runs/{id}", &["get"]),
            ("/runs/{id}/journal", &["get"]),
            ("/agent/tool-call/approve", &["post"]),
            ("/agent/tool-call/reject", &["post"]),
            ("/agent/tool-call/answer", &["post"]),
            ("/agent/tool-call/skip", &["post"]),
            ("/agent/hitl/respond", &["post"]),
            ("/agent/inbox", &["get"]),
            ("/agents", &["get"]),
            ("/healthz", &["get"]),
            ("/readyz", &["get"]),
            ("/metrics", &["get"]),
            ("/openapi.json", &["get"]),
        ];
        let json = doc;
        let paths = json["paths"].as_object().unwrap();
        for (path, methods) in expected {
            let item = paths
                .get(*path)
                .unwrap_or_else(|| panic!("{path} is missing"));
            for method in *methods {
                assert!(item.get(*method).is_some(), "{method} {path} is missing");
            }
        }
        assert_eq!(paths.len(), expected.len(), "{:?}", paths.keys());
        assert!(json["openapi"].as_str().unwrap().starts_with("3.1"));
    }

    /// The hand-written schemas survive the trip through utoipa's types.
    #[test]
    fn the_storable_schemas_keep_every_keyword() {
        let json = document();
        let storable = &json["components"]["schemas"]["StorableJson"];
        assert_eq!(storable["anyOf"][0]["pattern"], STORABLE_TEXT);
        assert_eq!(
            storable["anyOf"][3]["$ref"],
            "#/components/schemas/StorableObject"
        );
        let event = &json["components"]["schemas"]["StreamEvent"]["properties"]["data"];
        assert_eq!(
            event["contentSchema"]["$ref"], "#/components/schemas/EventView",
            "{event}"
        );
        let object = &json["components"]["schemas"]["StorableObject"];
        assert_eq!(object["propertyNames"]["pattern"], STORABLE_TEXT);
        assert_eq!(
            object["additionalProperties"]["$ref"],
            "#/components/schemas/StorableJson"
        );
    }

    #[test]
    fn a_deployment_document_lists_its_agents() {
        let doc = document_for(&["mailer", "scoper"]);
        assert_eq!(
            doc["components"]["schemas"]["CreateThread"]["properties"]["agent"]["enum"],
            json!(["mailer", "scoper"])
        );
        let generic = document_for(&[]);
        assert!(
            generic["components"]["schemas"]["CreateThread"]["properties"]["agent"]
                .get("enum")
                .is_none()
        );
    }

    /// Routes that need a key say so; the probes and the document do not.
    #[test]
    fn security_is_declared_where_a_key_is_needed() {
        let json = document();
        assert_eq!(json["security"], serde_json::json!([{ "bearer": [] }]));
        for open in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
            assert_eq!(
                json["paths"][open]["get"]["security"],
                serde_json::json!([{}]),
                "{open}"
            );
        }
        let create = &json["paths"]["/threads"]["post"]["responses"];
        for status in ["201", "400", "401", "413", "422", "503"] {
            assert!(create.get(status).is_some(), "POST /threads {status}");
        }
    }

    /// Every JSON error answer of every operation points at `ErrorBody`.
    #[test]
    fn every_error_answer_is_an_error_body() {
        let json = document();
        for (path, item) in json["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                for (status, response) in op["responses"].as_object().unwrap() {
                    if status.starts_with('4') || status.starts_with('5') {
                        assert_eq!(
                            response["content"]["application/json"]["schema"]["$ref"],
                            "#/components/schemas/ErrorBody",
                            "{method} {path} {status}"
                        );
                    }
                }
            }
        }
    }
}
