//! Models: what a run asks for its next step. A model turns `(system,
//! messages, tools)` into a provider-neutral [`ModelResponse`], which the
//! run journals as `model:<n>`; a replay reads that and never calls the
//! provider again.

use std::sync::Arc;
use std::time::Duration;

use agentenkit_core::conversation::{Message, ModelResponse};
use async_trait::async_trait;
use thiserror::Error;

use crate::tool::ToolSpec;

mod anthropic;
mod def;
mod http;
mod openai;
mod scripted;

pub use anthropic::{AnthropicConfig, AnthropicModel};
pub use def::ModelDef;
pub use http::{ApiKey, ProviderSettings};
pub use openai::{OpenAiConfig, OpenAiModel};
pub use scripted::{ScriptEntry, ScriptedModel};

/// One call to a model. `call_index` is the n of `model:<n>`: stable across
/// replays, so a scripted model answers the same call the same way.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    pub call_index: u32,
    pub system: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a [ToolSpec],
}

/// A model call that failed, by what the run does about it.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ModelError {
    /// It may pass later (a connection error, a timeout, 408, 409, 429 or a
    /// 5xx once the provider's own retries are spent): the step is retried
    /// with the run's backoff, then the run fails.
    #[error("model call failed: {0}")]
    Transient(String),
    /// The provider refused the request (any other 4xx, with its own
    /// message): retrying cannot help, so the run fails at once.
    #[error("the model provider refused the request ({status}): {message}")]
    Refused { status: u16, message: String },
}

#[async_trait]
pub trait Model: Send + Sync {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError>;
}

/// The longest `timeout_ms` a provider may set: ten minutes.
pub const MAX_MODEL_TIMEOUT_MS: u64 = 600_000;
/// The most `max_retries` a provider may set.
pub const MAX_MODEL_RETRIES: u32 = 10;

/// The model an agent file describes. Keys are read from the environment
/// here, once, when the agents are loaded.
pub fn from_def(agent: &str, def: ModelDef) -> crate::Result<Arc<dyn Model>> {
    let invalid = |what: String| crate::Error::Config(format!("agent {agent:?}: model: {what}"));
    let settings = |base_url: String,
                    key_env: &str,
                    timeout_ms: Option<u64>,
                    max_retries: Option<u32>,
                    ca_file: Option<String>|
     -> crate::Result<ProviderSettings> {
        let url = reqwest::Url::parse(&base_url)
            .map_err(|e| invalid(format!("base_url {base_url:?}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(format!("base_url {base_url:?} is not http(s)")));
        }
        let mut settings = ProviderSettings::new(base_url, ApiKey::from_env(key_env));
        if let Some(ms) = timeout_ms {
            if !(1..=MAX_MODEL_TIMEOUT_MS).contains(&ms) {
                return Err(invalid(format!(
                    "timeout_ms must be from 1 to {MAX_MODEL_TIMEOUT_MS}"
                )));
            }
            settings.timeout = Duration::from_millis(ms);
        }
        if let Some(n) = max_retries {
            if n > MAX_MODEL_RETRIES {
                return Err(invalid(format!(
                    "max_retries must be at most {MAX_MODEL_RETRIES}"
                )));
            }
            settings.max_retries = n;
        }
        if let Some(path) = ca_file {
            let pem =
                std::fs::read(&path).map_err(|e| invalid(format!("ca_file {path:?}: {e}")))?;
            settings.extra_roots_pem.push(pem);
        }
        Ok(settings)
    };
    let positive = |n: Option<u32>| match n {
        Some(0) => Err(invalid("max_tokens must be at least 1".into())),
        other => Ok(other),
    };
    Ok(match def {
        ModelDef::Scripted { script } => Arc::new(ScriptedModel::new(script)),
        ModelDef::Openai {
            model,
            base_url,
            api_key_env,
            temperature,
            max_tokens,
            timeout_ms,
            max_retries,
            ca_file,
        } => {
            if temperature.is_some_and(|t| !(0.0..=2.0).contains(&t)) {
                return Err(invalid("temperature must be from 0 to 2".into()));
            }
            let base_url = base_url
                .or_else(|| {
                    std::env::var("OPENAI_BASE_URL")
                        .ok()
                        .filter(|u| !u.is_empty())
                })
                .unwrap_or_else(|| openai::DEFAULT_BASE_URL.to_owned());
            let key_env = api_key_env.unwrap_or_else(|| "OPENAI_API_KEY".to_owned());
            let config = OpenAiConfig {
                model,
                temperature,
                max_tokens: positive(max_tokens)?,
                provider: settings(base_url, &key_env, timeout_ms, max_retries, ca_file)?,
            };
            Arc::new(OpenAiModel::new(config).map_err(invalid)?)
        }
        ModelDef::Anthropic {
            model,
            base_url,
            api_key_env,
            max_tokens,
            timeout_ms,
            max_retries,
            ca_file,
        } => {
            let base_url = base_url.unwrap_or_else(|| anthropic::DEFAULT_BASE_URL.to_owned());
            let key_env = api_key_env.unwrap_or_else(|| "ANTHROPIC_API_KEY".to_owned());
            let config = AnthropicConfig {
                model,
                max_tokens: positive(max_tokens)?.unwrap_or(anthropic::DEFAULT_MAX_TOKENS),
                provider: settings(base_url, &key_env, timeout_ms, max_retries, ca_file)?,
            };
            Arc::new(AnthropicModel::new(config).map_err(invalid)?)
        }
    })
}
