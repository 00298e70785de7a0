//! A webhook receiver in the bench process, for `--notify`: it takes every
//! notification with a 204 and counts them (what a target costs the fleet
//! is what is measured; checking signatures is the target's own work).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub struct Receiver {
    pub url: String,
    received: Arc<AtomicUsize>,
}

impl Receiver {
    pub async fn start() -> anyhow::Result<Receiver> {
        let received = Arc::new(AtomicUsize::new(0));
        let counted = received.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move || {
                counted.fetch_add(1, Ordering::Relaxed);
                async { axum::http::StatusCode::NO_CONTENT }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Receiver { url, received })
    }

    /// Notifications taken so far.
    pub fn received(&self) -> usize {
        self.received.load(Ordering::Relaxed)
    }
}
