//! Nothing waits without a limit: a saturated pool and a stuck statement
//! are 503s with `Retry-After`, and an owner's open streams are capped.

use std::time::Duration;

use agentenkit_tests::*;
use axum::http::StatusCode;
use serde_json::json;

#[tokio::test]
async fn a_saturated_pool_and_a_stuck_statement_are_503_not_a_hang() {
    let env = TestEnv::start_with(
        registry(CALL_THEN_DONE, "http://127.0.0.1:9/"),
        |config| {
            config.max_connections = 1;
            config.pool_wait = Duration::from_millis(300);
            config.statement_timeout = Duration::from_millis(1000);
        },
        |state| state,
    )
    .await;
    // Another session holds the threads table: creating a thread waits on
    // it, holding the pool's only connection.
    let locker = env.pg_client().await;
    locker
        .batch_execute("BEGIN; LOCK TABLE threads IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let stuck = tokio::spawn({
        let http = env.http.clone();
        let url = env.url("/threads");
        async move {
            let response = http
                .post(url)
                .bearer_auth(ALICE)
                .json(&json!({ "agent": "agent" }))
                .send()
                .await
                .unwrap();
            let retry_after = response.headers().get("retry-after").cloned();
            let status = response.status();
            let body: serde_json::Value = response.json().await.unwrap();
            (status, retry_after, body)
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Meanwhile the pool is empty: readiness answers within the pool wait.
    let started = std::time::Instant::now();
    let ready = env.http.get(env.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ready.headers()["retry-after"], "1");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The stuck statement is cancelled by the statement timeout: a 503.
    let (status, retry_after, body) = tokio::time::timeout(Duration::from_secs(10), stuck)
        .await
        .expect("the request ends")
        .unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"], "Unavailable");
    assert!(retry_after.is_some());
    locker.batch_execute("ROLLBACK").await.unwrap();
    // Nothing was created, and the store works again.
    let pg = env.pg_client().await;
    let threads: i64 = pg
        .query_one("SELECT count(*) FROM threads", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(threads, 0);
    let (status, _) = env
        .call(
            "POST",
            "/threads",
            Some(ALICE),
            Some(json!({ "agent": "agent" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    env.finish().await;
}

#[tokio::test]
async fn an_owner_past_its_stream_limit_gets_429_and_a_closed_stream_frees_a_place() {
    let env = TestEnv::start_with(
        registry(CALL_THEN_DONE, "http://127.0.0.1:9/"),
        |_| {},
        |state| state.with_max_streams(2),
    )
    .await;
    let thread = env.post("/threads", json!({ "agent": "agent" })).await;
    let path = format!("/threads/{}/stream", thread["id"].as_str().unwrap());
    let open = || env.http.get(env.url(&path)).bearer_auth(ALICE).send();
    let first = open().await.unwrap();
    let _second = open().await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let refused = open().await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().contains_key("retry-after"));
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "TooManyRequests");
    // The limit is the owner's, and says so.
    assert_eq!(
        body["message"],
        "the owner of this key already holds 2 open streams (counted over all its keys); close one first"
    );
    // Another owner has places of its own.
    let (status, _) = env.call("GET", &path, Some(BOB), None).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "bob cannot see alice's thread"
    );
    drop(first);
    eventually("a closed stream frees its place", || async {
        let response = open().await.unwrap();
        (response.status() == StatusCode::OK).then_some(())
    })
    .await;
    env.finish().await;
}

/// The API on a port of its own with `limits`; the token stops it.
async fn serve_with(
    env: &TestEnv,
    limits: agentenkit::ServerLimits,
) -> (
    std::net::SocketAddr,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    use agentenkit_api::{ApiKeys, AppState};
    let state = AppState::new(
        env.deployment_of(env.registry.clone(), 1),
        ApiKeys::parse("").unwrap(),
    );
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (addr, server) = agentenkit::serve_api_with(
        state,
        "127.0.0.1:0".parse().unwrap(),
        shutdown.clone(),
        limits,
    )
    .await
    .unwrap();
    (addr, shutdown, server)
}

/// A connection that sends nothing, or only the start of the HTTP/2
/// preface, is closed by the server once the head timeout passes, whether
/// HTTP/2 is served or not (the protocol sniff has no deadline of its own).
#[tokio::test]
async fn a_connection_that_sends_nothing_or_half_a_preface_is_closed() {
    use agentenkit::ServerLimits;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    for http2 in [false, true] {
        let limits = ServerLimits {
            header_read_timeout: Duration::from_millis(500),
            http2,
            ..ServerLimits::default()
        };
        let (addr, shutdown, server) = serve_with(&env, limits).await;
        for opening in [&b""[..], b"PRI * HTTP/2.0"] {
            let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
            client.write_all(opening).await.unwrap();
            let mut rest = Vec::new();
            let closed =
                tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut rest)).await;
            assert!(
                closed.is_ok(),
                "http2 {http2}: a connection that sent {:?} was kept open",
                String::from_utf8_lossy(opening)
            );
        }
        shutdown.cancel();
        server.await.unwrap();
    }
    env.finish().await;
}

/// HTTP/2 is served only when asked for: by default a client speaking it
/// with prior knowledge gets no HTTP/2 answer; with `http2` on, it does.
#[tokio::test]
async fn http2_is_served_only_when_configured() {
    use agentenkit::ServerLimits;

    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    for http2 in [false, true] {
        let (addr, shutdown, server) = serve_with(
            &env,
            ServerLimits {
                http2,
                ..ServerLimits::default()
            },
        )
        .await;
        let h2_client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .http2_only(true)
                .build_http::<http_body_util::Empty<axum::body::Bytes>>();
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            h2_client.get(format!("http://{addr}/healthz").parse().unwrap()),
        )
        .await;
        match answer {
            Ok(Ok(response)) => {
                assert!(http2, "HTTP/2 was served without being configured");
                assert_eq!(response.version(), axum::http::Version::HTTP_2);
                assert!(response.status().is_success());
            }
            Ok(Err(e)) => assert!(!http2, "HTTP/2 configured but not served: {e}"),
            Err(_) => panic!("http2 {http2}: no answer, and the connection was not closed"),
        }
        shutdown.cancel();
        server.await.unwrap();
    }
    env.finish().await;
}

/// The API serves at most `max_connections` connections at once (a new one
/// waits until one closes), and a connection whose request head does not
/// arrive within `header_read_timeout` is closed: idle or trickling
/// clients cannot hold the server.
#[tokio::test]
async fn connections_are_capped_and_a_request_head_must_arrive_in_time() {
    use agentenkit::ServerLimits;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let env = TestEnv::start(approval_registry(CALL_THEN_DONE, "http://127.0.0.1:9/")).await;
    let limits = ServerLimits {
        max_connections: 2,
        header_read_timeout: Duration::from_millis(700),
        ..ServerLimits::default()
    };
    let (addr, shutdown, server) = serve_with(&env, limits).await;
    let healthz = format!("http://{addr}/healthz");
    // Each request on a connection of its own (no pool holding one open).
    let quick = agentenkit_runtime::tls::http_client()
        .timeout(Duration::from_millis(300))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    assert!(quick
        .get(&healthz)
        .send()
        .await
        .unwrap()
        .status()
        .is_success());
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Two clients hold both connections, sending nothing yet.
    let idle_a = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut trickle = tokio::net::TcpStream::connect(addr).await.unwrap();
    trickle
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        quick.get(&healthz).send().await.is_err(),
        "a third connection was served past max_connections"
    );
    // The head never completes: the server closes the connection.
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(3), trickle.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "a trickling request head held its connection"
    );
    drop(idle_a);
    // Room again (the idle one is closed by its timeout or its client).
    let patient = agentenkit_runtime::tls::http_client()
        .timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    assert!(patient
        .get(&healthz)
        .send()
        .await
        .unwrap()
        .status()
        .is_success());
    shutdown.cancel();
    server.await.unwrap();
    env.finish().await;
}

/// A body sent a little at a time cannot hold a connection and a handler
/// for long: past the API's `body_read_timeout` the request is 408 and
/// nothing is done; a body that arrives in time is served.
#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_408_and_changes_nothing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let env = TestEnv::start_with(
        registry(CALL_THEN_DONE, "http://127.0.0.1:9/"),
        |_| {},
        |mut state| {
            state.body_read_timeout = Duration::from_millis(300);
            state
        },
    )
    .await;
    let addr = env.url("").trim_start_matches("http://").to_owned();
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let body = br#"{"agent":"agent"}"#;
    let head = format!(
        "POST /threads HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {ALICE}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    slow.write_all(&body[..5]).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the server answered and closed");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("RequestTimeout"), "{answer}");
    let threads = env
        .rows("SELECT count(*) FROM threads", |row| row.get::<_, i64>(0))
        .await;
    assert_eq!(threads, [0], "nothing was created");
    // A body that arrives in time is served.
    let (status, _) = env
        .call(
            "POST",
            "/threads",
            Some(ALICE),
            Some(json!({ "agent": "agent" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    env.finish().await;
}
