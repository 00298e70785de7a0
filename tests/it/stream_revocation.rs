//! A revoked key's stream ends even when it never waits for news.

use std::time::Duration;

use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::json;

/// A revoked key's stream ends even while it has events to send: its key
/// is asked again before every read of a batch, not only when the stream
/// waits for news. The stream is parked behind a backlog larger than the
/// sockets hold; once it goes on after the revocation, it ends before it
/// reads an event written after the revocation.
#[tokio::test]
async fn a_revoked_keys_busy_stream_ends_before_its_next_batch() {
    use agentenkit_core::KeyScope;

    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    let thread = env.post("/threads", json!({ "agent": "agent" })).await;
    let thread_id = thread["id"].as_str().unwrap().to_owned();
    // 3,000 events of 8 KiB: 24 MiB, more than the sockets buffer.
    env.sql(&format!(
        "INSERT INTO events (thread_id, type, data)
         SELECT '{thread_id}', 'RUN_COMPLETED', jsonb_build_object('output', repeat('e', 8192))
         FROM generate_series(1, 3000)"
    ))
    .await;
    let (key, key_id) = make_key(&env, "alice", &[KeyScope::Read], &[]).await;
    let mut stream = env
        .http
        .get(env.url(&format!("/threads/{thread_id}/stream")))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    assert!(stream.chunk().await.unwrap().is_some(), "the stream began");
    // Not read for a while: the stream waits behind full sockets.
    revoke_key(&env, &key_id).await;
    // Past the key cache's window, an event is written after the backlog.
    tokio::time::sleep(agentenkit_api::KEY_CACHE_TTL + Duration::from_secs(1)).await;
    env.sql(&format!(
        "INSERT INTO events (thread_id, type, data)
         VALUES ('{thread_id}', 'RUN_COMPLETED', '{{\"output\": \"after the revocation\"}}')"
    ))
    .await;
    let mut read = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(chunk)) = stream.chunk().await {
            read.extend_from_slice(&chunk);
        }
    })
    .await;
    assert!(ended.is_ok(), "the revoked key's stream ended");
    let read = String::from_utf8_lossy(&read);
    assert!(
        !read.contains("after the revocation"),
        "an event written after the revocation was sent ({} bytes read)",
        read.len()
    );
    env.finish().await;
}
