//! The OpenAPI 3.1 document of the API, generated from the handlers'
//! `#[utoipa::path]` attributes and the types they take and return, so it
//! cannot drift from the routes: `routes::router` registers each handler
//! and its description in one call, on top of `schemas::ApiDoc`.

use serde_json::{json, Value};

/// The document of this build, for any deployment.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(crate::routes::router().1).unwrap_or(Value::Null);
    if let Some(data) = doc.pointer_mut("/components/schemas/StreamEvent/properties/data") {
        data["contentSchema"] = json!({ "$ref": "#/components/schemas/EventView" });
    }
    inline_tagged_variants(&mut doc, "DecisionItem", "action");
    add_notification_webhook(&mut doc);
    doc
}

/// The request a deployment's notification targets receive (docs/notifications.md,
/// "Notifications and reminders"): an OpenAPI 3.1 webhook, with the
/// envelope as a schema of its own.
fn add_notification_webhook(doc: &mut Value) {
    let header = |name: &str, description: &str| {
        json!({
            "name": name, "in": "header", "required": true,
            "description": description, "schema": { "type": "string" }
        })
    };
    doc["components"]["schemas"]["Notification"] = json!({
        "type": "object",
        "description": "An event of the stream (or a reminder of a request still open), as a notification target receives it.",
        "required": ["id", "type", "threadId", "runId", "createdAt", "data", "link"],
        "properties": {
            "id": { "type": "string", "description": "The event's stream id, or `remind:<runId>:<toolCallId>`: the same in every attempt." },
            "type": { "type": "string", "enum": ["INPUT_REQUIRED", "INPUT_RESOLVED", "RUN_COMPLETED", "RUN_FAILED", "RUN_CANCELLED", "APPROVAL_RECORDED", "INPUT_REMINDER"] },
            "threadId": { "type": "string", "format": "uuid" },
            "runId": { "type": ["string", "null"], "format": "uuid" },
            "createdAt": { "type": "string", "format": "date-time" },
            "data": { "type": "object", "description": "The event's data as the stream has it; a reminder's is the pending input with `waited`." },
            "link": { "type": ["string", "null"], "description": "The inbox page, when the deployment sets `ui_url`." }
        }
    });
    doc["webhooks"]["notification"] = json!({
        "post": {
            "summary": "An event sent to a notification target",
            "description": "Sent to each `[notifications.<name>]` target for the event types it lists; retried with backoff until a 2xx or its `max_attempts`. A target with `format = \"slack\"` gets `{text, blocks}` instead.",
            "parameters": [
                header("X-Agentenkit-Event-Id", "The delivery's id (as `id`): drop a copy you have seen."),
                header("X-Agentenkit-Event-Type", "The event's type (as `type`)."),
                header("X-Agentenkit-Delivery-Attempt", "1 for the first attempt, then 2, 3, …"),
                {
                    "name": "X-Agentenkit-Signature", "in": "header", "required": false,
                    "description": "`t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<body>\">` with the target's secret; refuse a `t` more than 5 minutes away.",
                    "schema": { "type": "string", "pattern": "^t=[0-9]+(,v1=[0-9a-f]{64})+$" }
                }
            ],
            "requestBody": {
                "required": true,
                "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Notification" } } }
            },
            "responses": {
                "2XX": { "description": "Delivered: not sent again." },
                "default": { "description": "Not delivered: sent again after a backoff, until the target's last attempt." }
            }
        }
    });
}

/// utoipa writes a variant of an internally tagged enum as `allOf` of the
/// variant's schema and an object holding the tag; when the variant's
/// schema refuses other properties (`deny_unknown_fields`), that refuses
/// the tag too and no item fits. Each variant becomes the variant's schema
/// with the tag among its properties.
fn inline_tagged_variants(doc: &mut Value, schema: &str, tag: &str) {
    let components = doc["components"]["schemas"].clone();
    let Some(variants) = doc
        .pointer_mut(&format!("/components/schemas/{schema}/oneOf"))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for variant in variants {
        let parts = variant["allOf"].as_array().cloned().unwrap_or_default();
        let (Some(reference), Some(tagged)) = (
            parts.iter().find_map(|p| p["$ref"].as_str()),
            parts.iter().find(|p| p["properties"].get(tag).is_some()),
        ) else {
            continue;
        };
        let name = reference.trim_start_matches("#/components/schemas/");
        let mut merged = components[name].clone();
        merged["properties"][tag] = tagged["properties"][tag].clone();
        match merged["required"].as_array_mut() {
            Some(required) => required.insert(0, json!(tag)),
            None => merged["required"] = json!([tag]),
        }
        *variant = merged;
    }
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
    use crate::schemas::STORABLE_TEXT;

    /// Every route of SPEC §9 is in the document with the methods it takes.
    #[test]
    fn the_document_covers_every_route() {
        let doc = document();
        let expected: &[(&str, &[&str])] = &[
            ("/threads", &["post"]),
            ("/threads/{id}", &["get"]),
            ("/threads/{id}/messages", &["get", "post"]),
            ("/threads/{id}/messages/{messageId}/edit", &["post"]),
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
            ("/agent/decisions", &["post"]),
            ("/agent/inbox", &["get"]),
            ("/agents", &["get"]),
            ("/healthz", &["get"]),
            ("/readyz", &["get"]),
            ("/metrics", &["get"]),
            ("/openapi.json", &["get"]),
            ("/threads/{id}/pending-inputs", &["get"]),
            ("/threads/{id}/fork", &["post"]),
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

    /// A batch item is one of the single routes' bodies with its `action`:
    /// the tag is a property of each variant, which refuses others.
    #[test]
    fn a_decision_item_is_a_route_body_with_its_action() {
        let json = document();
        let variants = json["components"]["schemas"]["DecisionItem"]["oneOf"]
            .as_array()
            .unwrap();
        let actions: Vec<&Value> = variants
            .iter()
            .map(|v| &v["properties"]["action"]["enum"][0])
            .collect();
        assert_eq!(
            actions,
            [
                &json!("approve"),
                &json!("deny"),
                &json!("answer"),
                &json!("skip")
            ]
        );
        for variant in variants {
            assert_eq!(variant["additionalProperties"], false, "{variant}");
            assert_eq!(variant["required"][0], "action", "{variant}");
            assert!(variant["required"]
                .as_array()
                .unwrap()
                .contains(&json!("runId")));
            assert!(variant.get("allOf").is_none());
        }
        assert!(variants[0]["properties"].get("arguments").is_some());
        assert!(variants[1]["properties"].get("reason").is_some());
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
        for open in ["/healthz", "/readyz", "/metrics"] {
            assert_eq!(
                json["paths"][open]["get"]["security"],
                serde_json::json!([{}]),
                "{open}"
            );
        }
        // Open, and with a key it names the deployment's agents.
        assert_eq!(
            json["paths"]["/openapi.json"]["get"]["security"],
            serde_json::json!([{}, { "bearer": [] }])
        );
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
