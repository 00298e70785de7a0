use thiserror::Error;

/// Errors of the runtime's public API (configuration, registry, start-up).
/// Errors inside a segment are [`crate::agent_loop::SegmentError`]: they decide
/// what happens to the run, not to the caller.
#[derive(Debug, Error)]
pub enum Error {
    #[error("agent file {path}: {message}")]
    AgentFile { path: String, message: String },
    #[error("invalid agent configuration: {0}")]
    Config(String),
    #[error("unknown agent {0:?}")]
    UnknownAgent(String),
    /// A caller's input that cannot be stored or names nothing (an empty
    /// call id, text with a NUL character): nothing was changed.
    #[error("{0}")]
    InvalidInput(String),
    /// The version of its agent a request's run is pinned to cannot be
    /// built here: the answer waits for a process that can.
    #[error("{0}")]
    VersionUnavailable(String),
    #[error(transparent)]
    Store(#[from] agentenkit_store::Error),
    #[error(transparent)]
    Queue(#[from] agentenkit_queue::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
