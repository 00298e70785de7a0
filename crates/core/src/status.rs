//! States of runs, threads and tool calls, and their transition tables.
//!
//! Run transitions (anything not listed is rejected):
//!
//! | from \ to  | queued | running | waiting | completed | failed | cancelled |
//! |------------|--------|---------|---------|-----------|--------|-----------|
//! | queued     |        | lease   |         |           | fail   | stop      |
//! | running    | requeue| re-lease| park    | complete  | fail   | stop      |
//! | waiting    | resume |         |         |           | fail   | stop      |
//! | terminal   |        |         |         |           |        |           |
//!
//! `running → running` is a new lease on a run whose previous worker died
//! (its lease ran out); the fencing token changes, the status does not.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::Error;

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident, $what:literal { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $(#[serde(rename = $text)] $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        // By hand: the derive does not see `rename` through a macro's
        // literal, and the wire names are the contract.
        #[cfg(feature = "openapi")]
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some([$($text),+]))
                    .into()
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::ToSchema for $name {}

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self, Error> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(Error::Unknown { what: $what, value: s.to_owned() }),
                }
            }
        }
    };
}
pub(crate) use string_enum;

string_enum!(
    /// The life of one run (a turn, or one delegated sub-agent's work).
    RunStatus, "run status" {
        Queued => "queued",
        Running => "running",
        Waiting => "waiting",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
);

impl RunStatus {
    /// True once the run can never move again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// True while the run occupies its thread: a new turn must wait for it.
    pub fn is_active(self) -> bool {
        !self.is_terminal()
    }

    /// Whether the table in this module's docs allows `self → to`.
    pub fn can_become(self, to: RunStatus) -> bool {
        use RunStatus::*;
        matches!(
            (self, to),
            (Queued, Running | Failed | Cancelled)
                | (
                    Running,
                    Queued | Running | Waiting | Completed | Failed | Cancelled
                )
                | (Waiting, Queued | Failed | Cancelled)
        )
    }

    /// The states from which `to` may be reached, for `WHERE status = ANY($n)`
    /// guards in SQL, so the database enforces the same table.
    pub fn sources_of(to: RunStatus) -> Vec<&'static str> {
        Self::ALL
            .iter()
            .filter(|from| from.can_become(to))
            .map(|from| from.as_str())
            .collect()
    }

    /// Checks a transition against the table.
    pub fn transition(self, to: RunStatus) -> Result<RunStatus, Error> {
        if self.can_become(to) {
            Ok(to)
        } else {
            Err(Error::InvalidTransition {
                entity: "run",
                from: self.to_string(),
                to: to.to_string(),
            })
        }
    }
}

string_enum!(
    /// A thread's status, derived from durable state on every read.
    ThreadStatus, "thread status" {
        Idle => "IDLE",
        Running => "RUNNING",
        WaitingForInput => "WAITING_FOR_INPUT",
    }
);

impl ThreadStatus {
    /// `IDLE` with no active run, `WAITING_FOR_INPUT` with at least one open
    /// request in the current run tree, `RUNNING` otherwise.
    pub fn derive(current_run: Option<RunStatus>, open_requests: usize) -> ThreadStatus {
        match current_run {
            Some(status) if status.is_active() => {
                if open_requests > 0 {
                    ThreadStatus::WaitingForInput
                } else {
                    ThreadStatus::Running
                }
            }
            _ => ThreadStatus::Idle,
        }
    }
}

string_enum!(
    /// How a tool call is handled; resolved once, inside the
    /// `persist:toolcall:<callId>` checkpoint, and read back on replay.
    ToolKind, "tool kind" {
        Function => "function",
        Approval => "approval",
        Park => "park",
        Ask => "ask",
        Delegate => "delegate",
    }
);

impl ToolKind {
    /// `action` for rows a person (or an outside system) answers.
    pub fn tool_type(self) -> &'static str {
        match self {
            ToolKind::Function | ToolKind::Delegate => "function",
            ToolKind::Approval | ToolKind::Park | ToolKind::Ask => "action",
        }
    }
}

string_enum!(
    /// The state of one tool-call row.
    ///
    /// `proposed` is the row as the model proposed it, before it ran or
    /// parked; it is never an open request and cannot be answered.
    ToolCallStatus, "tool call status" {
        Proposed => "proposed",
        PendingApproval => "pending_approval",
        Executed => "executed",
        Rejected => "rejected",
        Expired => "expired",
        Cancelled => "cancelled",
        Failed => "failed",
    }
);

impl ToolCallStatus {
    pub fn can_become(self, to: ToolCallStatus) -> bool {
        use ToolCallStatus::*;
        matches!(
            (self, to),
            // A call a person denied before, proposed again, is rejected
            // without being asked (`DeniedCalls`).
            (
                Proposed,
                PendingApproval | Executed | Rejected | Failed | Cancelled
            ) | (PendingApproval, Executed | Rejected | Expired | Cancelled)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_transition_table_is_exactly_the_documented_one() {
        use RunStatus::*;
        let allowed = [
            (Queued, Running),
            (Queued, Failed),
            (Queued, Cancelled),
            (Running, Queued),
            (Running, Running),
            (Running, Waiting),
            (Running, Completed),
            (Running, Failed),
            (Running, Cancelled),
            (Waiting, Queued),
            (Waiting, Failed),
            (Waiting, Cancelled),
        ];
        for &from in RunStatus::ALL {
            for &to in RunStatus::ALL {
                let expected = allowed.contains(&(from, to));
                assert_eq!(from.can_become(to), expected, "{from} -> {to}");
                assert_eq!(from.transition(to).is_ok(), expected, "{from} -> {to}");
            }
        }
    }

    #[test]
    fn terminal_runs_never_move() {
        for &from in RunStatus::ALL.iter().filter(|s| s.is_terminal()) {
            assert!(RunStatus::ALL.iter().all(|&to| !from.can_become(to)));
        }
    }

    #[test]
    fn sql_sources_match_the_table() {
        assert_eq!(
            RunStatus::sources_of(RunStatus::Queued),
            ["running", "waiting"]
        );
        assert_eq!(
            RunStatus::sources_of(RunStatus::Cancelled),
            ["queued", "running", "waiting"]
        );
    }

    #[test]
    fn thread_status_is_derived_from_the_current_run_and_open_requests() {
        use ThreadStatus::*;
        assert_eq!(ThreadStatus::derive(None, 0), Idle);
        for &run in RunStatus::ALL {
            for open in [0, 1, 2] {
                let expected = match (run.is_terminal(), open) {
                    (true, _) => Idle,
                    (false, 0) => Running,
                    (false, _) => WaitingForInput,
                };
                assert_eq!(
                    ThreadStatus::derive(Some(run), open),
                    expected,
                    "{run} {open}"
                );
            }
        }
    }

    #[test]
    fn tool_call_transition_table() {
        use ToolCallStatus::*;
        let allowed = [
            (Proposed, PendingApproval),
            (Proposed, Executed),
            (Proposed, Rejected),
            (Proposed, Failed),
            (Proposed, Cancelled),
            (PendingApproval, Executed),
            (PendingApproval, Rejected),
            (PendingApproval, Expired),
            (PendingApproval, Cancelled),
        ];
        for &from in ToolCallStatus::ALL {
            for &to in ToolCallStatus::ALL {
                assert_eq!(
                    from.can_become(to),
                    allowed.contains(&(from, to)),
                    "{from} -> {to}"
                );
            }
        }
    }

    #[test]
    fn every_state_round_trips_through_text() {
        for &s in RunStatus::ALL {
            assert_eq!(s.as_str().parse::<RunStatus>(), Ok(s));
        }
        for &s in ToolCallStatus::ALL {
            assert_eq!(s.as_str().parse::<ToolCallStatus>(), Ok(s));
        }
        for &s in ToolKind::ALL {
            assert_eq!(s.as_str().parse::<ToolKind>(), Ok(s));
        }
        for &s in ThreadStatus::ALL {
            assert_eq!(s.as_str().parse::<ThreadStatus>(), Ok(s));
        }
        assert!("nope".parse::<RunStatus>().is_err());
    }

    #[test]
    fn only_person_answered_kinds_are_actions() {
        assert_eq!(ToolKind::Function.tool_type(), "function");
        assert_eq!(ToolKind::Delegate.tool_type(), "function");
        assert_eq!(ToolKind::Approval.tool_type(), "action");
        assert_eq!(ToolKind::Park.tool_type(), "action");
        assert_eq!(ToolKind::Ask.tool_type(), "action");
    }
}
