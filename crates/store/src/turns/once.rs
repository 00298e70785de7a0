//! A message sent with an `Idempotency-Key`: the key is kept, with what the
//! message became, in the transaction that makes it so. A retry with the
//! key finds it under the thread's lock and gets the same answer (nothing
//! is queued, steered or interrupted twice), whatever crashed in between.

use std::time::Duration;

use agentenkit_core::Owner;

use super::PostedTurn;
use crate::pipeline::{Expect, Op, OpenTx};
use crate::{Error, Result};

/// The `Idempotency-Key` a message came with.
#[derive(Debug, Clone, Copy)]
pub struct Once<'a> {
    /// The key as the caller's route names it (one thread's messages do
    /// not share keys with another's, nor with batch decisions).
    pub key: &'a str,
    /// The canonical hash of what was sent with it.
    pub request_hash: &'a str,
    /// How long a key is kept.
    pub keep_for: Duration,
}

/// What the first message with `once`'s key became, when one was sent
/// (with the same request: another is `IdempotencyKeyReused`, and `tx`
/// rolled back).
async fn replayed(tx: &OpenTx, owner: &Owner, once: &Once<'_>) -> Result<Option<PostedTurn>> {
    let kept = Op::new(
        "SELECT request_hash, response FROM idempotency_keys
         WHERE owner = $1 AND key = $2 AND status IS NOT NULL
           AND created_at > now() - make_interval(secs => $3)",
        vec![
            Box::new(owner.to_string()),
            Box::new(once.key.to_owned()),
            Box::new(once.keep_for.as_secs_f64()),
        ],
    )
    .expect(Expect::Rows);
    let Some(row) = tx.exchange_one(kept).await?.into_iter().next() else {
        return Ok(None);
    };
    if row.get::<_, &str>(0) != once.request_hash {
        tx.rollback().await?;
        return Err(Error::IdempotencyKeyReused {
            key: once.key.to_owned(),
        });
    }
    let mut posted: PostedTurn = serde_json::from_value(
        row.get::<_, Option<serde_json::Value>>(1)
            .unwrap_or_default(),
    )?;
    posted.replayed = true;
    Ok(Some(posted))
}

/// What a first message with `sent`'s key became, if it came with one and
/// one was sent (`tx` then committed: nothing more is done).
pub(super) async fn replay(
    tx: &OpenTx,
    owner: &Owner,
    sent: &super::Sent<'_>,
) -> Result<Option<PostedTurn>> {
    let Some(once) = &sent.once else {
        return Ok(None);
    };
    let kept = replayed(tx, owner, once).await?;
    if kept.is_some() {
        tx.commit_with(Vec::new()).await?;
    }
    Ok(kept)
}

/// Keeps `once`'s key with what the message became (an expired row of the
/// key is replaced; a live one cannot be there under the thread's lock).
pub(super) fn keep_op(owner: &Owner, once: &Once<'_>, posted: &PostedTurn) -> Result<Op> {
    Ok(Op::new(
        "INSERT INTO idempotency_keys (owner, key, request_hash, status, response)
         VALUES ($1, $2, $3, 202, $4)
         ON CONFLICT (owner, key) DO UPDATE
           SET request_hash = EXCLUDED.request_hash, created_at = now(), claimed_at = now(),
               status = 202, response = EXCLUDED.response, items = '{}'
           WHERE idempotency_keys.created_at < now() - make_interval(secs => $5)",
        vec![
            Box::new(owner.to_string()),
            Box::new(once.key.to_owned()),
            Box::new(once.request_hash.to_owned()),
            Box::new(serde_json::to_value(posted)?),
            Box::new(once.keep_for.as_secs_f64()),
        ],
    )
    .expect(Expect::One(Error::IdempotencyKeyTakenOver {
        key: once.key.to_owned(),
    })))
}
