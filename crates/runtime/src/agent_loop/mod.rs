//! The agent loop: a deterministic function replayed over the run's journal.
//!
//! Every effect goes through [`Checkpointer::checkpoint`]: replayed from the
//! journal when it is there, run and journaled (with the rows it changes, in
//! one transaction) when it is not. A worker that dies anywhere leaves a
//! journal from which the next worker carries on without repeating an effect.
//!
//! The parts import one way only, each from those above it:
//!
//! ```text
//! error, outcome        what goes wrong; what a step comes to
//! checkpoint            the journal of one segment and its commits
//! results               recorded results and replies of calls
//! calls, elicitation,   a step's calls: persisted, run once, or waiting;
//!   delegation          question sets; sub-agents
//! rounds                a call's tool run to its end, through its questions
//! step                  the step loop (run_turn)
//! park, segment         the commits that end a segment
//! ```
//!
//! The worker (consume, lease, ack) calls [`segment::advance`] and
//! [`segment::end`]; nothing here imports the worker.

mod budget;
mod calls;
mod checkpoint;
mod delegation;
mod elicitation;
mod error;
mod outcome;
mod park;
mod provider_limit;
mod results;
mod rounds;
pub mod segment;
mod step;

pub use checkpoint::{Checkpointer, Durability};
pub use error::{CrashPoint, SegmentError};
pub use outcome::{Outcome, ParkItem, PersistedToolCall, Wait};
pub use step::run_turn;

#[cfg(test)]
mod tests;
