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
    /// The provider answered with nothing the run can use (a body past
    /// `max_response_bytes`): a retry would read the same, so the run
    /// fails at once.
    #[error("the model provider's answer cannot be used: {0}")]
    Unusable(String),
    /// The provider answered 429 and said when to come back
    /// (`Retry-After`, at most a minute): the run waits that long in a
    /// delayed message, holding no worker, and no retry is spent
    /// (docs/budgets.md, "Provider limits").
    #[error("the model provider {provider} is rate limiting ({message}); waiting {wait:?}")]
    RateLimited {
        provider: &'static str,
        message: String,
        wait: std::time::Duration,
    },
}

/// A tool's name as a provider is shown it: OpenAI and Anthropic allow
/// only letters, digits, `_` and `-`, so an MCP tool's `SERVER/TOOL` is
/// `SERVER__TOOL` there (a server's name has no `__`).
pub(crate) fn wire_name(name: &str) -> std::borrow::Cow<'_, str> {
    match name.split_once(crate::tool::SERVER_SEPARATOR) {
        Some((server, tool)) => format!("{server}__{tool}").into(),
        None => name.into(),
    }
}

/// A tool name a provider called, as the registry knows it: the offered
/// tool whose [`wire_name`] it is, else as called (an unknown tool, which
/// the model is told of).
pub(crate) fn from_wire(called: String, tools: &[ToolSpec]) -> String {
    if !called.contains("__") {
        return called;
    }
    tools
        .iter()
        .find(|spec| spec.name != called && wire_name(&spec.name) == called)
        .map_or(called, |spec| spec.name.clone())
}

/// `response` with each call's name mapped back from its wire name.
pub(crate) fn names_from_wire(mut response: ModelResponse, tools: &[ToolSpec]) -> ModelResponse {
    for call in &mut response.tool_calls {
        call.name = from_wire(std::mem::take(&mut call.name), tools);
    }
    response
}

#[async_trait]
pub trait Model: Send + Sync {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError>;

    /// Who serves it and which model it asks for, as a trace names them
    /// (`gen_ai.system`, `gen_ai.request.model`).
    fn id(&self) -> ModelId<'_> {
        ModelId {
            provider: "unknown",
            model: "unknown",
        }
    }
}

/// A model's provider and name (see [`Model::id`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelId<'a> {
    /// `openai`, `anthropic`, `scripted`, …
    pub provider: &'a str,
    /// The model the requests name.
    pub model: &'a str,
}

/// The longest `timeout_ms` a provider may set: ten minutes.
pub const MAX_MODEL_TIMEOUT_MS: u64 = 600_000;
/// The most `max_retries` a provider may set.
pub const MAX_MODEL_RETRIES: u32 = 10;
/// The largest `max_response_bytes` a provider may set: 64 MiB.
pub const MAX_MODEL_RESPONSE_BYTES: u64 = 64 << 20;

/// What bounds one provider's calls, as the agent file sets them.
struct Limits {
    timeout_ms: Option<u64>,
    max_retries: Option<u32>,
    max_response_bytes: Option<u64>,
}

/// The key a provider sends: from `api_key_env` when the agent file names
/// one. Without it, the provider's default variable (`default_env`) is
/// read only when the agent file leaves `base_url` alone (the provider's
/// own host, or the deployment's `OPENAI_BASE_URL`, set beside the key by
/// whoever holds it) or names the provider's own host: a `base_url`
/// elsewhere never gets a key it did not ask for.
fn provider_key(
    agent: &str,
    explicit_env: Option<&str>,
    default_env: &str,
    file_base_url: Option<&str>,
    own_host: &str,
) -> Option<ApiKey> {
    if let Some(name) = explicit_env {
        return ApiKey::from_env(name);
    }
    let elsewhere = file_base_url.and_then(|url| {
        let host = reqwest::Url::parse(url)
            .ok()?
            .host_str()?
            .to_ascii_lowercase();
        (host != own_host).then_some(host)
    });
    match elsewhere {
        None => ApiKey::from_env(default_env),
        Some(host) => {
            if ApiKey::from_env(default_env).is_some() {
                tracing::warn!(
                    agent,
                    host,
                    "the key in {default_env} is not sent to a base_url other than {own_host}: \
                     name it in api_key_env to send it there"
                );
            }
            None
        }
    }
}

/// A provider's connection settings from an agent file's model: its base
/// URL (http or https), key, limits and extra CA; the error names what is
/// wrong.
fn provider_settings(
    base_url: String,
    key: Option<ApiKey>,
    limits: Limits,
    ca_file: Option<String>,
) -> Result<ProviderSettings, String> {
    let url = reqwest::Url::parse(&base_url).map_err(|e| format!("base_url {base_url:?}: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("base_url {base_url:?} is not http(s)"));
    }
    let Limits {
        timeout_ms,
        max_retries,
        max_response_bytes,
    } = limits;
    let mut settings = ProviderSettings::new(base_url, key);
    if let Some(bytes) = max_response_bytes {
        if !(1024..=MAX_MODEL_RESPONSE_BYTES).contains(&bytes) {
            return Err(format!(
                "max_response_bytes must be from 1024 to {MAX_MODEL_RESPONSE_BYTES}"
            ));
        }
        settings.max_response_bytes = bytes;
    }
    if let Some(ms) = timeout_ms {
        if !(1..=MAX_MODEL_TIMEOUT_MS).contains(&ms) {
            return Err(format!(
                "timeout_ms must be from 1 to {MAX_MODEL_TIMEOUT_MS}"
            ));
        }
        settings.timeout = Duration::from_millis(ms);
    }
    if let Some(n) = max_retries {
        if n > MAX_MODEL_RETRIES {
            return Err(format!("max_retries must be at most {MAX_MODEL_RETRIES}"));
        }
        settings.max_retries = n;
    }
    if let Some(path) = ca_file {
        let pem = std::fs::read(&path).map_err(|e| format!("ca_file {path:?}: {e}"))?;
        settings.extra_roots_pem.push(pem);
    }
    Ok(settings)
}

/// An OpenAI-compatible provider's base URL: the agent file's, else
/// `OPENAI_BASE_URL`, else OpenAI's.
fn openai_base_url(configured: Option<String>) -> String {
    configured
        .or_else(|| {
            std::env::var("OPENAI_BASE_URL")
                .ok()
                .filter(|u| !u.is_empty())
        })
        .unwrap_or_else(|| openai::DEFAULT_BASE_URL.to_owned())
}

/// The model an agent file describes. Keys are read from the environment
/// here, once, when the agents are loaded.
pub fn from_def(agent: &str, def: ModelDef) -> crate::Result<Arc<dyn Model>> {
    let invalid = |what: String| crate::Error::Config(format!("agent {agent:?}: model: {what}"));
    let positive = |n: Option<u32>| match n {
        Some(0) => Err(invalid("max_tokens must be at least 1".into())),
        other => Ok(other),
    };
    let settings = |base_url, key, limits, ca_file| {
        provider_settings(base_url, key, limits, ca_file).map_err(invalid)
    };
    Ok(match def {
        ModelDef::Scripted { script, .. } => Arc::new(ScriptedModel::new(script)),
        ModelDef::Openai {
            model,
            base_url,
            api_key_env,
            temperature,
            max_tokens,
            timeout_ms,
            max_retries,
            max_response_bytes,
            ca_file,
            ..
        } => {
            if temperature.is_some_and(|t| !(0.0..=2.0).contains(&t)) {
                return Err(invalid("temperature must be from 0 to 2".into()));
            }
            let key = provider_key(
                agent,
                api_key_env.as_deref(),
                "OPENAI_API_KEY",
                base_url.as_deref(),
                "api.openai.com",
            );
            let base_url = openai_base_url(base_url);
            let limits = Limits {
                timeout_ms,
                max_retries,
                max_response_bytes,
            };
            let config = OpenAiConfig {
                model,
                temperature,
                max_tokens: positive(max_tokens)?,
                provider: settings(base_url, key, limits, ca_file)?,
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
            max_response_bytes,
            ca_file,
            ..
        } => {
            let key = provider_key(
                agent,
                api_key_env.as_deref(),
                "ANTHROPIC_API_KEY",
                base_url.as_deref(),
                "api.anthropic.com",
            );
            let base_url = base_url.unwrap_or_else(|| anthropic::DEFAULT_BASE_URL.to_owned());
            let limits = Limits {
                timeout_ms,
                max_retries,
                max_response_bytes,
            };
            let config = AnthropicConfig {
                model,
                max_tokens: positive(max_tokens)?.unwrap_or(anthropic::DEFAULT_MAX_TOKENS),
                provider: settings(base_url, key, limits, ca_file)?,
            };
            Arc::new(AnthropicModel::new(config).map_err(invalid)?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mcp_tools_name_goes_to_providers_without_its_slash_and_comes_back() {
        let spec = |name: &str| ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: serde_json::json!({}),
        };
        let tools = [spec("tickets/close"), spec("send_email"), spec("a__b")];
        assert_eq!(wire_name("tickets/close"), "tickets__close");
        assert_eq!(wire_name("send_email"), "send_email");
        assert_eq!(from_wire("tickets__close".into(), &tools), "tickets/close");
        assert_eq!(from_wire("send_email".into(), &tools), "send_email");
        // A tool whose own name has `__` stays itself; an unknown one too.
        assert_eq!(from_wire("a__b".into(), &tools), "a__b");
        assert_eq!(from_wire("x__y".into(), &tools), "x__y");
        let response = ModelResponse {
            text: None,
            tool_calls: vec![agentenkit_core::conversation::ToolCallRequest {
                id: "c1".into(),
                name: "tickets__close".into(),
                arguments: serde_json::json!({}),
            }],
            usage: Default::default(),
        };
        assert_eq!(
            names_from_wire(response, &tools).tool_calls[0].name,
            "tickets/close"
        );
    }

    /// Each test its own variable: tests run in parallel in one process.
    fn with_key(name: &str) -> &str {
        std::env::set_var(name, "sk-deployment-key");
        name
    }

    #[test]
    fn the_default_key_goes_only_to_the_providers_own_host() {
        let env = with_key("AGENTENKIT_TEST_DEFAULT_KEY_A");
        let own = "api.openai.com";
        let key = |url: Option<&str>| provider_key("a", None, env, url, own).is_some();
        assert!(key(None), "base_url left to the deployment");
        assert!(key(Some("https://api.openai.com/v1")));
        assert!(key(Some("https://API.OPENAI.COM/v1")));
        assert!(!key(Some("http://gpu-box:11434/v1")), "another host");
        assert!(!key(Some("https://api.openai.com.evil.example/v1")));
        assert!(!key(Some("https://gateway.example/v1")));
    }

    #[test]
    fn a_key_named_in_the_agent_file_goes_where_its_base_url_says() {
        let env = with_key("AGENTENKIT_TEST_DEFAULT_KEY_B");
        let named = provider_key(
            "a",
            Some(env),
            "OPENAI_API_KEY",
            Some("https://gateway.example/v1"),
            "api.openai.com",
        );
        assert!(named.is_some());
        assert!(provider_key("a", Some("AGENTENKIT_TEST_UNSET"), env, None, "x").is_none());
    }

    fn openai_def(base_url: &str, api_key_env: Option<&str>) -> ModelDef {
        ModelDef::Openai {
            model: "m".into(),
            base_url: Some(base_url.into()),
            api_key_env: api_key_env.map(str::to_owned),
            temperature: None,
            max_tokens: None,
            timeout_ms: None,
            max_retries: None,
            max_response_bytes: None,
            ca_file: None,
            price: None,
            requests_per_minute: None,
            tokens_per_minute: None,
        }
    }

    #[test]
    fn a_key_over_plain_http_to_another_machine_is_refused_at_load() {
        let env = with_key("AGENTENKIT_TEST_DEFAULT_KEY_C");
        let refused = from_def("mailer", openai_def("http://gpu-box:11434/v1", Some(env)))
            .err()
            .expect("refused");
        let message = refused.to_string();
        assert!(message.contains("clear text"), "{message}");
        assert!(!message.contains("sk-deployment-key"), "{message}");
        // This machine, https, or no key at all: loaded.
        for (url, key_env) in [
            ("http://127.0.0.1:11434/v1", Some(env)),
            ("http://localhost:11434/v1", Some(env)),
            ("http://[::1]:11434/v1", Some(env)),
            ("https://gpu-box/v1", Some(env)),
            ("http://gpu-box:11434/v1", None),
        ] {
            assert!(
                from_def("mailer", openai_def(url, key_env)).is_ok(),
                "{url}"
            );
        }
    }

    #[test]
    fn max_response_bytes_is_bounded() {
        let mut def = openai_def("https://api.openai.com/v1", None);
        if let ModelDef::Openai {
            max_response_bytes, ..
        } = &mut def
        {
            *max_response_bytes = Some(10);
        }
        let refused = from_def("mailer", def).err().expect("refused").to_string();
        assert!(refused.contains("max_response_bytes"), "{refused}");
    }
}
