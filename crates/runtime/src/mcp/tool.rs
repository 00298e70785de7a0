//! A tool of an MCP server, as a model calls it.

use std::sync::Arc;

use agentenkit_core::notify::retry_delay;
use async_trait::async_trait;
use rmcp::model::{CallToolResponse, CallToolResult, InputResponses};
use serde_json::{json, Value};
use tracing::Instrument;

use super::client::{Server, ServerError};
use super::def::{tool_name, DiscoveredTool};
use super::elicit;
use crate::tool::{ask_questions, Polled, Tool, ToolContext, ToolError, ToolSpec, MAX_ASK_ROUNDS};

mod task;

/// Attempts of a call to a server that cannot be reached or does not
/// answer in time before the model is told it failed, and the wait before
/// the second (doubled after each next). A server that hangs, dies or
/// writes garbage never leaves a run stuck: the model decides what next.
const ATTEMPTS: u32 = 3;
const FIRST_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// `tool` of `server`, offered to models as `SERVER/TOOL`.
pub struct McpTool {
    server: Arc<Server>,
    /// Its name on the server.
    tool: String,
    spec: ToolSpec,
    asks_first: bool,
    /// The server marks it read-only (and not destructive).
    read_only: bool,
}

impl McpTool {
    pub fn new(server: Arc<Server>, tool: &DiscoveredTool, asks_first: bool) -> McpTool {
        McpTool {
            spec: ToolSpec {
                name: tool_name(server.name(), &tool.name),
                description: tool.description.clone(),
                input_schema: tool.input_schema.clone(),
            },
            server,
            tool: tool.name.clone(),
            asks_first,
            read_only: tool.read_only(),
        }
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn requires_confirmation(&self) -> bool {
        self.asks_first
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<Value, ToolError> {
        // The loop sends only objects its schema checked; a caller in code
        // may not.
        let Value::Object(arguments) = arguments else {
            return Err(ToolError::Failed("the arguments must be an object".into()));
        };
        // Never the arguments or the result: what a trace viewer may show
        // of a call is its server, its tool and how it went.
        let span = tracing::info_span!(
            "mcp tools/call",
            otel.name = tracing::field::Empty,
            mcp.method.name = "tools/call",
            mcp.server.name = %self.server.name(),
            gen_ai.tool.name = %self.tool,
            mcp.attempts = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        if crate::trace::exporting() {
            span.record("otel.name", format!("tools/call {}", self.tool));
        }
        let outcome = self.call(arguments, ctx).instrument(span.clone()).await;
        if matches!(outcome, Err(ToolError::Failed(_) | ToolError::Transient(_))) {
            span.record("error.type", "tool_error");
        }
        outcome
    }

    async fn poll(&self, payload: &Value) -> Polled {
        self.check(payload).await
    }

    async fn abandon(&self, payload: &Value) {
        if let Some(task_id) = payload["taskId"].as_str() {
            self.cancel(task_id).await;
        }
    }
}

impl McpTool {
    /// The call, tried again while the server cannot be reached; with the
    /// reply to the questions it asked last, when it asked some.
    async fn call(
        &self,
        arguments: serde_json::Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<Value, ToolError> {
        if let Some(answers) = &ctx.answers {
            if let Some(task_id) = task::task_of(&answers.state) {
                return self.resumed_task(task_id, answers).await;
            }
        }
        let mut input = match &ctx.answers {
            Some(answers) => Some(
                elicit::responses(&answers.state, &answers.outcome).map_err(ToolError::Failed)?,
            ),
            None => None,
        };
        // A server may ask for nothing but to be called again with its
        // state; that needs no person and no park.
        for _ in 0..MAX_ASK_ROUNDS {
            match self
                .call_once(arguments.clone(), ctx, input.as_ref())
                .await?
            {
                CallToolResponse::InputRequired(asked)
                    if asked.input_requests.as_ref().is_none_or(|r| r.is_empty()) =>
                {
                    input = Some((Default::default(), asked.request_state));
                }
                response => return self.answered(response),
            }
        }
        Err(ToolError::Failed(format!(
            "mcp server {} asked to be called again {MAX_ASK_ROUNDS} times without a question",
            self.server.name()
        )))
    }

    /// One `tools/call`, tried again while the server cannot be reached.
    async fn call_once(
        &self,
        arguments: serde_json::Map<String, Value>,
        ctx: &ToolContext,
        input: Option<&(InputResponses, Option<String>)>,
    ) -> Result<CallToolResponse, ToolError> {
        let key = ctx.idempotency_key();
        // Each attempt carries the same idempotency key: a server that did
        // the work before hanging up can tell.
        self.retrying(|attempt| {
            let arguments = arguments.clone();
            let key = &key;
            async move {
                tracing::Span::current().record("mcp.attempts", attempt);
                let started = std::time::Instant::now();
                let answer = self.server.call(&self.tool, arguments, key, input).await;
                self.measure(&answer, started);
                answer
            }
        })
        .await
    }

    /// `send` (attempt 1, 2, …), sent again while the server cannot be
    /// reached, up to [`ATTEMPTS`] times: a refusal, or the last attempt's
    /// failure, is a failure the model sees.
    async fn retrying<T, Sent>(&self, mut send: impl FnMut(u32) -> Sent) -> Result<T, ToolError>
    where
        Sent: std::future::Future<Output = Result<T, ServerError>>,
    {
        let mut attempt = 1;
        loop {
            match send(attempt).await {
                Ok(answer) => return Ok(answer),
                Err(ServerError::Refused(message) | ServerError::InvalidParams(message)) => {
                    return Err(ToolError::Failed(message))
                }
                Err(ServerError::Unreachable(message)) if attempt >= ATTEMPTS => {
                    return Err(ToolError::Failed(format!(
                        "{message} (after {ATTEMPTS} attempts)"
                    )))
                }
                Err(ServerError::Unreachable(message)) => {
                    tracing::info!(mcp.server = %self.server.name(), attempt, "request failed: {message}");
                    tokio::time::sleep(retry_delay(FIRST_RETRY, attempt)).await;
                    attempt += 1;
                }
            }
        }
    }

    /// What a call's answer comes to: a result, a failure, questions for
    /// a person (the call waits as a question set, and is sent again with
    /// the reply), or a task (the call waits for it: `task.rs`).
    fn answered(&self, response: CallToolResponse) -> Result<Value, ToolError> {
        match response {
            CallToolResponse::Complete(result) => outcome(result),
            CallToolResponse::InputRequired(asked) => {
                let (questions, state) =
                    elicit::questions(self.server.name(), &asked).map_err(ToolError::Failed)?;
                ::metrics::counter!(crate::metrics::MCP_QUESTIONS, "server" => self.server.name().to_owned())
                    .increment(1);
                Err(ask_questions("mcp", questions, state))
            }
            CallToolResponse::Task(created) => Err(self.task_started(&created.task)),
            _ => Err(ToolError::Failed(format!(
                "mcp server {} answered a kind of result this client does not know",
                self.server.name()
            ))),
        }
    }

    /// One attempt in `/metrics`.
    fn measure(&self, answer: &Result<CallToolResponse, ServerError>, started: std::time::Instant) {
        let outcome = match answer {
            Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => "tool_error",
            Ok(_) => "ok",
            Err(ServerError::Refused(_) | ServerError::InvalidParams(_)) => "refused",
            Err(ServerError::Unreachable(_)) => "unreachable",
        };
        let server = self.server.name().to_owned();
        ::metrics::counter!(crate::metrics::MCP_CALLS, "server" => server.clone(), "outcome" => outcome)
            .increment(1);
        ::metrics::histogram!(crate::metrics::MCP_CALL_SECONDS, "server" => server)
            .record(started.elapsed().as_secs_f64());
    }
}

/// A finished call as the model sees it: its structured content when it has
/// some, else its text, else its content blocks; `isError` a failure.
pub(crate) fn outcome(result: CallToolResult) -> Result<Value, ToolError> {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
        .collect();
    if result.is_error == Some(true) {
        let message = if texts.is_empty() {
            "the tool failed and said nothing".to_owned()
        } else {
            texts.join("\n")
        };
        return Err(ToolError::Failed(message));
    }
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    if texts.len() == result.content.len() {
        return Ok(Value::String(texts.join("\n")));
    }
    Ok(json!({ "content": result.content }))
}
