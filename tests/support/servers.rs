//! Local HTTP endpoints the tests run tools against.

use super::*;

type Behavior = dyn Fn(usize, &Value) -> (StatusCode, Value) + Send + Sync;

/// An HTTP tool endpoint on 127.0.0.1 that records every call.
pub struct ToolServer {
    pub url: String,
    calls: Arc<AtomicUsize>,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl ToolServer {
    /// Answers every call with `{"ok": true, "n": <call number>}`.
    pub async fn ok() -> ToolServer {
        Self::start(|n, _| (StatusCode::OK, serde_json::json!({ "ok": true, "n": n }))).await
    }

    /// `behavior(n, body)` answers the n-th call (1-based).
    pub async fn start(
        behavior: impl Fn(usize, &Value) -> (StatusCode, Value) + Send + Sync + 'static,
    ) -> ToolServer {
        Self::start_with_delay(Duration::ZERO, behavior).await
    }

    /// Like `start`, answering each call only after `delay`.
    pub async fn start_with_delay(
        delay: Duration,
        behavior: impl Fn(usize, &Value) -> (StatusCode, Value) + Send + Sync + 'static,
    ) -> ToolServer {
        let calls = Arc::new(AtomicUsize::new(0));
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let behavior: Arc<Behavior> = Arc::new(behavior);
        let (c, b) = (calls.clone(), bodies.clone());
        let app = axum::Router::new().route(
            "/tool",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let (calls, bodies, behavior) = (c.clone(), b.clone(), behavior.clone());
                async move {
                    let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                    bodies.lock().expect("bodies").push(body.clone());
                    let (status, answer) = behavior(n, &body);
                    tokio::time::sleep(delay).await;
                    (status, axum::Json(answer))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ToolServer {
            url: format!("http://{addr}/tool"),
            calls,
            bodies,
        }
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    pub fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().expect("bodies").clone()
    }
}
