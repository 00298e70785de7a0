//! `GET /agents`: what a client may start a thread with.

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::{Read, Scoped};
use crate::schemas::ErrorBody;
use crate::{ApiError, AppState};

#[derive(Serialize, ToSchema)]
pub struct AgentSummary {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    description: Option<String>,
    /// The model is offered the built-in `ask` tool.
    ask: bool,
    /// The agents it may delegate to.
    subagents: Vec<String>,
}

/// The agents of the agent file, by name.
#[utoipa::path(get, path = "/agents", tag = "agents",
    responses(
        (status = 200, body = Vec<AgentSummary>),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
    ))]
pub async fn list(
    State(state): State<AppState>,
    // Reading what may be started is reading: a key without `read` (a
    // job's webhook) learns nothing of the deployment.
    _caller: Scoped<Read>,
) -> Result<Json<Vec<AgentSummary>>, ApiError> {
    let registry = state.registry();
    let mut names: Vec<&str> = registry.agent_names().collect();
    names.sort_unstable();
    let agents = names
        .into_iter()
        .filter_map(|name| registry.agent(name))
        .map(|agent| AgentSummary {
            name: agent.name.clone(),
            description: agent.description.clone(),
            ask: agent.ask,
            subagents: agent.subagents.clone(),
        })
        .collect();
    Ok(Json(agents))
}
