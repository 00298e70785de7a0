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
    use crate::schemas::STORABLE_TEXT;

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
