//! A segment from its leased context to its end: the steps (retrying a
//! retryable failure with backoff), then the commit that ends it: the run
//! completes, fails, or parks.

use std::time::Duration;

use agentenkit_core::{EventType, RunStatus, ToolCallId, ToolCallStatus};
use agentenkit_store::{Change, RunContext};
use serde_json::json;

use super::checkpoint::Checkpointer;
use super::error::SegmentError;
use super::outcome::Outcome;
use super::park::park;
use super::step::run_turn;
use crate::agent::Registry;
use crate::metrics;
use crate::tool::ParkRequest;

/// Segments of one step deferred in a row (a provider asking to wait, a
/// fleet limit) after which the run fails: waiting spends no attempt, but
/// a provider that never stops asking does not keep a run for ever (at
/// least 50 s, and up to 100 minutes, of waiting).
pub const MAX_DEFERRALS: i32 = 100;

/// How a step that failed for a passing reason is retried.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Failed attempts (model errors, unavailable tools) before the run fails.
    pub max_attempts: u32,
    /// The first retry waits this long; each next one twice as long.
    pub backoff: Duration,
    /// Workers that may die in one step (each taken over) before the run
    /// fails: a step that kills its worker every time ends.
    pub max_takeovers: u32,
}

/// Ends the segment as `advanced` says: a completed run finishes, a step
/// that waits parks, a failed one fails the run. What is left is for the
/// worker to act on (a lost lease, a store outage, a crash point, or an end
/// that could not be recorded).
pub async fn end(
    registry: &Registry,
    ctx: &RunContext,
    cp: &mut Checkpointer<'_>,
    advanced: Result<Outcome, SegmentError>,
) -> Result<(), SegmentError> {
    match advanced {
        Ok(Outcome::Completed { output }) => {
            finish(ctx, cp, RunStatus::Completed, output, None).await
        }
        Ok(Outcome::Park { to_park }) => park(registry, ctx, cp, to_park).await,
        Err(SegmentError::Parked(ParkRequest { reason, .. })) => {
            let error = format!("a tool parked ({reason}) outside a step");
            cp.discard();
            finish(ctx, cp, RunStatus::Failed, None, Some(error.into())).await
        }
        Err(SegmentError::Asked(round)) => {
            let error = format!("a tool parked ({}) outside a step", round.reason());
            cp.discard();
            finish(ctx, cp, RunStatus::Failed, None, Some(error.into())).await
        }
        Err(SegmentError::ModelRefused { status, message }) => {
            let failure = Failure::model_refused(status, message);
            tracing::warn!(error = %failure.text, "run failed: the model provider refused");
            cp.discard();
            finish(ctx, cp, RunStatus::Failed, None, Some(failure)).await
        }
        Err(SegmentError::RateLimited {
            provider,
            cause,
            wait,
            message,
        }) => {
            // What the segment did is kept; its next one comes when the
            // provider said, and no worker waits for it meanwhile.
            let wait = super::provider_limit::deferral(wait, super::provider_limit::random_unit());
            tracing::info!(%message, ?wait, "the model provider asked to wait; the run waits in a delayed message");
            ::metrics::counter!(metrics::PROVIDER_WAITS, "provider" => provider, "cause" => cause)
                .increment(1);
            cp.buffer(vec![Change::Defer {
                delay_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            }]);
            match cp.flush(Some("defer")).await {
                // The store refuses what the segment buffered: the run
                // fails without it, as any step the store refuses.
                Err(SegmentError::Permanent(error)) => {
                    cp.discard();
                    finish(ctx, cp, RunStatus::Failed, None, Some(error.into())).await
                }
                other => other,
            }
        }
        Err(SegmentError::Permanent(error)) | Err(SegmentError::Retry(error)) => {
            tracing::warn!(%error, "run failed");
            // What the step buffered may be the cause (a write the store
            // refuses): the failure is recorded without it.
            cp.discard();
            finish(ctx, cp, RunStatus::Failed, None, Some(error.into())).await
        }
        Err(other) => Err(other),
    }
}

/// Runs the loop, retrying retryable failures with backoff; returns the
/// last error once the attempts are spent.
pub async fn advance(
    registry: &Registry,
    retry: &RetryPolicy,
    ctx: &RunContext,
    cp: &mut Checkpointer<'_>,
) -> Result<Outcome, SegmentError> {
    let agent = registry.agent(&ctx.lease.run_name).ok_or_else(|| {
        SegmentError::Permanent(format!("unknown agent {:?}", ctx.lease.run_name))
    })?;
    let takeovers = ctx.takeovers.max(0) as u32;
    if takeovers >= retry.max_takeovers {
        return Err(SegmentError::Permanent(format!(
            "{takeovers} workers died running this step (each taken over): a step that \
             kills its worker"
        )));
    }
    if ctx.deferrals >= MAX_DEFERRALS {
        return Err(SegmentError::Permanent(format!(
            "the model provider asked to wait {} times in a row without progress",
            ctx.deferrals
        )));
    }
    let mut attempts = ctx.attempts.max(0) as u32;
    if attempts >= retry.max_attempts {
        return Err(SegmentError::Permanent(format!(
            "the step was attempted {attempts} times without progress"
        )));
    }
    loop {
        match run_turn(agent, registry, ctx, cp).await {
            Err(SegmentError::Retry(error)) => {
                attempts += 1;
                // What the attempt recorded before it failed is kept:
                // the retry replays it.
                cp.buffer(vec![Change::RecordFailure {
                    error: error.clone(),
                }]);
                cp.flush(None).await?;
                if attempts >= retry.max_attempts {
                    return Err(SegmentError::Retry(format!(
                        "{error} (after {attempts} attempts)"
                    )));
                }
                let backoff = retry.backoff * 2u32.saturating_pow(attempts - 1);
                tracing::info!(%error, attempts, ?backoff, "step failed; retrying");
                tokio::time::sleep(backoff.min(Duration::from_secs(30))).await;
                cp.rewind();
            }
            other => return other,
        }
    }
}

/// Why a run failed: the text its row and its parent keep, and what
/// `RUN_FAILED` carries besides `runId`.
struct Failure {
    text: String,
    event: serde_json::Value,
}

impl From<String> for Failure {
    fn from(text: String) -> Self {
        Failure {
            event: json!({ "error": text }),
            text,
        }
    }
}

impl Failure {
    /// `RUN_FAILED {error: "model", status, message}`: the provider's own
    /// words, for a client to show.
    fn model_refused(status: u16, message: String) -> Self {
        Failure {
            text: format!("the model provider refused the request ({status}): {message}"),
            event: json!({ "error": "model", "status": status, "message": message }),
        }
    }
}

/// Ends the run; a child run also settles its parent's delegation (its
/// output, or its failure, is the delegation's result) and resumes the
/// parent when nothing else of it is open.
async fn finish(
    ctx: &RunContext,
    cp: &mut Checkpointer<'_>,
    status: RunStatus,
    output: Option<String>,
    failure: Option<Failure>,
) -> Result<(), SegmentError> {
    let lease = &ctx.lease;
    let (error, failed_event) = match failure {
        Some(Failure { text, event }) => (Some(text), event),
        None => (None, json!({})),
    };
    let delegation = match (ctx.parent_run_id, &ctx.parent_tool_call_id) {
        (Some(parent_run_id), Some(call)) => Some(match status {
            RunStatus::Completed => Change::FinishDelegation {
                parent_run_id,
                call_id: ToolCallId(call.clone()),
                status: ToolCallStatus::Executed,
                result: json!(output.clone().unwrap_or_default()),
            },
            _ => Change::FinishDelegation {
                parent_run_id,
                call_id: ToolCallId(call.clone()),
                status: ToolCallStatus::Failed,
                result: json!({
                    "error": format!("sub-agent {} failed: {}", ctx.lease.run_name, error.as_deref().unwrap_or("unknown error")),
                }),
            },
        }),
        _ => None,
    };
    let (event_type, data) = match status {
        RunStatus::Completed => (
            EventType::RunCompleted,
            json!({ "runId": lease.run_id, "output": output }),
        ),
        _ => {
            let mut data = failed_event;
            data["runId"] = json!(lease.run_id);
            (EventType::RunFailed, data)
        }
    };
    cp.commit_end(
        [
            Change::FinishRun {
                status,
                output,
                error,
            },
            Change::Event { event_type, data },
        ]
        .into_iter()
        .chain(delegation)
        .collect(),
        "finish",
    )
    .await?;
    ::metrics::counter!(metrics::RUNS_FINISHED, "status" => status.as_str()).increment(1);
    Ok(())
}
