//! Checks on work a call waits for (a tool's `await_work`: an MCP server's
//! task). The park wrote the first `Poll` message to the outbox; each
//! check either writes the next one (consuming its own, in one
//! transaction) or ends the chain. A check's outbox row names the one
//! message of the chain still due: a duplicate of an earlier check finds
//! its row gone and does nothing, so a chain never forks.

use agentenkit_core::{Owner, QueueMessage, ToolCallStatus};
use serde_json::Value;

use crate::outbox::{self, OutboxRow};
use crate::pipeline::{Answer, Expect, Op, OpenTx};
use crate::{Result, Store};

/// The call a check is for, as it stands.
#[derive(Debug, Clone, PartialEq)]
pub enum PolledCall {
    /// Its wait is open: check on the work.
    Waiting(WaitingCall),
    /// Its run was stopped while it waited: the work may be given up.
    Cancelled(WaitingCall),
    /// Answered, expired, gone, or the message is a duplicate of a check
    /// already made: nothing to do.
    Done,
}

/// What checking on a call's work takes.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitingCall {
    /// The owner of its thread: the wake-up is a reply on their behalf.
    pub owner: Owner,
    /// Its run's agent, and the version the run is pinned to.
    pub agent: String,
    pub agent_version: Option<String>,
    pub tool_name: String,
    /// The tool's payload: the row's `arguments` for a wait; for
    /// questions, the work they belong to (their `watch`).
    pub payload: Value,
    /// Watched for the run's stop only: questions a person answers, or a
    /// wait not parked yet.
    pub watched: bool,
}

impl Store {
    /// The call `message` (a [`QueueMessage::Poll`]) checks on, read
    /// without a lock; `Done` when its outbox row is gone (a duplicate).
    pub async fn polled_call(&self, message: &QueueMessage) -> Result<PolledCall> {
        let QueueMessage::Poll {
            run_id,
            tool_call_id,
            ..
        } = message
        else {
            return Ok(PolledCall::Done);
        };
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT tc.status, tc.arguments, tc.name, r.name, r.agent_version, t.owner,
                        EXISTS (SELECT 1 FROM outbox WHERE key = $3),
                        tc.kind = 'ask', tc.park_request -> 'watch'
                 FROM tool_calls tc
                 JOIN runs r ON r.id = tc.run_id
                 JOIN threads t ON t.id = tc.thread_id
                 WHERE tc.run_id = $1 AND tc.id = $2",
            )
            .await?;
        let row = client
            .query_opt(
                &stmt,
                &[&run_id.0, &tool_call_id.as_str(), &message.outbox_key()],
            )
            .await?;
        let Some(row) = row.filter(|row| row.get::<_, bool>(6)) else {
            return Ok(PolledCall::Done);
        };
        let status: ToolCallStatus = row.get::<_, &str>(0).parse()?;
        let questions: bool = row.get(7);
        let payload = if questions { 8 } else { 1 };
        let call = WaitingCall {
            watched: questions,
            payload: row.get::<_, Option<Value>>(payload).unwrap_or(Value::Null),
            tool_name: row.get(2),
            agent: row.get(3),
            agent_version: row.get(4),
            owner: Owner(row.get(5)),
        };
        Ok(match status {
            ToolCallStatus::PendingApproval => PolledCall::Waiting(call),
            // Journaled and not parked yet (its worker died between, or is
            // about to park it): only watched until it is.
            ToolCallStatus::Proposed => PolledCall::Waiting(WaitingCall {
                watched: true,
                ..call
            }),
            ToolCallStatus::Cancelled => PolledCall::Cancelled(call),
            _ => PolledCall::Done,
        })
    }

    /// The chain's next check, due in `delay_ms`, in place of `message`:
    /// one transaction consumes `message`'s outbox row and writes the
    /// next one, then publishes it. `false` (nothing written) when the row
    /// was already consumed (a duplicate got here first).
    pub async fn poll_again(
        &self,
        message: &QueueMessage,
        next: &QueueMessage,
        delay_ms: u64,
    ) -> Result<bool> {
        let tx = OpenTx::new(self.client().await?);
        let consumed = tx
            .begin_with(vec![Op::new(
                "DELETE FROM outbox WHERE key = $1 RETURNING id",
                vec![Box::new(message.outbox_key())],
            )
            .expect(Expect::Rows)])
            .await?;
        if consumed
            .into_iter()
            .next()
            .map(Answer::rows)
            .unwrap_or_default()
            .is_empty()
        {
            tx.rollback().await?;
            return Ok(false);
        }
        let answers = tx
            .commit_with(vec![outbox::insert_op(next, delay_ms)])
            .await?;
        let rows: Vec<OutboxRow> = match answers.into_iter().next() {
            Some(Answer::Ids(ids)) => ids
                .into_iter()
                .map(|id| OutboxRow {
                    id,
                    message: next.clone(),
                    delay_ms,
                    claimed: None,
                    trace: None,
                })
                .collect(),
            _ => Vec::new(),
        };
        self.publish(&rows).await;
        Ok(true)
    }

    /// Ends the chain: `message`'s outbox row is consumed.
    pub async fn poll_ended(&self, message: &QueueMessage) -> Result<()> {
        self.consume_message(message).await
    }
}
