//! Editing a past turn: the thread is cut back to before one of the
//! person's messages and goes on from the edited text.

use agentenkit_core::{Owner, RunId, ThreadId};
use serde_json::json;

use super::{lock, once, PostedTurn, Sent};
use crate::outbox::OutboxRow;
use crate::pipeline::{Expect, Op, OpenTx};
use crate::{Error, Result, Store};

/// Cuts away the trees of the thread's turns from message `$2` on.
const CUT_FROM_SQL: &str = "
    WITH turns AS (
        SELECT DISTINCT r.id FROM messages m JOIN runs r ON r.id = m.run_id
        WHERE m.thread_id = $1 AND m.id >= $2 AND r.parent_run_id IS NULL)
    UPDATE runs SET cut = true
    WHERE (id IN (SELECT id FROM turns)
           OR (root_run_id IN (SELECT id FROM turns) AND parent_run_id IS NOT NULL))
      AND NOT cut";

impl Store {
    /// Edits a turn: the thread is cut back to before user message
    /// `message` (an active run interrupted first, the turns from that one
    /// on cut away) and a new turn starts from `content`.
    pub async fn edit_turn(
        &self,
        thread: ThreadId,
        owner: &Owner,
        message: i64,
        sent: Sent<'_>,
    ) -> Result<PostedTurn> {
        let run = RunId::new();
        let (posted, outbox) = crate::pipeline::retry_conflicts(|| {
            self.edit_turn_once(thread, owner, run, message, sent)
        })
        .await?;
        self.publish(&outbox).await;
        // An interrupted tree's slots are free (the new turn took one).
        self.admit_after_stopping(owner.as_str(), thread).await;
        Ok(posted)
    }

    async fn edit_turn_once(
        &self,
        thread: ThreadId,
        owner: &Owner,
        run: RunId,
        message: i64,
        sent: Sent<'_>,
    ) -> Result<(PostedTurn, Vec<OutboxRow>)> {
        let tx = OpenTx::new(self.client().await?);
        let locked = lock(&tx, thread, Some(owner)).await?;
        if let Some(kept) = once::replay(&tx, owner, &sent).await? {
            return Ok((kept, Vec::new()));
        }
        check_edited(&tx, thread, message).await?;
        let mut ordered = Vec::new();
        let interrupted = match locked.active {
            Some(active) => {
                self.interrupt(&tx, thread, active, ("edited", None), &mut ordered)
                    .await?
            }
            None => Vec::new(),
        };
        let mut ops = vec![Op::new(
            CUT_FROM_SQL,
            vec![Box::new(thread.0), Box::new(message)],
        )];
        ordered.extend(self.cut_event(thread, json!({ "fromMessageId": message, "runId": run })));
        let posted = PostedTurn::started(run, interrupted);
        ops.extend(super::keep(owner, &sent, &posted)?);
        let (content, trace) = (sent.content, sent.trace);
        let outbox = self
            .start_in(&tx, thread, &locked, run, content, trace, ops, ordered)
            .await?;
        Ok((posted, outbox))
    }
}

/// Refuses (rolling `tx` back) an edit of `message` unless it is a turn's
/// user message still in the thread's conversation.
async fn check_edited(tx: &OpenTx, thread: ThreadId, message: i64) -> Result<()> {
    let edited = Op::new(
        "SELECT m.body_whole->>'role' = 'user' AND NOT m.body_whole ? 'steered'
                AND r.parent_run_id IS NULL, r.cut
         FROM messages_whole m JOIN runs r ON r.id = m.run_id
         WHERE m.thread_id = $1 AND m.id = $2",
        vec![Box::new(thread.0), Box::new(message)],
    )
    .expect(Expect::Rows);
    let edited = tx.exchange_one(edited).await?;
    let refusal = match edited.first() {
        None => Some(Error::NotFound {
            what: "message",
            id: message.to_string(),
        }),
        // A turn already cut away is no longer in the conversation.
        Some(row) if row.get::<_, bool>(1) => Some(Error::NotFound {
            what: "message",
            id: message.to_string(),
        }),
        Some(row) if !row.get::<_, bool>(0) => Some(Error::NotATurn {
            message_id: message,
        }),
        Some(_) => None,
    };
    if let Some(refusal) = refusal {
        tx.rollback().await?;
        return Err(refusal);
    }
    Ok(())
}
