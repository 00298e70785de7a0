//! Every route refuses bad input with a clear error and changes nothing.

use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::{json, Value};

async fn started() -> (TestEnv, String, String) {
    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    // No worker: the run stays queued, so the thread is busy.
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    (env, thread_id, run_id)
}

fn assert_error(status: StatusCode, body: &Value, expected: StatusCode, code: &str) {
    assert_eq!(status, expected, "{body}");
    assert_eq!(body["error"], code, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

#[tokio::test]
async fn requests_without_a_valid_key_are_401() {
    let (env, thread_id, run_id) = started().await;
    for (method, path) in [
        ("POST", "/threads".to_owned()),
        ("GET", format!("/threads/{thread_id}")),
        ("POST", format!("/threads/{thread_id}/messages")),
        ("GET", format!("/threads/{thread_id}/messages")),
        ("GET", format!("/threads/{thread_id}/events")),
        ("GET", format!("/runs/{run_id}")),
        ("GET", format!("/runs/{run_id}/journal")),
    ] {
        for key in [None, Some("wrong-key")] {
            let (status, body) = env
                .call(
                    method,
                    &path,
                    key,
                    Some(json!({"agent": "agent", "content": "x"})),
                )
                .await;
            assert_error(status, &body, StatusCode::UNAUTHORIZED, "Unauthorized");
        }
    }
    env.finish().await;
}

#[tokio::test]
async fn another_owners_ids_are_404_and_unchanged() {
    let (env, thread_id, run_id) = started().await;
    for (method, path, body) in [
        ("GET", format!("/threads/{thread_id}"), None),
        (
            "POST",
            format!("/threads/{thread_id}/messages"),
            Some(json!({"content": "hijack"})),
        ),
        ("GET", format!("/threads/{thread_id}/messages"), None),
        ("GET", format!("/threads/{thread_id}/events"), None),
        ("GET", format!("/runs/{run_id}"), None),
        ("GET", format!("/runs/{run_id}/journal"), None),
        ("GET", format!("/threads/{}", uuid::Uuid::now_v7()), None),
        ("GET", "/threads/not-a-uuid".to_owned(), None),
        ("GET", "/runs/not-a-uuid".to_owned(), None),
    ] {
        let (status, answer) = env.call(method, &path, Some(BOB), body).await;
        assert_error(status, &answer, StatusCode::NOT_FOUND, "NotFound");
        assert!(
            !answer.to_string().contains("alice"),
            "nothing about the owner leaks"
        );
    }
    let messages = env.get(&format!("/threads/{thread_id}/messages")).await;
    assert_eq!(
        messages.as_array().unwrap().len(),
        1,
        "bob's message was not recorded"
    );
    env.finish().await;
}

#[tokio::test]
async fn malformed_bodies_are_400_oversized_413_unknown_agent_422() {
    let (env, thread_id, _) = started().await;
    let raw = |path: &str, body: &'static str| {
        env.http
            .post(env.url(path))
            .bearer_auth(ALICE)
            .header("content-type", "application/json")
            .body(body)
    };
    let (status, body) = env.send(raw("/threads", "{not json")).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "BadRequest");
    let (status, body) = env.send(raw("/threads", "{}")).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "BadRequest");
    assert!(
        body["message"].as_str().unwrap().contains("agent"),
        "says what is missing: {body}"
    );
    let (status, body) = env.send(raw("/threads", r#"{"agent": 7}"#)).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "BadRequest");
    let (status, body) = env
        .send(raw("/threads", r#"{"agent": "agent", "metadata": [1]}"#))
        .await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "BadRequest");
    let (status, body) = env
        .call(
            "POST",
            "/threads",
            Some(ALICE),
            Some(json!({"agent": "nobody"})),
        )
        .await;
    assert_error(
        status,
        &body,
        StatusCode::UNPROCESSABLE_ENTITY,
        "UnknownAgent",
    );

    let path = format!("/threads/{thread_id}/messages");
    let (status, body) = env.send(raw(&path, "[")).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "BadRequest");
    let (status, body) = env
        .call("POST", &path, Some(ALICE), Some(json!({"content": "  "})))
        .await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "BadRequest");
    let huge = json!({ "content": "x".repeat(1024 * 1024 + 1) });
    let (status, body) = env.call("POST", &path, Some(ALICE), Some(huge)).await;
    assert_error(
        status,
        &body,
        StatusCode::PAYLOAD_TOO_LARGE,
        "PayloadTooLarge",
    );
    let (status, body) = env
        .call(
            "GET",
            &format!("/threads/{thread_id}/events?after=abc"),
            Some(ALICE),
            None,
        )
        .await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "BadRequest");
    for path in [
        format!("/threads/{thread_id}/stream?after=abc"),
        format!("/threads/{thread_id}/stream?after=-"),
    ] {
        let (status, body) = env.call("GET", &path, Some(ALICE), None).await;
        assert_error(status, &body, StatusCode::BAD_REQUEST, "BadRequest");
    }

    // Nothing above changed anything: one message, one run, one event.
    let messages = env.get(&path).await;
    assert_eq!(messages.as_array().unwrap().len(), 1);
    assert_eq!(env.event_types(&thread_id).await, ["RUN_STARTED"]);
    env.finish().await;
}

#[tokio::test]
async fn a_message_to_a_busy_thread_is_409_and_starts_nothing() {
    let (env, thread_id, run_id) = started().await;
    let (status, body) = env
        .call(
            "POST",
            &format!("/threads/{thread_id}/messages"),
            Some(ALICE),
            Some(json!({"content": "again"})),
        )
        .await;
    assert_error(status, &body, StatusCode::CONFLICT, "RunActive");
    let thread = env.get(&format!("/threads/{thread_id}")).await;
    assert_eq!(thread["currentRunId"], run_id.as_str());
    assert_eq!(thread["status"], "RUNNING");
    assert_eq!(env.event_types(&thread_id).await, ["RUN_STARTED"]);
    env.finish().await;
}

#[tokio::test]
async fn concurrent_turns_on_one_thread_start_exactly_one_run() {
    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    let thread = env.post("/threads", json!({"agent": "agent"})).await;
    let path = format!("/threads/{}/messages", thread["id"].as_str().unwrap());
    let calls = (0..10).map(|i| {
        env.call(
            "POST",
            &path,
            Some(ALICE),
            Some(json!({"content": format!("m{i}")})),
        )
    });
    let statuses: Vec<StatusCode> = futures::future::join_all(calls)
        .await
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == StatusCode::ACCEPTED)
            .count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == StatusCode::CONFLICT)
            .count(),
        9,
        "{statuses:?}"
    );
    env.finish().await;
}

#[tokio::test]
async fn text_postgres_cannot_store_and_bodies_that_are_not_objects_are_400() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;
    let nul = "a\u{0}b";
    for (path, body) in [
        (
            "/agent/tool-call/reject",
            json!({ "runId": run_id, "toolCallId": "c1", "reason": nul }),
        ),
        (
            "/agent/tool-call/approve",
            json!({ "runId": run_id, "toolCallId": "c1", "payload": { "note": [nul] } }),
        ),
        (
            "/agent/tool-call/approve",
            json!({ "runId": run_id, "toolCallId": nul }),
        ),
        (
            "/agent/hitl/respond",
            json!({ "threadId": thread_id, "toolCallId": "c1", "approved": true, "payload": { nul: 1 } }),
        ),
    ] {
        let (status, body) = env.call("POST", path, Some(ALICE), Some(body)).await;
        assert_error(status, &body, StatusCode::BAD_REQUEST, "BadRequest");
        assert!(body["message"].as_str().unwrap().contains("NUL"), "{body}");
    }
    let (status, body) = env
        .call("POST", "/threads", Some(ALICE), Some(json!(["agent"])))
        .await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "BadRequest");
    let (status, body) = env
        .call(
            "POST",
            "/threads",
            Some(ALICE),
            Some(json!({ "agent": nul })),
        )
        .await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "BadRequest");
    // Nothing was recorded: the request is still open, and it can be
    // answered as usual.
    let pending = env.wait_pending(&thread_id, 1).await;
    assert_eq!(pending[0]["toolCallId"], "c1");
    let (_, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1" }),
        )
        .await;
    assert_eq!(answer["delivered"], true);
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn a_reply_of_any_shape_to_a_settled_request_is_not_delivered() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;
    let (_, answer) = env
        .reply(
            "/agent/tool-call/approve",
            ALICE,
            json!({ "runId": run_id, "toolCallId": "c1" }),
        )
        .await;
    assert_eq!(answer["delivered"], true);
    // Answers and skips are the wrong shape for an approval; once it is
    // settled they are refused like any late reply, not 409.
    for (path, body) in [
        (
            "/agent/tool-call/answer",
            json!({ "runId": run_id, "toolCallId": "c1", "answers": { "q": "x" } }),
        ),
        (
            "/agent/tool-call/skip",
            json!({ "runId": run_id, "toolCallId": "c1" }),
        ),
    ] {
        let (status, body) = env.reply(path, ALICE, body).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["delivered"], false, "{body}");
        assert_eq!(body["error"], "This request was already answered");
    }
    assert_eq!(env.wait_run_finished(&run_id).await["status"], "completed");
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn every_error_is_json_and_the_bearer_scheme_is_case_insensitive() {
    let (env, thread_id, _) = started().await;
    let (status, body) = env.call("GET", "/nowhere", Some(ALICE), None).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "NotFound");
    let (status, body) = env.call("DELETE", "/threads", Some(ALICE), None).await;
    assert_error(
        status,
        &body,
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
    );
    let (status, body) = env
        .call("GET", "/threads/not-a-uuid", Some(ALICE), None)
        .await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "NotFound");
    let (status, body) = env
        .call("GET", "/threads/%FF%FE/events", Some(ALICE), None)
        .await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "NotFound");
    let (status, body) = env
        .call(
            "GET",
            &format!("/threads/{thread_id}/events?after=1&after=2"),
            Some(ALICE),
            None,
        )
        .await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "BadRequest");

    // 401 says how to authenticate; the scheme's case does not matter.
    let refused = env
        .http
        .get(env.url(&format!("/threads/{thread_id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert!(refused.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Bearer"));
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let response = env
            .http
            .get(env.url(&format!("/threads/{thread_id}")))
            .header("authorization", format!("{scheme} {ALICE}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{scheme}");
    }
    env.finish().await;
}

/// A tool call id is short and shows as it reads: one too long, or with a
/// control or bidirectional formatting character, is 400 and changes
/// nothing; a model that gives one fails its run, saying why.
#[tokio::test]
async fn tool_call_ids_that_are_too_long_or_hide_characters_are_refused() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "go").await;
    env.wait_pending(&thread_id, 1).await;
    let long = "c".repeat(257);
    for id in [long.as_str(), "c1\u{1b}[2K", "c\u{202E}1", ""] {
        for (path, body) in [
            (
                "/agent/tool-call/approve",
                json!({ "runId": run_id, "toolCallId": id }),
            ),
            (
                "/agent/hitl/respond",
                json!({ "threadId": thread_id, "toolCallId": id, "approved": true }),
            ),
        ] {
            let (status, body) = env.call("POST", path, Some(ALICE), Some(body)).await;
            assert_error(status, &body, StatusCode::BAD_REQUEST, "BadRequest");
            assert!(
                body["message"].as_str().unwrap().contains("toolCallId"),
                "{body}"
            );
        }
    }
    let pending = env.wait_pending(&thread_id, 1).await;
    assert_eq!(pending[0]["toolCallId"], "c1");
    worker.stop().await.unwrap();
    env.finish().await;

    // The model names a call with a right-to-left override in its id.
    let env = TestEnv::start(approval_registry(
        r#"{ tool_calls = [ { id = "c\u202E1", name = "tool", arguments = { to = "a@b.c" } } ] },"#,
        &tool.url,
    ))
    .await;
    let worker = env.spawn_worker();
    let (_, run_id) = env.start_turn("agent", "go").await;
    let run = env.wait_run_finished(&run_id).await;
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap_or_default();
    assert!(error.contains("U+202E"), "{error}");
    worker.stop().await.unwrap();
    env.finish().await;
}

/// Every operation the document says needs a key answers 401 without one,
/// or with a wrong one, whatever else the request holds: the document and
/// the routes cannot disagree on what is open.
#[tokio::test]
async fn every_route_that_needs_a_key_refuses_a_request_without_one() {
    let (env, thread_id, run_id) = started().await;
    let doc = agentenkit_api::openapi_document();
    let mut checked = 0;
    for (template, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            // Open operations say so with an empty requirement.
            let open = operation["security"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|r| r.as_object().is_some_and(|o| o.is_empty()))
            });
            if open {
                continue;
            }
            let id = if template.starts_with("/runs/") {
                &run_id
            } else {
                &thread_id
            };
            let path = template.replace("{id}", id);
            for key in [None, Some("wrong-key")] {
                let (status, body) = env
                    .call(
                        &method.to_ascii_uppercase(),
                        &path,
                        key,
                        Some(json!({ "agent": "agent", "content": "x", "runId": run_id, "toolCallId": "c1" })),
                    )
                    .await;
                assert_error(status, &body, StatusCode::UNAUTHORIZED, "Unauthorized");
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 15,
        "only {checked} keyed operations in the document"
    );
    env.finish().await;
}
