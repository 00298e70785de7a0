//! `provider = "openai"`: any OpenAI-compatible Chat Completions server
//! (OpenAI, vLLM, Ollama, LiteLLM, llama.cpp, gateways).

use agentenkit_core::conversation::{close_open_calls, Message, ModelResponse, ToolCallRequest};
use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::{json, Map, Value};

use super::http::{header, ProviderClient, ProviderSettings};
use super::{Model, ModelError, ModelRequest};
use crate::tool::ToolSpec;

pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    pub model: String,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    pub provider: ProviderSettings,
}

pub struct OpenAiModel {
    config: OpenAiConfig,
    client: ProviderClient,
}

impl OpenAiModel {
    pub fn new(config: OpenAiConfig) -> Result<Self, String> {
        let client = ProviderClient::new("openai", config.provider.clone())?;
        Ok(Self { config, client })
    }

    fn body(&self, request: &ModelRequest<'_>) -> Value {
        let mut body = json!({
            "model": self.config.model,
            "messages": messages(request.system, request.messages),
        });
        if !request.tools.is_empty() {
            body["tools"] = tools(request.tools);
        }
        if let Some(t) = self.config.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(n) = self.config.max_tokens {
            body["max_tokens"] = json!(n);
        }
        body
    }
}

#[async_trait]
impl Model for OpenAiModel {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        let mut headers = HeaderMap::new();
        if let Some(key) = self.client.key() {
            headers.extend(header("authorization", &format!("Bearer {}", key.expose())));
        }
        let answer = self
            .client
            .post("/chat/completions", headers, &self.body(&request))
            .await?;
        parse(&answer)
            .map(|response| super::names_from_wire(response, request.tools))
            .map_err(|e| ModelError::Transient(format!("openai: {e}")))
    }

    fn id(&self) -> super::ModelId<'_> {
        super::ModelId {
            provider: "openai",
            model: &self.config.model,
        }
    }
}

/// The conversation in Chat Completions form: the system prompt first, every
/// open call closed (a strict server refuses a dangling one).
pub(crate) fn messages(system: &str, conversation: &[Message]) -> Vec<Value> {
    let mut out = Vec::with_capacity(conversation.len() + 1);
    if !system.is_empty() {
        out.push(json!({ "role": "system", "content": system }));
    }
    for message in close_open_calls(conversation) {
        out.push(match message {
            Message::User { content } => json!({ "role": "user", "content": content }),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut turn = json!({ "role": "assistant", "content": content });
                if !tool_calls.is_empty() {
                    turn["tool_calls"] = tool_calls
                        .iter()
                        .map(|call| {
                            json!({
                                "id": call.id,
                                "type": "function",
                                "function": { "name": super::wire_name(&call.name), "arguments": arguments_text(&call.arguments) },
                            })
                        })
                        .collect();
                }
                turn
            }
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => json!({
                "role": "tool",
                "tool_call_id": tool_call_id,
                "content": content.to_string(),
            }),
        });
    }
    out
}

/// Arguments as the model wrote them: text that was not JSON was kept as a
/// string, and goes back as it came.
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

fn tools(specs: &[ToolSpec]) -> Value {
    specs
        .iter()
        .map(|spec| {
            json!({
                "type": "function",
                "function": {
                    "name": super::wire_name(&spec.name),
                    "description": spec.description,
                    "parameters": spec.input_schema,
                },
            })
        })
        .collect()
}

/// `choices[0].message.{content, tool_calls}` and `usage`. Arguments that
/// are not JSON are kept as their text: the call then fails as a tool
/// failure the model sees, never as a run failure.
pub(crate) fn parse(answer: &Value) -> Result<ModelResponse, String> {
    let message = answer
        .pointer("/choices/0/message")
        .ok_or("the answer has no choices[0].message")?;
    let text = match message.get("content") {
        Some(Value::String(text)) if !text.is_empty() => Some(text.clone()),
        // Some servers answer content parts.
        Some(Value::Array(parts)) => {
            let joined: String = parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            (!joined.is_empty()).then_some(joined)
        }
        _ => None,
    };
    let empty = Vec::new();
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let mut tool_calls = Vec::with_capacity(calls.len());
    for (i, call) in calls.iter().enumerate() {
        let function = call.get("function").unwrap_or(&Value::Null);
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("tool_calls[{i}] has no function.name"))?;
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            // A server that names no id gets one that cannot collide.
            .map_or_else(
                || format!("call_{}", uuid::Uuid::new_v4().simple()),
                str::to_owned,
            );
        let arguments = match function.get("arguments") {
            Some(Value::String(text)) if text.trim().is_empty() => Value::Object(Map::new()),
            Some(Value::String(text)) => {
                serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()))
            }
            // Ollama answers an object.
            Some(other @ Value::Object(_)) => other.clone(),
            _ => Value::Object(Map::new()),
        };
        tool_calls.push(ToolCallRequest {
            id: id.as_str().into(),
            name: name.to_owned(),
            arguments,
        });
    }
    let tokens = |name: &str| {
        answer
            .pointer(&format!("/usage/{name}"))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    Ok(ModelResponse {
        text,
        tool_calls,
        usage: agentenkit_core::conversation::Usage {
            input_tokens: tokens("prompt_tokens"),
            output_tokens: tokens("completion_tokens"),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, arguments: Value) -> ToolCallRequest {
        ToolCallRequest {
            id: id.into(),
            name: "send".into(),
            arguments,
        }
    }

    #[test]
    fn a_conversation_maps_to_chat_messages_with_open_calls_closed() {
        let conversation = [
            Message::User {
                content: "mail it".into(),
            },
            Message::Assistant {
                content: None,
                tool_calls: vec![
                    call("c1", json!({ "to": "a@b.c" })),
                    call("c2", json!("{not json")),
                ],
            },
            Message::Tool {
                tool_call_id: "c1".into(),
                name: "send".into(),
                content: json!({ "sent": true }),
            },
            Message::User {
                content: "again".into(),
            },
        ];
        let sent = messages("You send email.", &conversation);
        assert_eq!(
            sent,
            vec![
                json!({ "role": "system", "content": "You send email." }),
                json!({ "role": "user", "content": "mail it" }),
                json!({ "role": "assistant", "content": null, "tool_calls": [
                    { "id": "c1", "type": "function", "function": { "name": "send", "arguments": "{\"to\":\"a@b.c\"}" } },
                    { "id": "c2", "type": "function", "function": { "name": "send", "arguments": "{not json" } },
                ] }),
                json!({ "role": "tool", "tool_call_id": "c1", "content": "{\"sent\":true}" }),
                json!({ "role": "tool", "tool_call_id": "c2", "content": "{\"cancelled\":true}" }),
                json!({ "role": "user", "content": "again" }),
            ]
        );
    }

    #[test]
    fn an_answer_parses_to_the_neutral_form() {
        let answer = json!({
            "choices": [{ "message": {
                "role": "assistant",
                "content": null,
                "tool_calls": [
                    { "id": "call_1", "type": "function", "function": { "name": "send", "arguments": "{\"to\":\"a@b.c\"}" } },
                    { "id": "call_2", "type": "function", "function": { "name": "send", "arguments": "{oops" } },
                    { "type": "function", "function": { "name": "send", "arguments": { "to": "x" } } },
                ],
            } }],
            "usage": { "prompt_tokens": 12, "completion_tokens": 5 },
        });
        let response = parse(&answer).unwrap();
        assert_eq!(response.text, None);
        assert_eq!(
            response.tool_calls[0],
            call("call_1", json!({ "to": "a@b.c" }))
        );
        assert_eq!(response.tool_calls[1].arguments, json!("{oops"));
        assert_eq!(response.tool_calls[2].arguments, json!({ "to": "x" }));
        assert!(response.tool_calls[2].id.as_str().starts_with("call_"));
        assert_ne!(response.tool_calls[2].id, response.tool_calls[1].id);
        assert_eq!(response.usage.input_tokens, 12);
        assert_eq!(response.usage.output_tokens, 5);
        let text = parse(&json!({ "choices": [{ "message": { "content": "Done." } }] })).unwrap();
        assert_eq!(text.text.as_deref(), Some("Done."));
        assert!(parse(&json!({ "choices": [] })).is_err());
    }
}
