//! How a segment goes wrong, by what to do about it, and the crash hook
//! tests use to kill a worker at a named point.

use std::sync::Arc;

use thiserror::Error;

/// A test hook: called with each new checkpoint's name right after it
/// committed; `true` makes the worker die there (no ack, no release).
pub type CrashPoint = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// What went wrong inside a segment, by what to do about it.
#[derive(Debug, Error)]
pub enum SegmentError {
    /// Fail the run: retrying cannot help (non-determinism, step limit).
    #[error("{0}")]
    Permanent(String),
    /// Retry the step after a delay (model error, unavailable tool).
    #[error("{0}")]
    Retry(String),
    /// The model provider refused the request (a 4xx other than 408, 409
    /// and 429): fail the run at once with the provider's own message.
    #[error("the model provider refused the request ({status}): {message}")]
    ModelRefused { status: u16, message: String },
    /// The model provider is rate limiting and said for how long: what the
    /// segment did is committed and the run waits `wait` in a delayed
    /// message, holding no worker (no attempt is spent).
    #[error("{message}")]
    RateLimited {
        provider: String,
        /// `retry_after` (the provider said), or `fleet_limit` (the
        /// model's `requests_per_minute` or `tokens_per_minute`).
        cause: &'static str,
        wait: std::time::Duration,
        message: String,
    },
    /// Another worker holds the run now: stop, change nothing.
    #[error("lease lost")]
    LeaseLost,
    /// The store failed: hand the message back for later.
    #[error("store: {0}")]
    Store(agentenkit_store::Error),
    /// A test's crash point fired: behave as a dead process.
    #[error("crashed at a crash point")]
    Crashed,
    /// A tool asked to park; the step loop turns this into a park and it
    /// never leaves a segment.
    #[error("a tool parked outside a step")]
    Parked(crate::tool::ParkRequest),
    /// A tool asked questions or to wait; the call's rounds turn this
    /// into a park and it never leaves a segment.
    #[error("a tool asked questions or to wait outside a step")]
    Asked(Box<super::outcome::Round>),
}

impl From<agentenkit_store::Error> for SegmentError {
    /// Only what can pass is handed back to the queue (connections, the
    /// pool, deadlocks, serialization failures); an error that would repeat
    /// on every delivery (bad data, a violated constraint) fails the run
    /// rather than looping for ever and re-running its tools.
    fn from(e: agentenkit_store::Error) -> Self {
        use agentenkit_store::Error as E;
        match e {
            E::LeaseLost { .. } => SegmentError::LeaseLost,
            E::Db(ref db)
                if db.code().is_some_and(|c| {
                    let code = c.code();
                    code.starts_with("22") || code.starts_with("23")
                }) =>
            {
                SegmentError::Permanent(format!("the store refused a write: {e}"))
            }
            E::Corrupt(message) => SegmentError::Permanent(message),
            E::Pool(_) | E::Db(_) => SegmentError::Store(e),
            other => SegmentError::Permanent(other.to_string()),
        }
    }
}
