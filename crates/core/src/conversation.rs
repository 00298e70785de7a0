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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
