use std::time::Duration;

use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::{json, Value};

/// One SSE frame: (id, event, data).
type Frame = (i64, String, Value);

struct SseReader {
    response: reqwest::Response,
    buffer: String,
}

impl SseReader {
    async fn open(env: &TestEnv, thread_id: &str, last_event_id: Option<i64>) -> SseReader {
        let mut request = env
            .http
            .get(env.url(&format!("/threads/{thread_id}/stream")))
            .bearer_auth(ALICE);
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        SseReader {
            response,
            buffer: String::new(),
        }
    }

    /// The next frame with an id (keep-alive comments are skipped), within
    /// 20 s overall: keep-alives must not keep a missing event waited for.
    async fn next(&mut self) -> Frame {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut id, mut event, mut data) = (None, String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim().parse().ok();
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim());
                    }
                }
                if let Some(id) = id {
                    return (id, event, serde_json::from_str(&data).unwrap());
                }
                continue;
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .expect("an event within 20 s")
                .unwrap()
                .expect("the stream is open");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    async fn until(&mut self, event: &str) -> Vec<Frame> {
        let mut frames = Vec::new();
        loop {
            let frame = self.next().await;
            let done = frame.1 == event;
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }
}

#[tokio::test]
async fn the_stream_carries_events_live_and_resumes_from_last_event_id() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let worker = env.spawn_worker();
    let thread = env.post("/threads", json!({ "agent": "agent" })).await;
    let thread_id = thread["id"].as_str().unwrap().to_owned();
    let mut stream = SseReader::open(&env, &thread_id, None).await;

    let run = env
        .post(
            &format!("/threads/{thread_id}/messages"),
            json!({ "content": "go" }),
        )
        .await;
    let run_id = run["runId"].as_str().unwrap().to_owned();
    let parked = stream.until("INPUT_REQUIRED").await;
    let types: Vec<_> = parked.iter().map(|f| f.1.as_str()).collect();
    assert_eq!(
        types,
        ["RUN_STARTED", "MESSAGE", "TOOL_CALL", "INPUT_REQUIRED"]
    );
    let required = &parked[3];
    assert_eq!(required.2["data"]["toolCallId"], "c1");
    assert_eq!(required.2["runId"], run_id.as_str());
    assert!(parked.windows(2).all(|w| w[0].0 < w[1].0), "ids increase");

    env.reply(
        "/agent/tool-call/approve",
        ALICE,
        json!({ "runId": run_id, "toolCallId": "c1" }),
    )
    .await;
    let rest = stream.until("RUN_COMPLETED").await;
    let types: Vec<_> = rest.iter().map(|f| f.1.as_str()).collect();
    assert_eq!(
        types,
        ["INPUT_RESOLVED", "TOOL_RESULT", "MESSAGE", "RUN_COMPLETED"]
    );

    // A reconnect after INPUT_REQUIRED gets exactly what came after it.
    let mut resumed = SseReader::open(&env, &thread_id, Some(required.0)).await;
    let again = resumed.until("RUN_COMPLETED").await;
    assert_eq!(
        again.iter().map(|f| f.0).collect::<Vec<_>>(),
        rest.iter().map(|f| f.0).collect::<Vec<_>>()
    );

    let (status, _) = env
        .call(
            "GET",
            &format!("/threads/{thread_id}/stream"),
            Some(BOB),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = env
        .call("GET", &format!("/threads/{thread_id}/stream"), None, None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    worker.stop().await.unwrap();
    env.finish().await;
}

#[tokio::test]
async fn an_event_of_a_transaction_left_open_is_never_skipped_or_reordered() {
    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    let thread = env.post("/threads", json!({ "agent": "agent" })).await;
    let thread_id = thread["id"].as_str().unwrap().to_owned();
    let thread_uuid: uuid::Uuid = thread_id.parse().unwrap();
    let mut stream = SseReader::open(&env, &thread_id, None).await;
    // A takes an id for the thread with the store's own statement and stays
    // open for longer than a second.
    let a = env.pg_client().await;
    a.batch_execute("BEGIN").await.unwrap();
    let insert = format!("{} RETURNING id", agentenkit_store::INSERT_EVENT_SQL);
    let low: i64 = a
        .query_one(
            insert.as_str(),
            &[
                &thread_uuid,
                &None::<uuid::Uuid>,
                &"MESSAGE",
                &json!({ "from": "a" }),
                &0i16,
            ],
        )
        .await
        .unwrap()
        .get(0);
    // Meanwhile a turn starts on the thread (RUN_STARTED): it must not
    // commit a higher id of the thread before A ends.
    let started = tokio::spawn({
        let http = env.http.clone();
        let url = env.url(&format!("/threads/{thread_id}/messages"));
        async move {
            let response = http
                .post(url)
                .bearer_auth(ALICE)
                .json(&json!({ "content": "go" }))
                .send()
                .await
                .unwrap();
            (response.status(), tokio::time::Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let committed_at = tokio::time::Instant::now();
    a.batch_execute("COMMIT").await.unwrap();
    let (status, answered_at) = started.await.unwrap();
    assert_eq!(status, StatusCode::ACCEPTED);
    assert!(
        answered_at >= committed_at,
        "the turn's event waited for the open transaction"
    );
    let first = stream.next().await;
    let second = stream.next().await;
    assert_eq!(
        (first.0, first.1.as_str()),
        (low, "MESSAGE"),
        "nothing skipped"
    );
    assert_eq!(second.1, "RUN_STARTED");
    assert!(second.0 > low, "ids go out in commit order");
    // A reader polling with `after` sees the same order.
    let listed = env.get(&format!("/threads/{thread_id}/events")).await;
    let ids: Vec<i64> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [low, second.0]);
    env.finish().await;
}

/// A reader paging messages with `after=N` never skips one: a message's id
/// is taken under the thread's event lock, so one numbered lower cannot
/// commit after one numbered higher.
#[tokio::test]
async fn a_message_of_a_transaction_left_open_is_never_skipped_by_a_paging_reader() {
    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    let thread = env.post("/threads", json!({ "agent": "agent" })).await;
    let thread_id = thread["id"].as_str().unwrap().to_owned();
    let thread_uuid: uuid::Uuid = thread_id.parse().unwrap();
    // A commits an event of the thread and stays open, holding its lock.
    let a = env.pg_client().await;
    a.batch_execute("BEGIN").await.unwrap();
    a.execute(
        agentenkit_store::INSERT_EVENT_SQL,
        &[
            &thread_uuid,
            &None::<uuid::Uuid>,
            &"MESSAGE",
            &json!({ "from": "a" }),
            &0i16,
        ],
    )
    .await
    .unwrap();
    // Meanwhile a turn starts on the thread, writing its user message; it
    // waits for A's lock.
    let started = tokio::spawn({
        let http = env.http.clone();
        let url = env.url(&format!("/threads/{thread_id}/messages"));
        async move {
            let response = http
                .post(url)
                .bearer_auth(ALICE)
                .json(&json!({ "content": "go" }))
                .send()
                .await
                .unwrap();
            response.status()
        }
    });
    let watcher = env.pg_client().await;
    let waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
                   AND classid = 1702260340::oid AND objid = hashtext($1::uuid::text)::oid";
    for attempt in 0.. {
        let count: i64 = watcher
            .query_one(waiting, &[&thread_uuid])
            .await
            .unwrap()
            .get(0);
        if count > 0 {
            break;
        }
        assert!(attempt < 200, "the turn never waited for the thread's lock");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // A writes a message too, and commits first.
    let insert = format!("{} RETURNING id", agentenkit_store::INSERT_MESSAGE_SQL);
    let run_uuid = uuid::Uuid::new_v4();
    let low: i64 = a
        .query_one(
            insert.as_str(),
            &[
                &thread_uuid,
                &run_uuid,
                &json!({ "role": "user", "content": "from a" }),
                &None::<i32>,
            ],
        )
        .await
        .unwrap()
        .get(0);
    a.batch_execute("COMMIT").await.unwrap();
    assert_eq!(started.await.unwrap(), StatusCode::ACCEPTED);
    // A reader that saw A's message (the highest id once A committed) pages
    // on from it and finds the turn's.
    let after = env
        .get(&format!("/threads/{thread_id}/messages?after={low}"))
        .await;
    let contents: Vec<&str> = after
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        contents.first() == Some(&"go"),
        "the turn's message was numbered below A's: {after}"
    );
    env.finish().await;
}

#[tokio::test]
async fn a_stopping_api_ends_its_open_streams_and_exits() {
    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    let thread = env.post("/threads", json!({ "agent": "agent" })).await;
    let thread_id = thread["id"].as_str().unwrap().to_owned();
    // A second API process on the same store, stopped while a stream is open.
    let keys = agentenkit_api::ApiKeys::parse(&format!("alice:{ALICE}")).unwrap();
    let state = agentenkit_api::AppState::new(env.deployment_of(env.registry.clone(), 1), keys);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (addr, served) =
        agentenkit::serve_api(state, "127.0.0.1:0".parse().unwrap(), shutdown.clone())
            .await
            .unwrap();
    let mut stream = env
        .http
        .get(format!("http://{addr}/threads/{thread_id}/stream"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("the server stops although a stream was open")
        .unwrap();
    // The stream ended cleanly (the client reconnects with Last-Event-ID).
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match stream.chunk().await {
                Ok(Some(_)) => continue,
                other => return other.map(|_| ()),
            }
        }
    })
    .await
    .expect("the stream ends");
    assert!(end.is_ok(), "{end:?}");
    env.finish().await;
}

/// Events are stored without what their row, their call row and their
/// message row already hold (the run id, a parked approval's arguments, the
/// model's message), and read back whole:
/// what the API serves is what the runtime wrote.
#[tokio::test]
async fn an_approvals_events_are_stored_packed_and_served_whole() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, &tool.url)).await;
    let _worker = env.spawn_worker();
    let (thread_id, run_id) = env.start_turn("agent", "send it").await;
    env.wait_pending(&thread_id, 1).await;

    let events = env.get(&format!("/threads/{thread_id}/events")).await;
    let data = |kind: &str| first_event(&events, kind)["data"].clone();
    let arguments = json!({ "to": "a@b.c" });
    assert_eq!(
        data("TOOL_CALL"),
        json!({ "runId": run_id, "toolCallId": "c1", "toolName": "tool",
                "arguments": arguments, "kind": "approval" })
    );
    let mut required = data("INPUT_REQUIRED");
    let expires_at = required["expiresAt"].take();
    assert!(
        expires_at.as_str().is_some_and(|at| at.ends_with('Z')),
        "{expires_at}"
    );
    assert_eq!(
        required,
        json!({ "toolCallId": "c1", "runId": run_id, "toolName": "tool", "arguments": arguments,
                "argumentsHash": agentenkit_core::canonical::arguments_hash(&arguments),
                "kind": "approval", "reason": "approval", "runName": "agent", "depth": 0,
                "expiresAt": null })
    );
    let version = env.registry.agent_version("agent").unwrap().hash.clone();
    assert_eq!(
        data("RUN_STARTED"),
        json!({ "runId": run_id, "runName": "agent", "depth": 0, "agentVersion": version })
    );
    // The MESSAGE event's message is the conversation's assistant message.
    let conversation = env.get(&format!("/threads/{thread_id}/messages")).await;
    let mut assistant = conversation
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap_or_else(|| panic!("no assistant message in {conversation}"))
        .clone();
    for view_only in ["id", "runId", "createdAt"] {
        assistant.as_object_mut().unwrap().remove(view_only);
    }
    assert_eq!(
        data("MESSAGE"),
        json!({ "runId": run_id, "message": assistant })
    );

    let stored = env
        .pg_client()
        .await
        .query(
            "SELECT type, packed, data ? 'runId', data ? 'arguments' OR data ? 'message'
             FROM events ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    let stored: Vec<(String, i16, bool, bool)> = stored
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    for (kind, packed, has_run, has_arguments) in &stored {
        assert!(
            !has_run,
            "{kind} stored its run id beside run_id: {stored:?}"
        );
        assert_eq!(*packed & 1, 1, "{kind}: {stored:?}");
        if kind == "TOOL_CALL" || kind == "INPUT_REQUIRED" {
            assert!(!has_arguments, "{kind} stored the call's arguments again");
        }
        if kind == "TOOL_CALL" {
            // run id, arguments and the call row's fields
            assert_eq!(*packed, 1 | 2 | 8, "{kind}");
        }
        if kind == "INPUT_REQUIRED" {
            // and the run row's name and depth
            assert_eq!(*packed, 1 | 2 | 8 | 32, "{kind}");
        }
        if kind == "MESSAGE" {
            assert!(!has_arguments, "MESSAGE stored its message again");
            assert_eq!(*packed, 5, "{kind}");
        }
        if kind == "RUN_STARTED" {
            // and the run row's version
            assert_eq!(*packed, 1 | 16 | 64, "{kind}");
        }
    }
    // What is left of each is only what no row holds.
    let kept: Vec<(String, Value)> = env
        .rows("SELECT type, data FROM events ORDER BY id", |r| {
            (r.get(0), r.get(1))
        })
        .await;
    let kept_of = |kind: &str| kept.iter().find(|(k, _)| k == kind).unwrap().1.clone();
    assert_eq!(kept_of("RUN_STARTED"), json!({}));
    assert_eq!(
        kept_of("TOOL_CALL"),
        json!({ "toolCallId": "c1", "kind": "approval" })
    );
    assert_eq!(kept_of("INPUT_REQUIRED"), json!({ "toolCallId": "c1" }));
    // The call row names the model entry that holds its arguments, and
    // what is served of it (the inbox's list) has them.
    let row = env
        .pg_client()
        .await
        .query_one(
            "SELECT tc.arguments, j.name FROM tool_calls tc
             JOIN journal j ON j.run_id = tc.run_id AND j.position = tc.arguments_position",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<Value>>(0), None);
    assert_eq!(row.get::<_, String>(1), "model:0");
    let pending = env.wait_pending(&thread_id, 1).await;
    assert_eq!(pending[0]["arguments"], arguments, "{pending:?}");
    // So does the assistant message: the conversation served above (and
    // the MESSAGE event) came back from the journal.
    let messages: Vec<(bool, Option<String>)> = env
        .rows(
            "SELECT m.body IS NULL, j.name FROM messages m
             LEFT JOIN journal j ON j.run_id = m.run_id AND j.position = m.body_position
             ORDER BY m.id",
            |r| (r.get(0), r.get(1)),
        )
        .await;
    assert_eq!(
        messages,
        vec![(false, None), (true, Some("model:0".to_owned()))],
        "the user's message, then the assistant's"
    );
}

/// Reads `stream` until the server ends it; `false` if it is still open
/// after `within`.
async fn ends_within(stream: &mut reqwest::Response, within: Duration) -> bool {
    tokio::time::timeout(within, async {
        while let Ok(Some(_)) = stream.chunk().await {}
    })
    .await
    .is_ok()
}

/// A stream ends once its key is revoked (asked again at every wake-up,
/// within the key cache's window), and every stream ends after
/// `stream_lifetime` whatever its key.
#[tokio::test]
async fn a_revoked_keys_stream_ends_and_every_stream_ends_in_time() {
    use agentenkit_core::KeyScope;

    let env = TestEnv::start_with(
        registry(CALL_THEN_DONE, "http://127.0.0.1:9/"),
        |_| {},
        |mut state| {
            state.stream_reread = Duration::from_millis(200);
            // Longer than the key cache's window, so the revocation is what
            // ends the first stream.
            state.stream_lifetime = Duration::from_secs(12);
            state
        },
    )
    .await;
    let thread = env.post("/threads", json!({ "agent": "agent" })).await;
    let thread_id = thread["id"].as_str().unwrap().to_owned();
    let (key, key_id) = make_key(&env, "alice", &[KeyScope::Read], &[]).await;
    let open = |key: String| {
        let request = env
            .http
            .get(env.url(&format!("/threads/{thread_id}/stream")))
            .bearer_auth(key);
        async move { request.send().await.unwrap() }
    };
    let mut revoked = open(key).await;
    let mut kept = open(ALICE.to_owned()).await;
    assert_eq!(revoked.status(), StatusCode::OK);
    assert!(
        !ends_within(&mut revoked, Duration::from_millis(500)).await,
        "a valid key's stream stays open"
    );
    revoke_key(&env, &key_id).await;
    assert!(
        ends_within(&mut revoked, Duration::from_secs(8)).await,
        "the revoked key's stream ended within the key cache's window"
    );
    assert!(
        !ends_within(&mut kept, Duration::ZERO).await,
        "the other key's stream is still open"
    );
    assert!(
        ends_within(&mut kept, Duration::from_secs(15)).await,
        "a stream ends after stream_lifetime"
    );
    env.finish().await;
}
