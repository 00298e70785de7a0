//! A server's long work (the Tasks extension, SEP-2663) as a self-parking
//! call: the call waits as a job (`await_work`, no worker held) while
//! workers check on the task through delayed messages (`poll`), and the
//! tool is invoked again once the task needs a person or has ended.
//!
//! The wait's payload (what the inbox shows, and what a check reads) and
//! state name the task; a round of the task's questions keeps the task
//! with them, so the reply goes back by `tasks/update`. What the call
//! comes to is always what `tasks/get` says at that moment: a wake-up
//! (a check's, or a `respond` to the row) only says "look now".

use rmcp::model::{CallToolResult, DetailedTask, InputRequiredResult, Task, TaskPayload};
use serde_json::{json, Value};

use super::super::client::ServerError;
use super::super::elicit;
use super::{outcome, McpTool};
use crate::tool::{
    await_work, AskOutcome, AskRequest, Polled, ToolAnswers, ToolError, MAX_ASK_ROUNDS,
};

/// What a wait or a round of questions of a task keeps: the task's id
/// under `task` (a call's own questions keep the server's round state,
/// which has no such key), and, for questions, how to answer them.
pub(super) fn task_of(state: &Value) -> Option<&str> {
    state["task"].as_str()
}

/// How often a task is checked when its server does not say.
const DEFAULT_POLL_INTERVAL_MS: u64 = 1_000;

/// A server's `pollIntervalMs` is taken within these bounds: no check
/// loop of its making, and no wait so long that a stop goes unnoticed
/// for hours.
const POLL_INTERVAL_MS: std::ops::RangeInclusive<u64> = 250..=600_000;

/// The longest one check may take: a check holds a worker's slot, and a
/// server that hangs is checked again later rather than holding it for
/// its whole `timeout_ms`.
const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A server's poll interval, within [`POLL_INTERVAL_MS`].
fn poll_interval(task: &Task) -> u64 {
    task.poll_interval_ms
        .unwrap_or(DEFAULT_POLL_INTERVAL_MS)
        .clamp(*POLL_INTERVAL_MS.start(), *POLL_INTERVAL_MS.end())
}

/// A task's status message is cut to this many characters in the payload.
const STATUS_MESSAGE_CHARS: usize = 1_000;

impl McpTool {
    /// The server started `task` for the call: the call waits for it.
    pub(super) fn task_started(&self, task: &Task) -> ToolError {
        ::metrics::counter!(crate::metrics::MCP_TASKS, "server" => self.server.name().to_owned())
            .increment(1);
        tracing::info!(mcp.task.id = %task.task_id, "the server runs the call as a task");
        self.waits_for(task)
    }

    /// The wait for `task`, checked no sooner than its poll interval.
    fn waits_for(&self, task: &Task) -> ToolError {
        let mut payload = json!({
            "server": self.server.name(),
            "tool": self.tool,
            "taskId": task.task_id,
            "status": task.status,
        });
        if let Some(message) = &task.status_message {
            payload["statusMessage"] = json!(agentenkit_core::questions::clip(
                message,
                STATUS_MESSAGE_CHARS
            ));
        }
        await_work(
            super::super::TASK_REASON,
            payload,
            json!({ "task": task.task_id }),
            poll_interval(task),
            // At most the agent's `hitl_ttl_ms` (see `AwaitRequest`).
            task.ttl_ms,
        )
    }

    /// The call invoked again in a task's round: the person's reply goes
    /// to the server, or the task is given up, or it is looked at. Once
    /// the call fails for any reason of this side's, the task is
    /// cancelled: nothing is left running for nobody.
    pub(super) async fn resumed_task(
        &self,
        task_id: &str,
        answers: &ToolAnswers,
    ) -> Result<Value, ToolError> {
        let asked = answers.state.get("questions");
        match (&answers.outcome, asked) {
            (AskOutcome::Woke(_), _) => {}
            // A reply to the task's questions, whatever it is (a skip
            // declines, the expiry cancels): the task goes on.
            (outcome, Some(questions)) => {
                let sent = match elicit::responses(questions, outcome) {
                    Ok((responses, _)) => self.server.update_task(task_id, responses).await,
                    Err(unreadable) => Err(ServerError::Refused(unreadable)),
                };
                if let Err(e) = sent {
                    return Err(self.give_up(task_id, e.to_string()).await);
                }
            }
            // The wait itself rejected, or past its expiry: what the task
            // finished with, if it did; else it is given up.
            (outcome, None) => {
                match self.task(task_id).await {
                    Ok(done) if done.task.status.is_terminal() => {
                        return self.task_now(done, answers.round).await
                    }
                    _ => {}
                }
                let why = if *outcome == AskOutcome::Expired {
                    "did not finish before its wait expired"
                } else {
                    "was stopped by a person"
                };
                let why = format!("mcp server {} task {task_id} {why}", self.server.name());
                return Err(self.give_up(task_id, why).await);
            }
        }
        match self.task(task_id).await {
            Ok(task) => self.task_now(task, answers.round).await,
            Err(failure) => Err(self.give_up(task_id, failure.to_string()).await),
        }
    }

    /// Cancels `task_id` and says why the call failed.
    async fn give_up(&self, task_id: &str, why: String) -> ToolError {
        self.cancel(task_id).await;
        ToolError::Failed(format!("{why}; the task was cancelled"))
    }

    /// What the call comes to where `task` stands, after `round` rounds:
    /// a result, a failure, the task's questions, or another wait (a
    /// round the call may no longer ask for gives the task up instead).
    async fn task_now(&self, detailed: DetailedTask, round: u32) -> Result<Value, ToolError> {
        let server = self.server.name();
        let task_id = detailed.task.task_id.clone();
        let next = match detailed.payload {
            TaskPayload::Completed { result } => {
                let result: CallToolResult = serde_json::from_value(Value::Object(result))
                    .map_err(|e| {
                        ToolError::Failed(format!(
                            "mcp server {server} task {task_id} ended with a result that is not a tool's: {e}"
                        ))
                    })?;
                return outcome(result);
            }
            TaskPayload::Failed { error } => {
                return Err(ToolError::Failed(format!(
                    "mcp server {server} task {task_id} failed: {}",
                    error
                        .get("message")
                        .and_then(Value::as_str)
                        .map(|m| agentenkit_core::questions::clip(m, STATUS_MESSAGE_CHARS))
                        .unwrap_or_else(|| "(no message)".into())
                )))
            }
            TaskPayload::Cancelled => {
                return Err(ToolError::Failed(format!(
                    "mcp server {server} cancelled task {task_id}"
                )))
            }
            TaskPayload::InputRequired { input_requests } => {
                let asked = InputRequiredResult::from_input_requests(input_requests);
                match elicit::questions(server, &asked) {
                    Ok((questions, state)) => {
                        ::metrics::counter!(crate::metrics::MCP_QUESTIONS, "server" => server.to_owned())
                            .increment(1);
                        // Watched while they wait: a stop gives the task up.
                        let watch =
                            json!({ "server": server, "tool": self.tool, "taskId": task_id });
                        ToolError::Ask(Box::new(AskRequest {
                            reason: "mcp".into(),
                            questions,
                            state: json!({ "task": task_id, "questions": state }),
                            watch: Some(watch),
                        }))
                    }
                    Err(unaskable) => return Err(self.give_up(&task_id, unaskable).await),
                }
            }
            _ => self.waits_for(&detailed.task),
        };
        if round >= MAX_ASK_ROUNDS {
            let why = format!(
                "mcp server {server} task {task_id} needed more than {MAX_ASK_ROUNDS} rounds of waits and questions"
            );
            return Err(self.give_up(&task_id, why).await);
        }
        Err(next)
    }

    /// `tasks/get`, tried again while the server cannot be reached.
    async fn task(&self, task_id: &str) -> Result<DetailedTask, ToolError> {
        self.retrying(|_| self.server.get_task(task_id)).await
    }

    /// One check on the task a wait's `payload` names, within
    /// [`CHECK_TIMEOUT`]: ready once it is anything but working, or its
    /// server no longer knows it (the call reports that); a server out of
    /// reach, or that refuses otherwise, is checked again later.
    pub(super) async fn check(&self, payload: &Value) -> Polled {
        let Some(task_id) = payload["taskId"].as_str() else {
            return Polled::Ready;
        };
        let later = Polled::Pending {
            after_ms: DEFAULT_POLL_INTERVAL_MS,
        };
        let checked = tokio::time::timeout(CHECK_TIMEOUT, self.server.get_task(task_id)).await;
        match checked {
            Ok(Ok(task)) if task.payload == TaskPayload::Working => Polled::Pending {
                after_ms: poll_interval(&task.task),
            },
            Ok(Ok(_)) | Ok(Err(ServerError::InvalidParams(_))) => Polled::Ready,
            Ok(Err(ServerError::Unreachable(message) | ServerError::Refused(message))) => {
                tracing::info!(mcp.task.id = %task_id, "task check failed: {message}");
                later
            }
            Err(_) => {
                tracing::info!(mcp.task.id = %task_id, "task check took over {CHECK_TIMEOUT:?}");
                later
            }
        }
    }

    /// `tasks/cancel`, once: a server that cannot be reached keeps the
    /// task until its own ttl.
    pub(super) async fn cancel(&self, task_id: &str) {
        match self.server.cancel_task(task_id).await {
            Ok(()) => tracing::info!(mcp.task.id = %task_id, "task cancelled"),
            Err(e) => tracing::warn!(mcp.task.id = %task_id, "task could not be cancelled: {e}"),
        }
    }
}
