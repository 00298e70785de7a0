//! An http tool against a real local endpoint: its answer is capped,
//! redirects are not followed, a slow endpoint times out, and errors never
//! carry the credentials or query of its URL.

use std::time::Duration;

use agentenkit_core::{RunId, ThreadId, ToolCallId};
use agentenkit_runtime::tool::{HttpTool, Tool, ToolContext, ToolError, ToolSpec};
use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;

/// Serves the routes below on 127.0.0.1; returns `http://addr`.
async fn endpoint() -> String {
    let app = axum::Router::new()
        .route(
            "/big",
            post(|| async { (StatusCode::OK, "x".repeat(2048)).into_response() }),
        )
        .route(
            "/chunked",
            post(|| async {
                // No Content-Length: the cap must hold while reading.
                let chunks = (0..64).map(|_| Ok::<_, std::io::Error>(vec![b' '; 64]));
                Response::builder()
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from_stream(futures::stream::iter(chunks)))
                    .unwrap()
            }),
        )
        .route(
            "/redirect",
            post(|| async { (StatusCode::FOUND, [(header::LOCATION, "/ok")], "").into_response() }),
        )
        .route("/ok", post(|| async { axum::Json(json!({ "ok": true })) }))
        .route(
            "/slow",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                axum::Json(json!({ "late": true }))
            }),
        )
        .route("/down", post(|| async { StatusCode::SERVICE_UNAVAILABLE }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

fn tool(url: String) -> HttpTool {
    HttpTool::new(
        ToolSpec {
            name: "t".into(),
            description: String::new(),
            input_schema: json!({ "type": "object" }),
        },
        url,
        false,
    )
    .expect("an http tool")
}

async fn call(tool: &HttpTool) -> Result<serde_json::Value, ToolError> {
    let ctx = ToolContext {
        run_id: RunId::new(),
        thread_id: ThreadId::new(),
        tool_call_id: ToolCallId::from("c1"),
        approval: None,
        answers: None,
    };
    tool.execute(json!({}), &ctx).await
}

#[tokio::test]
async fn an_answer_over_the_cap_is_a_failure_the_model_sees() {
    let base = endpoint().await;
    for path in ["/big", "/chunked"] {
        let capped = tool(format!("{base}{path}")).with_max_response_bytes(1024);
        match call(&capped).await {
            Err(ToolError::Failed(message)) => {
                assert!(message.contains("larger than 1024 bytes"), "{message}")
            }
            other => panic!("{path}: expected a failure, got {other:?}"),
        }
    }
    // Under the cap the same answers are read whole.
    let roomy = tool(format!("{base}/chunked")).with_max_response_bytes(8192);
    assert!(matches!(call(&roomy).await, Err(ToolError::Failed(m)) if m.contains("invalid JSON")));
}

#[tokio::test]
async fn a_redirect_is_not_followed() {
    let base = endpoint().await;
    match call(&tool(format!("{base}/redirect"))).await {
        Err(ToolError::Failed(message)) => {
            assert!(message.contains("redirect"), "{message}")
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(
        call(&tool(format!("{base}/ok"))).await.unwrap(),
        json!({ "ok": true })
    );
}

#[tokio::test]
async fn a_slow_endpoint_times_out_as_transient() {
    let base = endpoint().await;
    let quick = tool(format!("{base}/slow"))
        .with_timeout(Duration::from_millis(200))
        .expect("a client");
    let started = std::time::Instant::now();
    match call(&quick).await {
        Err(ToolError::Transient(message)) => assert!(
            message.contains("timed out") && message.contains("200 ms"),
            "the error names the timeout: {message}"
        ),
        other => panic!("expected a transient error, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "it did not wait the endpoint out"
    );
}

#[tokio::test]
async fn errors_never_show_the_urls_credentials_or_query() {
    let base = endpoint().await;
    let secret_url =
        base.replace("http://", "http://svc:pass-secret@") + "/down?token=query-secret";
    let failing = tool(secret_url);
    let message = match call(&failing).await {
        Err(ToolError::Transient(message)) => message,
        other => panic!("expected a transient error, got {other:?}"),
    };
    assert!(!message.contains("secret"), "{message}");
    assert!(
        message.contains(&base.replace("http://", "")),
        "the endpoint's origin is still named: {message}"
    );
    assert!(!message.contains("/down"), "nor its path: {message}");
    // Unreachable: reqwest's own error text names the URL; it is removed.
    let unreachable = tool("http://svc:pass-secret@127.0.0.1:9/x?token=query-secret".into());
    match call(&unreachable).await {
        Err(ToolError::Transient(message)) => assert!(!message.contains("secret"), "{message}"),
        other => panic!("expected a transient error, got {other:?}"),
    }
}
