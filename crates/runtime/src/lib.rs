//! The runtime of agentenkit: agents, tools and models; the agent loop as a
//! deterministic function over the journal; the worker that consumes
//! segments; the outbox relay; and the reaper's reclaim pass.

pub mod agent;
pub mod agent_loop;
pub mod config;
pub mod deployment;
pub mod error;
pub mod inline;
pub mod mcp;
pub mod metrics;
pub mod model;
pub mod net;
pub mod notify;
pub mod reaper;
pub mod relay;
pub mod replies;
pub mod tls;
pub mod tool;
pub mod trace;
pub mod upgrade;
pub mod versions;
pub mod worker;

pub use agent::{Agent, DelegationLimits, Registry};
pub use deployment::Deployment;
pub use error::{Error, Result};
pub use model::{
    AnthropicModel, ApiKey, Model, ModelError, ModelRequest, OpenAiModel, ScriptEntry,
    ScriptedModel,
};
pub use relay::Relay;
pub use replies::Replies;
pub use tool::{
    ask_questions, park_for_input, Approval, AskOutcome, AskRequest, EchoTool, HttpTool,
    ParkRequest, Tool, ToolAnswers, ToolContext, ToolError, ToolSpec,
};
pub use worker::{Worker, WorkerConfig};
