//! The conversation a model sees, and what a model answers.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::ToolCallId;

/// One tool call as the model proposed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolCallRequest {
    pub id: ToolCallId,
    pub name: String,
    #[serde(default)]
    pub arguments: Value,
}

/// Token counts the model reported for one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// A model's answer to one call: text, tool calls, or both.
/// This is the value journaled under `model:<n>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRequest>,
    #[serde(default)]
    pub usage: Usage,
}

/// One message of a thread's conversation, as stored and as sent to models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    User {
        content: String,
    },
    #[serde(rename_all = "camelCase")]
    Assistant {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCallRequest>,
    },
    #[serde(rename_all = "camelCase")]
    Tool {
        tool_call_id: ToolCallId,
        name: String,
        content: Value,
    },
}

impl Message {
    pub fn role(&self) -> &'static str {
        match self {
            Message::User { .. } => "user",
            Message::Assistant { .. } => "assistant",
            Message::Tool { .. } => "tool",
        }
    }

    pub fn assistant(response: &ModelResponse) -> Message {
        Message::Assistant {
            content: response.text.clone(),
            tool_calls: response.tool_calls.clone(),
        }
    }
}

/// What a message sent to a thread whose run is still active does with
/// that run (docs/conversations.md). A thread without an active run starts
/// the message's turn at once, whatever this says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum OnActive {
    /// Refused (409 `RunActive`); nothing is kept.
    #[default]
    Reject,
    /// Kept, and its turn starts when the active run (and every turn
    /// queued before it) has ended.
    Enqueue,
    /// The active run stops where it is; what it did stays in the
    /// conversation; the new turn starts.
    Interrupt,
    /// As `Interrupt`, and the stopped run leaves the conversation the
    /// model sees: refused when a tool that is not read-only ran in it.
    Rollback,
    /// The message joins the active run at its next model call, after the
    /// results of the current step, without stopping it (a parked run
    /// receives it when it resumes; one that ends first starts a turn with
    /// it instead).
    Steer,
}

/// The conversation as a strict provider accepts it: every assistant tool
/// call answered before the next user or assistant message. A call left
/// without a result (its run was stopped, failed or cancelled while it
/// waited) gets `{"cancelled": true}` after the results it has; a result
/// that answers no open call (a repeat, or one whose call is not in the
/// history) is left out. Pure: the same history gives the same answer, so
/// what a model is sent never depends on when it is sent.
pub fn close_open_calls(messages: &[Message]) -> Vec<Message> {
    fn cancel(open: &mut Vec<(ToolCallId, String)>, into: &mut Vec<Message>) {
        for (id, name) in open.drain(..) {
            into.push(Message::Tool {
                tool_call_id: id,
                name,
                content: serde_json::json!({ "cancelled": true }),
            });
        }
    }
    let mut closed = Vec::with_capacity(messages.len());
    let mut open: Vec<(ToolCallId, String)> = Vec::new();
    for message in messages {
        match message {
            Message::Tool { tool_call_id, .. } => {
                if let Some(at) = open.iter().position(|(id, _)| id == tool_call_id) {
                    open.remove(at);
                    closed.push(message.clone());
                }
            }
            Message::User { .. } => {
                cancel(&mut open, &mut closed);
                closed.push(message.clone());
            }
            Message::Assistant { tool_calls, .. } => {
                cancel(&mut open, &mut closed);
                closed.push(message.clone());
                for call in tool_calls {
                    if !open.iter().any(|(id, _)| id == &call.id) {
                        open.push((call.id.clone(), call.name.clone()));
                    }
                }
            }
        }
    }
    cancel(&mut open, &mut closed);
    closed
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn user(text: &str) -> Message {
        Message::User {
            content: text.into(),
        }
    }

    fn calls(ids: &[&str]) -> Message {
        Message::Assistant {
            content: None,
            tool_calls: ids
                .iter()
                .map(|id| ToolCallRequest {
                    id: (*id).into(),
                    name: "t".into(),
                    arguments: json!({}),
                })
                .collect(),
        }
    }

    fn result(id: &str) -> Message {
        Message::Tool {
            tool_call_id: id.into(),
            name: "t".into(),
            content: json!("ok"),
        }
    }

    fn cancelled(id: &str) -> Message {
        Message::Tool {
            tool_call_id: id.into(),
            name: "t".into(),
            content: json!({ "cancelled": true }),
        }
    }

    #[test]
    fn a_stopped_turns_open_call_is_cancelled_before_the_next_turn() {
        let history = [user("a"), calls(&["c1", "c2"]), result("c2"), user("b")];
        assert_eq!(
            close_open_calls(&history),
            [
                user("a"),
                calls(&["c1", "c2"]),
                result("c2"),
                cancelled("c1"),
                user("b")
            ]
        );
    }

    #[test]
    fn stray_and_repeated_results_are_left_out() {
        let history = [
            user("a"),
            result("c9"),
            calls(&["c1"]),
            result("c1"),
            result("c1"),
        ];
        assert_eq!(
            close_open_calls(&history),
            [user("a"), calls(&["c1"]), result("c1")]
        );
    }

    fn any_message() -> impl Strategy<Value = Message> {
        let id = prop::sample::select(vec!["c1", "c2", "c3"]);
        prop_oneof![
            Just(user("u")),
            prop::collection::vec(id.clone(), 0..3).prop_map(|ids| calls(&ids)),
            id.prop_map(result),
        ]
    }

    proptest! {
        /// Whatever the history, the closed one answers every call exactly
        /// once before the next turn, and closing it again changes nothing.
        #[test]
        fn every_call_is_answered_once_before_the_next_turn(
            history in prop::collection::vec(any_message(), 0..20)
        ) {
            let closed = close_open_calls(&history);
            let mut open: Vec<ToolCallId> = Vec::new();
            for message in &closed {
                match message {
                    Message::Tool { tool_call_id, .. } => {
                        let at = open.iter().position(|id| id == tool_call_id);
                        prop_assert!(at.is_some(), "a result for no open call");
                        open.remove(at.unwrap());
                    }
                    Message::User { .. } => prop_assert!(open.is_empty()),
                    Message::Assistant { tool_calls, .. } => {
                        prop_assert!(open.is_empty());
                        for call in tool_calls {
                            if !open.contains(&call.id) {
                                open.push(call.id.clone());
                            }
                        }
                    }
                }
            }
            prop_assert!(open.is_empty());
            prop_assert_eq!(close_open_calls(&closed), closed.clone());
            // Nothing but results is ever added or dropped.
            let turns = |m: &[Message]| m.iter().filter(|m| !matches!(m, Message::Tool { .. })).count();
            prop_assert_eq!(turns(&closed), turns(&history));
        }
    }

    #[test]
    fn messages_have_a_stable_wire_form() {
        let m = Message::Assistant {
            content: None,
            tool_calls: vec![ToolCallRequest {
                id: "c1".into(),
                name: "send_email".into(),
                arguments: json!({"to": "a@b.c"}),
            }],
        };
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            v,
            json!({"role": "assistant", "toolCalls": [{"id": "c1", "name": "send_email", "arguments": {"to": "a@b.c"}}]})
        );
        assert_eq!(serde_json::from_value::<Message>(v).unwrap(), m);
        let t = Message::Tool {
            tool_call_id: "c1".into(),
            name: "x".into(),
            content: json!(1),
        };
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            json!({"role": "tool", "toolCallId": "c1", "name": "x", "content": 1})
        );
    }

    #[test]
    fn a_text_response_omits_empty_tool_calls() {
        let r = ModelResponse {
            text: Some("Done.".into()),
            tool_calls: vec![],
            usage: Usage {
                input_tokens: 3,
                output_tokens: 1,
            },
        };
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"text": "Done.", "usage": {"inputTokens": 3, "outputTokens": 1}})
        );
    }
}
