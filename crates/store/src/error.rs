use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error("store configuration: {0}")]
    Config(String),
    #[error("database pool: {}", with_causes(.0))]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("database: {}", with_causes(.0))]
    Db(#[from] tokio_postgres::Error),
    #[error("{what} {id} not found")]
    NotFound { what: &'static str, id: String },
    #[error("thread {thread_id} has an active run {run_id}")]
    RunActive { thread_id: String, run_id: String },
    /// A rollback of a run in which a tool with side effects already ran.
    #[error("run {run_id} already ran {tool}, which is not read-only: it cannot be rolled back")]
    SideEffects { run_id: String, tool: String },
    /// An edit addressed to a message that is not a turn's user message.
    #[error("message {message_id} is not a user message of a turn")]
    NotATurn { message_id: i64 },
    /// A fork at a message of a sub-agent's run, not of the conversation.
    #[error("message {message_id} is a sub-agent's, not the conversation's")]
    SubAgentMessage { message_id: i64 },
    /// The worker's lease ran out or was taken over: its writes are refused.
    #[error("lease on run {run_id} is lost")]
    LeaseLost { run_id: String },
    /// Answers (or a skip) addressed to a call that waits on a verdict.
    #[error("this call waits on a verdict ({kind}), not on answers")]
    ReplyMismatch { kind: String },
    /// Answers that do not fit the stored question set.
    #[error("the answers do not fit the question set")]
    InvalidAnswers(Vec<agentenkit_core::questions::Issue>),
    /// Edited arguments for a call that is not an approval.
    #[error("only an approval's arguments can be edited; this call is a {kind}")]
    CannotEdit { kind: String },
    /// Edited arguments that do not fit the tool's input schema.
    #[error("the edited arguments do not fit the tool's input schema")]
    InvalidArguments(Vec<agentenkit_core::questions::Issue>),
    /// The answer named the `argumentsHash` it was shown, and the call's
    /// arguments hash otherwise.
    #[error("the call's argumentsHash is {actual}, not {expected}")]
    ArgumentsHashMismatch { expected: String, actual: String },
    /// `respond` by thread named a call id that more than one open request
    /// of the current run tree has.
    #[error("tool call {tool_call_id} is open in more than one run: {run_ids:?}")]
    AmbiguousToolCall {
        tool_call_id: String,
        run_ids: Vec<agentenkit_core::RunId>,
    },
    /// The caller's key lacks the scope this answer needs.
    #[error("this key lacks the scope {missing}")]
    Forbidden { missing: agentenkit_core::KeyScope },
    /// A multi-party approval from a key in none of its groups.
    #[error("only a key in one of the groups {groups:?} may approve this call")]
    NotAnApprover { groups: Vec<String> },
    /// A batch attempt whose idempotency key another attempt took over
    /// (it held it past the stale time): it settles nothing more.
    #[error("idempotency key {key:?} was taken over by a retry")]
    IdempotencyKeyTakenOver { key: String },
    /// A message's `Idempotency-Key` was first used with another message.
    #[error("idempotency key {key:?} was used with another request")]
    IdempotencyKeyReused { key: String },
    /// The request's run is pinned to another version of its agent than
    /// the one the caller's checks implement: check by that one.
    #[error("the run is pinned to version {version} of agent {agent:?}")]
    PinnedToOtherVersion { agent: String, version: String },
    #[error("corrupt row: {0}")]
    Corrupt(String),
    #[error("migration {version} failed: {message}")]
    Migration { version: i32, message: String },
}

/// An error and what caused it, as one line: "error performing TLS
/// handshake" alone does not say that the certificate names another host.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

impl From<agentenkit_core::Error> for Error {
    fn from(e: agentenkit_core::Error) -> Self {
        Error::Corrupt(e.to_string())
    }
}

/// A journal entry that cannot be read back is a corrupt run: replay must
/// not guess.
impl From<crate::format::journal::UnpackJournalError> for Error {
    fn from(e: crate::format::journal::UnpackJournalError) -> Self {
        Error::Corrupt(e.to_string())
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Corrupt(e.to_string())
    }
}

impl Error {
    /// The database is unreachable or saturated (no pooled connection
    /// within the wait, a connection lost, a statement cancelled by
    /// `statement_timeout`): nothing was committed, and trying again later
    /// may succeed. The API answers 503.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Pool(_) => true,
            Error::Db(e) => {
                e.is_closed()
                    || e.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED)
                    || e.code() == Some(&tokio_postgres::error::SqlState::TOO_MANY_CONNECTIONS)
                    || e.code() == Some(&tokio_postgres::error::SqlState::ADMIN_SHUTDOWN)
                    || e.code() == Some(&tokio_postgres::error::SqlState::CANNOT_CONNECT_NOW)
            }
            _ => false,
        }
    }

    /// Postgres aborted the transaction for a deadlock or a serialization
    /// failure: everything it did rolled back, so running it again is safe.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Db(e) if e.code().is_some_and(|c| {
            *c == tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED
                || *c == tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE
        }))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
