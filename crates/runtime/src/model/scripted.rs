//! `provider = "scripted"`: a model that plays a script, for tests and demos.

use agentenkit_core::conversation::{ModelResponse, ToolCallRequest, Usage};
use async_trait::async_trait;
use serde::Deserialize;

use super::{Model, ModelError, ModelRequest};

/// One entry of a scripted model (`provider = "scripted"`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptEntry {
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ToolCallRequest>,
    /// Fail this call with this message.
    #[serde(default)]
    pub error: Option<String>,
}

/// Answers the run's n-th model call with `script[n]` (the last entry again
/// past the end). Reports usage as a rough four-characters-a-token count of
/// what it was sent and what it answered, so usage rows are real figures.
#[derive(Debug, Clone)]
pub struct ScriptedModel {
    script: Vec<ScriptEntry>,
}

impl ScriptedModel {
    pub fn new(script: Vec<ScriptEntry>) -> Self {
        Self { script }
    }
}

fn tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4)
}

#[async_trait]
impl Model for ScriptedModel {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        let index = (request.call_index as usize).min(self.script.len().saturating_sub(1));
        let entry = self
            .script
            .get(index)
            .ok_or_else(|| ModelError::Transient("the script is empty".into()))?;
        if let Some(error) = &entry.error {
            return Err(ModelError::Transient(error.clone()));
        }
        let sent: usize = request.system.len()
            + request
                .messages
                .iter()
                .map(|m| serde_json::to_string(m).map(|s| s.len()).unwrap_or(0))
                .sum::<usize>();
        let answered = entry.text.as_ref().map_or(0, String::len)
            + entry
                .tool_calls
                .iter()
                .map(|c| c.name.len() + c.arguments.to_string().len())
                .sum::<usize>();
        Ok(ModelResponse {
            text: entry.text.clone(),
            tool_calls: entry.tool_calls.clone(),
            usage: Usage {
                input_tokens: tokens(sent),
                output_tokens: tokens(answered),
            },
        })
    }

    fn id(&self) -> super::ModelId<'_> {
        super::ModelId {
            provider: "scripted",
            model: "scripted",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(n: u32) -> ModelRequest<'static> {
        ModelRequest {
            call_index: n,
            system: "sys",
            messages: &[],
            tools: &[],
        }
    }

    #[tokio::test]
    async fn answers_by_call_index_and_repeats_the_last_entry() {
        let model = ScriptedModel::new(vec![
            ScriptEntry {
                text: None,
                tool_calls: vec![ToolCallRequest {
                    id: "c1".into(),
                    name: "t".into(),
                    arguments: json!({}),
                }],
                error: None,
            },
            ScriptEntry {
                text: Some("Done.".into()),
                tool_calls: vec![],
                error: None,
            },
        ]);
        assert_eq!(
            model.complete(request(0)).await.unwrap().tool_calls.len(),
            1
        );
        let last = model.complete(request(1)).await.unwrap();
        assert_eq!(last.text.as_deref(), Some("Done."));
        assert!(last.usage.input_tokens > 0 && last.usage.output_tokens > 0);
        assert_eq!(model.complete(request(7)).await.unwrap(), last);
    }

    #[tokio::test]
    async fn error_entries_fail_the_call_and_an_empty_script_is_an_error() {
        let model = ScriptedModel::new(vec![ScriptEntry {
            text: None,
            tool_calls: vec![],
            error: Some("rate limited".into()),
        }]);
        assert_eq!(
            model.complete(request(0)).await.unwrap_err().to_string(),
            "model call failed: rate limited"
        );
        assert!(ScriptedModel::new(vec![])
            .complete(request(0))
            .await
            .is_err());
    }
}
