//! `GET /agent/inbox` a page at a time: the owner's open requests in one
//! total order, a full page's `Link` header naming the next.

use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::Value;

#[tokio::test]
async fn the_inbox_is_read_a_page_at_a_time_following_its_links() {
    let tool = ToolServer::ok().await;
    let env = TestEnv::start(approval_registry(TWO_CALLS, &tool.url)).await;
    let worker = env.spawn_worker();
    for _ in 0..2 {
        let (thread_id, _) = env.start_turn("agent", "send them").await;
        env.wait_pending(&thread_id, 2).await;
    }
    let all = env.get("/agent/inbox").await;
    let all = all.as_array().unwrap().clone();
    assert_eq!(all.len(), 4);
    let key = |input: &Value| {
        (
            input["createdAt"].as_str().unwrap().to_owned(),
            input["runId"].as_str().unwrap().to_owned(),
            input["toolCallId"].as_str().unwrap().to_owned(),
        )
    };
    let mut sorted = all.clone();
    sorted.sort_by_key(key);
    assert_eq!(sorted, all, "oldest first, then by run and call");

    for (limit, sizes) in [(1, vec![1, 1, 1, 1, 0]), (3, vec![3, 1]), (4, vec![4, 0])] {
        let pages = env.get_pages("/agent/inbox", limit).await;
        assert_eq!(
            pages.iter().map(Vec::len).collect::<Vec<_>>(),
            sizes,
            "limit {limit}"
        );
        assert_eq!(
            pages.concat(),
            all,
            "limit {limit}: every request once, in order"
        );
    }
    // Without a limit, the whole inbox on one page and no Link.
    let response = env
        .http
        .get(env.url("/agent/inbox"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert!(response.headers().get("link").is_none());

    // Bob's pages hold none of Alice's requests, whatever cursor he sends.
    let first = env.get_pages("/agent/inbox", 1).await;
    let link_after = env
        .http
        .get(env.url("/agent/inbox?limit=1"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap()
        .headers()["link"]
        .to_str()
        .unwrap()
        .to_owned();
    let (after, _) = agentenkit::paging::next_page(&link_after).unwrap();
    assert_eq!(first[0].len(), 1);
    let (status, bobs) = env
        .call(
            "GET",
            &format!("/agent/inbox?after={after}"),
            Some(BOB),
            None,
        )
        .await;
    assert_eq!((status, bobs), (StatusCode::OK, serde_json::json!([])));

    for query in [
        "after=x",
        "after=1.2.3",
        "after=1.00000000-0000-0000-0000-000000000000.6",
        "after=1.00000000-0000-0000-0000-000000000000.zz",
        "limit=0",
        "limit=1001",
    ] {
        let (status, body) = env
            .call("GET", &format!("/agent/inbox?{query}"), Some(ALICE), None)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
    }
    worker.stop().await.unwrap();
    env.finish().await;
}
