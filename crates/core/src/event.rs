//! Event types of a thread's append-only stream.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::status::string_enum;
use crate::Error;

string_enum!(
    EventType, "event type" {
        RunStarted => "RUN_STARTED",
        Message => "MESSAGE",
        ToolCall => "TOOL_CALL",
        ToolResult => "TOOL_RESULT",
        InputRequired => "INPUT_REQUIRED",
        InputResolved => "INPUT_RESOLVED",
        Elicitation => "ELICITATION",
        RunCompleted => "RUN_COMPLETED",
        RunFailed => "RUN_FAILED",
        RunCancelled => "RUN_CANCELLED",
    }
);

impl EventType {
    /// The type's code where an events row holds several events (their
    /// `layout`, migration 0018, whose `event_type_codes` table says the
    /// same): stored, so a code is never reused or renumbered.
    pub fn code(self) -> u8 {
        match self {
            EventType::RunStarted => 1,
            EventType::Message => 2,
            EventType::ToolCall => 3,
            EventType::ToolResult => 4,
            EventType::InputRequired => 5,
            EventType::InputResolved => 6,
            EventType::Elicitation => 7,
            EventType::RunCompleted => 8,
            EventType::RunFailed => 9,
            EventType::RunCancelled => 10,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_never_zero() {
        let mut codes: Vec<u8> = EventType::ALL.iter().map(|e| e.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), EventType::ALL.len());
        assert!(!codes.contains(&0));
    }

    #[test]
    fn event_names_are_the_spec_names() {
        let names: Vec<_> = EventType::ALL.iter().map(|e| e.as_str()).collect();
        assert_eq!(
            names,
            [
                "RUN_STARTED",
                "MESSAGE",
                "TOOL_CALL",
                "TOOL_RESULT",
                "INPUT_REQUIRED",
                "INPUT_RESOLVED",
                "ELICITATION",
                "RUN_COMPLETED",
                "RUN_FAILED",
                "RUN_CANCELLED"
            ]
        );
        for e in EventType::ALL {
            assert_eq!(e.as_str().parse::<EventType>().as_ref(), Ok(e));
        }
    }
}
