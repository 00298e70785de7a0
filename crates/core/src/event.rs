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
        ApprovalRecorded => "APPROVAL_RECORDED",
        MessageQueued => "MESSAGE_QUEUED",
        ConversationCut => "CONVERSATION_CUT",
        ThreadForked => "THREAD_FORKED",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

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
                "RUN_CANCELLED",
                "APPROVAL_RECORDED",
                "MESSAGE_QUEUED",
                "CONVERSATION_CUT",
                "THREAD_FORKED"
            ]
        );
        for e in EventType::ALL {
            assert_eq!(e.as_str().parse::<EventType>().as_ref(), Ok(e));
        }
    }
}
