//! How an agent file names its model: the `[agents.<name>.model]` table,
//! which `model::from_def` turns into a client.

use serde::Deserialize;

use agentenkit_core::budget::Price;

use super::ScriptEntry;

/// The model of an agent, by provider.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "provider", rename_all = "lowercase", deny_unknown_fields)]
pub enum ModelDef {
    Scripted {
        script: Vec<ScriptEntry>,
        /// Dollars per million tokens, for `cost_usd` budgets.
        #[serde(default)]
        price: Option<Price>,
        /// Calls of this model the whole fleet makes in any minute, at most.
        #[serde(default)]
        requests_per_minute: Option<u32>,
        /// Tokens (as the provider reports them) the whole fleet spends on
        /// this model in any minute, at most.
        #[serde(default)]
        tokens_per_minute: Option<u64>,
    },
    /// Any OpenAI-compatible Chat Completions server. `base_url` defaults
    /// to `OPENAI_BASE_URL`, then OpenAI's; the key is read from
    /// `api_key_env`, else from `OPENAI_API_KEY` unless `base_url` names
    /// another host than OpenAI's; none sends no header.
    Openai {
        model: String,
        #[serde(default)]
        base_url: Option<String>,
        #[serde(default)]
        api_key_env: Option<String>,
        #[serde(default)]
        temperature: Option<f64>,
        #[serde(default)]
        max_tokens: Option<u32>,
        #[serde(default)]
        timeout_ms: Option<u64>,
        #[serde(default)]
        max_retries: Option<u32>,
        /// The largest answer read (default 4 MiB); a larger one fails the
        /// run.
        #[serde(default)]
        max_response_bytes: Option<u64>,
        /// A CA certificate (PEM file) trusted besides the platform's roots.
        #[serde(default)]
        ca_file: Option<String>,
        /// Dollars per million tokens, for `cost_usd` budgets.
        #[serde(default)]
        price: Option<Price>,
        /// Calls of this model the whole fleet makes in any minute, at most.
        #[serde(default)]
        requests_per_minute: Option<u32>,
        /// Tokens (as the provider reports them) the whole fleet spends on
        /// this model in any minute, at most.
        #[serde(default)]
        tokens_per_minute: Option<u64>,
    },
    /// The Messages API. The key is read from `api_key_env`, else from
    /// `ANTHROPIC_API_KEY` unless `base_url` names another host than
    /// Anthropic's.
    Anthropic {
        model: String,
        #[serde(default)]
        base_url: Option<String>,
        #[serde(default)]
        api_key_env: Option<String>,
        #[serde(default)]
        max_tokens: Option<u32>,
        #[serde(default)]
        timeout_ms: Option<u64>,
        #[serde(default)]
        max_retries: Option<u32>,
        /// The largest answer read (default 4 MiB); a larger one fails the
        /// run.
        #[serde(default)]
        max_response_bytes: Option<u64>,
        /// A CA certificate (PEM file) trusted besides the platform's roots.
        #[serde(default)]
        ca_file: Option<String>,
        /// Dollars per million tokens, for `cost_usd` budgets.
        #[serde(default)]
        price: Option<Price>,
        /// Calls of this model the whole fleet makes in any minute, at most.
        #[serde(default)]
        requests_per_minute: Option<u32>,
        /// Tokens (as the provider reports them) the whole fleet spends on
        /// this model in any minute, at most.
        #[serde(default)]
        tokens_per_minute: Option<u64>,
    },
}

impl ModelDef {
    /// The model's limits across the fleet, when the file sets any
    /// (docs/budgets.md, "Provider limits").
    pub fn limit(&self) -> Option<agentenkit_store::ProviderLimit> {
        let (requests_per_minute, tokens_per_minute) = match self {
            ModelDef::Scripted {
                requests_per_minute,
                tokens_per_minute,
                ..
            }
            | ModelDef::Openai {
                requests_per_minute,
                tokens_per_minute,
                ..
            }
            | ModelDef::Anthropic {
                requests_per_minute,
                tokens_per_minute,
                ..
            } => (*requests_per_minute, *tokens_per_minute),
        };
        (requests_per_minute.is_some() || tokens_per_minute.is_some()).then_some(
            agentenkit_store::ProviderLimit {
                requests_per_minute,
                tokens_per_minute,
            },
        )
    }

    /// The model's price, when the file names one.
    pub fn price(&self) -> Option<Price> {
        match self {
            ModelDef::Scripted { price, .. }
            | ModelDef::Openai { price, .. }
            | ModelDef::Anthropic { price, .. } => *price,
        }
    }
}
