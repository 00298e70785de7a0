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
    },
}

impl ModelDef {
    /// The model's price, when the file names one.
    pub fn price(&self) -> Option<Price> {
        match self {
            ModelDef::Scripted { price, .. }
            | ModelDef::Openai { price, .. }
            | ModelDef::Anthropic { price, .. } => *price,
        }
    }
}
