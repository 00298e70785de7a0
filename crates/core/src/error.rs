use thiserror::Error;

/// Errors of the pure domain. Each names what was wrong and the ids involved.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// A replayed run asked for a different checkpoint than the journal holds
    /// at that position: the code is not the code that wrote the journal.
    #[error("non-determinism at journal position {position}: expected {expected:?}, the journal holds {found:?}")]
    NonDeterminism {
        position: u32,
        expected: String,
        found: String,
    },
    /// A state transition that the transition table does not allow.
    #[error("invalid {entity} transition from {from} to {to}")]
    InvalidTransition {
        entity: &'static str,
        from: String,
        to: String,
    },
    /// A string that should name a state, kind or event did not.
    #[error("unknown {what}: {value:?}")]
    Unknown { what: &'static str, value: String },
    /// An id that could not be parsed.
    #[error("invalid {what} id: {value:?}")]
    InvalidId { what: &'static str, value: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
