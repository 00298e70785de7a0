//! `provider = "anthropic"`: the Messages API.

use agentenkit_core::conversation::{
    close_open_calls, Message, ModelResponse, ToolCallRequest, Usage,
};
use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::{json, Map, Value};

use super::http::{header, ProviderClient, ProviderSettings};
use super::{Model, ModelError, ModelRequest};
use crate::tool::ToolSpec;

pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
pub const API_VERSION: &str = "2023-06-01";
pub const DEFAULT_MAX_TOKENS: u32 = 1024;

#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    pub model: String,
    pub max_tokens: u32,
    pub provider: ProviderSettings,
}

pub struct AnthropicModel {
    config: AnthropicConfig,
    client: ProviderClient,
}

impl AnthropicModel {
    pub fn new(config: AnthropicConfig) -> Result<Self, String> {
        let client = ProviderClient::new("anthropic", config.provider.clone())?;
        Ok(Self { config, client })
    }

    fn body(&self, request: &ModelRequest<'_>) -> Value {
        let mut body = json!({
            "model": self.config.model,
            "max_tokens": self.config.max_tokens,
            "messages": messages(request.messages),
        });
        if !request.system.is_empty() {
            body["system"] = json!(request.system);
        }
        if !request.tools.is_empty() {
            body["tools"] = tools(request.tools);
        }
        body
    }
}

#[async_trait]
impl Model for AnthropicModel {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        let mut headers = HeaderMap::new();
        headers.extend(header("anthropic-version", API_VERSION));
        if let Some(key) = self.client.key() {
            headers.extend(header("x-api-key", key.expose()));
        }
        let answer = self
            .client
            .post("/v1/messages", headers, &self.body(&request))
            .await?;
        parse(&answer)
            .map(|response| super::names_from_wire(response, request.tools))
            .map_err(|e| ModelError::Transient(format!("anthropic: {e}")))
    }

    fn id(&self) -> super::ModelId<'_> {
        super::ModelId {
            provider: "anthropic",
            model: &self.config.model,
        }
    }
}

/// The conversation as Messages API turns: content blocks, the results of
/// one step in one following `user` message, consecutive messages of one
/// role merged (the API wants user and assistant to alternate), every open
/// call closed.
pub(crate) fn messages(conversation: &[Message]) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in close_open_calls(conversation) {
        let (role, blocks) = match message {
            Message::User { content } => ("user", vec![json!({ "type": "text", "text": content })]),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut blocks = Vec::with_capacity(tool_calls.len() + 1);
                if let Some(text) = content.filter(|t| !t.is_empty()) {
                    blocks.push(json!({ "type": "text", "text": text }));
                }
                for call in tool_calls {
                    // `input` must be an object; arguments another provider
                    // wrote as broken JSON are shown as none.
                    let input = match call.arguments {
                        Value::Object(map) => Value::Object(map),
                        _ => Value::Object(Map::new()),
                    };
                    blocks.push(json!({ "type": "tool_use", "id": call.id, "name": super::wire_name(&call.name), "input": input }));
                }
                ("assistant", blocks)
            }
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => {
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": tool_call_id,
                    "content": content.to_string(),
                });
                if content.get("error").is_some() {
                    block["is_error"] = json!(true);
                }
                ("user", vec![block])
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, merged)) if *last == role => merged.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({ "role": role, "content": content }))
        .collect()
}

fn tools(specs: &[ToolSpec]) -> Value {
    specs
        .iter()
        .map(|spec| {
            json!({
                "name": super::wire_name(&spec.name),
                "description": spec.description,
                "input_schema": spec.input_schema,
            })
        })
        .collect()
}

/// `content[]` (text and `tool_use` blocks) and `usage`.
pub(crate) fn parse(answer: &Value) -> Result<ModelResponse, String> {
    let blocks = answer
        .get("content")
        .and_then(Value::as_array)
        .ok_or("the answer has no content[]")?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => {
                let field = |name: &str| {
                    block
                        .get(name)
                        .and_then(Value::as_str)
                        .ok_or_else(|| format!("content[{i}] (tool_use) has no {name}"))
                };
                tool_calls.push(ToolCallRequest {
                    id: field("id")?.into(),
                    name: field("name")?.to_owned(),
                    arguments: block
                        .get("input")
                        .cloned()
                        .unwrap_or_else(|| Value::Object(Map::new())),
                });
            }
            // Thinking and other blocks are not part of the answer.
            _ => {}
        }
    }
    let tokens = |name: &str| {
        answer
            .pointer(&format!("/usage/{name}"))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    Ok(ModelResponse {
        text: (!text.is_empty()).then_some(text),
        tool_calls,
        usage: Usage {
            input_tokens: tokens("input_tokens"),
            output_tokens: tokens("output_tokens"),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> ToolCallRequest {
        ToolCallRequest {
            id: id.into(),
            name: "send".into(),
            arguments: json!({ "to": "a@b.c" }),
        }
    }

    #[test]
    fn the_results_of_a_step_go_back_in_one_user_message_and_roles_alternate() {
        let conversation = [
            Message::User {
                content: "mail twice".into(),
            },
            Message::Assistant {
                content: Some("On it.".into()),
                tool_calls: vec![call("c1"), call("c2")],
            },
            Message::Tool {
                tool_call_id: "c2".into(),
                name: "send".into(),
                content: json!({ "error": "unknown address" }),
            },
            // The turn was stopped with c1 open; the next turn begins.
            Message::User {
                content: "now once".into(),
            },
        ];
        let sent = messages(&conversation);
        assert_eq!(
            sent,
            vec![
                json!({ "role": "user", "content": [{ "type": "text", "text": "mail twice" }] }),
                json!({ "role": "assistant", "content": [
                    { "type": "text", "text": "On it." },
                    { "type": "tool_use", "id": "c1", "name": "send", "input": { "to": "a@b.c" } },
                    { "type": "tool_use", "id": "c2", "name": "send", "input": { "to": "a@b.c" } },
                ] }),
                json!({ "role": "user", "content": [
                    { "type": "tool_result", "tool_use_id": "c2", "content": "{\"error\":\"unknown address\"}", "is_error": true },
                    { "type": "tool_result", "tool_use_id": "c1", "content": "{\"cancelled\":true}" },
                    { "type": "text", "text": "now once" },
                ] }),
            ]
        );
    }

    #[test]
    fn an_answer_parses_to_the_neutral_form() {
        let answer = json!({
            "content": [
                { "type": "text", "text": "Sending." },
                { "type": "tool_use", "id": "toolu_1", "name": "send", "input": { "to": "a@b.c" } },
            ],
            "usage": { "input_tokens": 20, "output_tokens": 7 },
        });
        let response = parse(&answer).unwrap();
        assert_eq!(response.text.as_deref(), Some("Sending."));
        assert_eq!(response.tool_calls[0].id.as_str(), "toolu_1");
        assert_eq!(response.tool_calls[0].arguments, json!({ "to": "a@b.c" }));
        assert_eq!(response.usage.input_tokens, 20);
        assert!(parse(&json!({ "content": [{ "type": "tool_use", "name": "x" }] })).is_err());
    }
}
