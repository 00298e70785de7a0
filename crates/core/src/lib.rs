//! The pure domain of agentenkit.
//!
//! Everything here is plain data and functions over it: ids, the states of
//! runs, threads and tool calls with their transition tables, the journal and
//! its replay cursor, the conversation types, and the wire form of queue
//! messages. No IO, no async runtime: the IO crates (`store`, `queue`,
//! `runtime`, `api`) carry out what this crate decides.

pub mod answer_rules;
pub mod approvals;
pub mod budget;
pub mod call;
pub mod canonical;
pub mod conversation;
pub mod denials;
pub mod error;
pub mod event;
pub mod fork;
pub mod ids;
pub mod journal;
pub mod notify;
pub mod questions;
pub mod queue_message;
pub mod reply;
pub mod scopes;
pub mod shares;
pub mod status;
pub mod trace;

pub use call::{CallEvent, CallState, RunCall};
pub use error::{Error, Result};
pub use event::EventType;
pub use ids::{Owner, RunId, ThreadId, ToolCallId};
pub use journal::{JournalEntry, Replay, ReplayStep};
pub use queue_message::QueueMessage;
pub use scopes::{KeyScope, KeyScopes};
pub use status::{RunStatus, ThreadStatus, ToolCallStatus, ToolKind};
pub use trace::TraceContext;
