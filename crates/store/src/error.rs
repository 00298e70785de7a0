use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error("store configuration: {0}")]
    Config(String),
    #[error("database pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("database: {0}")]
    Db(#[from] tokio_postgres::Error),
    #[error("{what} {id} not found")]
    NotFound { what: &'static str, id: String },
    #[error("thread {thread_id} has an active run {run_id}")]
    RunActive { thread_id: String, run_id: String },
    /// The worker's lease ran out or was taken over: its writes are refused.
    #[error("lease on run {run_id} is lost")]
    LeaseLost { run_id: String },
    /// Answers (or a skip) addressed to a call that waits on a verdict.
    #[error("this call waits on a verdict ({kind}), not on answers")]
    ReplyMismatch { kind: String },
    /// Answers that do not fit the stored question set.
    #[error("the answers do not fit the question set")]
    InvalidAnswers(Vec<agentenkit_core::questions::Issue>),
    #[error("corrupt row: {0}")]
    Corrupt(String),
    #[error("migration {version} failed: {message}")]
    Migration { version: i32, message: String },
}

impl From<agentenkit_core::Error> for Error {
    fn from(e: agentenkit_core::Error) -> Self {
        Error::Corrupt(e.to_string())
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Corrupt(e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
