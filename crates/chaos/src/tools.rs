//! The chaos run's tool endpoint: it counts every call the workers make, by
//! idempotency key, so the checker can tell an effect done once from one
//! done twice or never.
//!
//! `POST /send` is the approved action (`requires_confirmation`); `POST /job`
//! is a job on another system: its first call (no approval yet) parks the
//! call, its second (the webhook's answer) finishes it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// Which endpoint was called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Endpoint {
    Send,
    Job,
}

/// One call as the endpoint saw it.
#[derive(Debug, Clone)]
pub struct ToolHit {
    pub endpoint: Endpoint,
    pub key: String,
    /// `approval.approved` of the body; `None` when the body carried no
    /// approval (a job's first call).
    pub approved: Option<bool>,
}

/// Every call, in arrival order.
#[derive(Debug, Default)]
pub struct ToolLog {
    hits: Mutex<Vec<ToolHit>>,
}

impl ToolLog {
    fn record(&self, endpoint: Endpoint, body: &Value) -> String {
        let key = body["idempotencyKey"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let approved = body["approval"]["approved"].as_bool();
        self.hits.lock().expect("not poisoned").push(ToolHit {
            endpoint,
            key: key.clone(),
            approved,
        });
        key
    }

    pub fn hits(&self) -> Vec<ToolHit> {
        self.hits.lock().expect("not poisoned").clone()
    }

    /// Effects per idempotency key: calls that carried an approval (the
    /// send itself; a job's finishing call).
    pub fn effects(&self, endpoint: Endpoint) -> BTreeMap<String, u64> {
        let mut effects = BTreeMap::new();
        for hit in self.hits() {
            if hit.endpoint == endpoint && hit.approved == Some(true) {
                *effects.entry(hit.key).or_default() += 1;
            }
        }
        effects
    }

    /// Calls that should never happen: a send without an approval (or with
    /// a denial), a job finished with a denial. A job's first call carries
    /// no approval by design (it parks).
    pub fn unapproved(&self) -> Vec<String> {
        self.hits()
            .into_iter()
            .filter(|hit| match hit.endpoint {
                Endpoint::Send => hit.approved != Some(true),
                Endpoint::Job => hit.approved == Some(false),
            })
            .map(|hit| {
                format!(
                    "{:?} ran for key {} with approval {:?}",
                    hit.endpoint, hit.key, hit.approved
                )
            })
            .collect()
    }
}

/// Serves the endpoints on an ephemeral port; returns the base URL. A send
/// takes `latency` (a real action takes time), so worker kills catch runs
/// mid-tool: the case where a tool may be sent again, with its key.
pub async fn serve(log: Arc<ToolLog>, latency: std::time::Duration) -> anyhow::Result<String> {
    let send_log = log.clone();
    let app = Router::new()
        .route(
            "/send",
            post(move |Json(body): Json<Value>| {
                let log = send_log.clone();
                async move {
                    tokio::time::sleep(latency).await;
                    let key = log.record(Endpoint::Send, &body);
                    Json(json!({ "sent": true, "key": key }))
                }
            }),
        )
        .route(
            "/job",
            post(move |Json(body): Json<Value>| {
                let log = log.clone();
                async move {
                    let key = log.record(Endpoint::Job, &body);
                    if body["approval"].is_null() {
                        Json(json!({ "park": {
                            "reason": "job",
                            "payload": { "jobId": key },
                            "ttlMs": 600_000,
                        } }))
                    } else {
                        Json(json!({ "rendered": body["approval"]["payload"] }))
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(base)
}
