//! The chaos run's HTTP client: it behaves like a real one during an
//! outage — a refused connection, a timeout or a 5xx is retried with
//! backoff until the client's patience runs out — and counts what it did.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::Value;

/// One request's longest wait for an answer before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// A request slower than this is counted (and logged) as slow.
const SLOW: Duration = Duration::from_secs(2);

/// What the clients did, over the whole run.
#[derive(Debug, Default)]
pub struct ClientStats {
    pub requests: AtomicU64,
    pub retries: AtomicU64,
    pub connection_errors: AtomicU64,
    /// 5xx answers by status code (each retried).
    pub server_errors: Mutex<BTreeMap<u16, u64>>,
    /// Requests abandoned after `patience`.
    pub gave_up: AtomicU64,
    /// Requests that took over 2 s to answer (or fail).
    pub slow: AtomicU64,
}

pub struct Api {
    http: reqwest::Client,
    base: String,
    key: String,
    patience: Duration,
    pub stats: ClientStats,
}

impl Api {
    pub fn new(base: String, key: String, patience: Duration) -> anyhow::Result<Api> {
        let http = agentenkit_runtime::tls::http_client()
            .timeout(REQUEST_TIMEOUT)
            .pool_max_idle_per_host(64)
            .build()?;
        Ok(Api {
            http,
            base,
            key,
            patience,
            stats: ClientStats::default(),
        })
    }

    /// Sends until an answer that is not a 5xx comes back; returns its
    /// status and JSON body (`Null` when it had none).
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let give_up_at = Instant::now() + self.patience;
        let mut backoff = FIRST_BACKOFF;
        let mut last_error;
        loop {
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
            let mut request = self
                .http
                .request(method.clone(), format!("{}{path}", self.base))
                .bearer_auth(&self.key);
            if let Some(body) = body {
                request = request.json(body);
            }
            let sent_at = Instant::now();
            let outcome = request.send().await;
            let took = sent_at.elapsed();
            if took > SLOW {
                self.stats.slow.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%method, path, ?took, ok = outcome.is_ok(), "slow request");
            }
            match outcome {
                Ok(response) if response.status().is_server_error() => {
                    let status = response.status().as_u16();
                    *self
                        .stats
                        .server_errors
                        .lock()
                        .expect("not poisoned")
                        .entry(status)
                        .or_default() += 1;
                    last_error = format!("{status}");
                }
                Ok(response) => {
                    let status = response.status().as_u16();
                    // A body cut off by a dying API is a failed request too.
                    match response.bytes().await {
                        Ok(bytes) => {
                            let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                            return Ok((status, value));
                        }
                        Err(e) => {
                            self.stats.connection_errors.fetch_add(1, Ordering::Relaxed);
                            last_error = e.to_string();
                        }
                    }
                }
                Err(e) => {
                    self.stats.connection_errors.fetch_add(1, Ordering::Relaxed);
                    last_error = e.to_string();
                }
            }
            if Instant::now() + backoff > give_up_at {
                self.stats.gave_up.fetch_add(1, Ordering::Relaxed);
                anyhow::bail!(
                    "{method} {path}: no answer within {:?} (last: {last_error})",
                    self.patience
                );
            }
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<(u16, Value)> {
        self.send(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> anyhow::Result<(u16, Value)> {
        self.send(Method::POST, path, Some(body)).await
    }
}

/// A small deterministic generator (SplitMix64): the same seed gives the
/// same load and the same fault schedule.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// Uniform between `low` and `high`.
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let span = high.saturating_sub(low).as_millis() as u64;
        low + Duration::from_millis(self.below(span + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_deterministic_and_stays_in_range() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..1000 {
            let x = a.below(10);
            assert_eq!(x, b.below(10));
            assert!(x < 10);
            let d = a.between(Duration::from_millis(500), Duration::from_secs(2));
            b.between(Duration::from_millis(500), Duration::from_secs(2));
            assert!(d >= Duration::from_millis(500) && d <= Duration::from_secs(2));
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }
}
