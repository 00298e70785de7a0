use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error("broker connection failed: {0}")]
    Connection(String),
    #[error("publish was not confirmed by the broker: {0}")]
    NotConfirmed(String),
    #[error("broker operation failed: {0}")]
    Broker(String),
    #[error("the queue is closed")]
    Closed,
    #[error("delay of {0} ms is beyond the longest supported delay")]
    DelayTooLong(u64),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
