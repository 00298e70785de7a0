//! Idempotency keys of batch requests: the same key and request give the
//! same response; the same key with another request is refused.
//!
//! A request claims its key before it does anything. Each item that
//! settles something records its result under the key in the transaction
//! that settles it ([`RecordedItem`]), so an attempt cut off half-way (a
//! crash, a lost connection) is finished by a retry that answers the items
//! it recorded as they were answered, and does the rest. The response is
//! kept once the request completes.

use std::collections::BTreeMap;
use std::time::Duration;

use agentenkit_core::Owner;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::pipeline::{Expect, Op};
use crate::{Error, Result, Store};

/// What a request may do under its key.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// Process the request: the key is new (or its earlier use is past
    /// retention), or an earlier attempt was cut off. `recorded` holds that
    /// attempt's results of the items it settled, by item index. `hold`
    /// fences what this attempt writes under the key: once a retry took
    /// the key over, nothing of this attempt's is written any more.
    Process {
        recorded: BTreeMap<usize, Value>,
        hold: Hold,
    },
    /// The request completed before: its response.
    Completed { status: u16, response: Value },
    /// Another attempt holds the key now.
    InProgress,
    /// The key was used with another request.
    Mismatch,
}

/// One attempt's hold of a key: when it claimed it. A retry that takes a
/// stale key over claims it anew, so an attempt whose hold no longer
/// matches has lost the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold(DateTime<Utc>);

/// How long a key holds.
#[derive(Debug, Clone, Copy)]
pub struct KeyTimes {
    /// An attempt that holds a key this long without completing is taken to
    /// be dead: a retry takes the key over.
    pub stale_after: Duration,
    /// A key is kept this long after its first use; then the reaper deletes
    /// it, and a request with it is new.
    pub keep_for: Duration,
}

impl Default for KeyTimes {
    fn default() -> Self {
        KeyTimes {
            stale_after: Duration::from_secs(30),
            keep_for: Duration::from_secs(24 * 3600),
        }
    }
}

/// The result of item `index` of the request under `key`, written with the
/// answer that settles it.
#[derive(Debug, Clone, Copy)]
pub struct RecordedItem<'a> {
    pub key: &'a str,
    /// The attempt's hold: the answer is refused
    /// ([`Error::IdempotencyKeyTakenOver`]) once another attempt took the
    /// key over.
    pub hold: Hold,
    pub index: usize,
    pub result: &'a Value,
}

impl RecordedItem<'_> {
    pub(crate) fn op(&self, owner: &Owner) -> Op {
        self.op_with(owner, self.result.clone())
    }

    /// The statement recording `result` instead of the one the caller
    /// knew before the answer (an approval counted toward several says how
    /// many it has).
    pub(crate) fn op_with(&self, owner: &Owner, result: Value) -> Op {
        Op::new(
            "UPDATE idempotency_keys SET items = items || jsonb_build_object($3::text, $4::jsonb)
             WHERE owner = $1 AND key = $2 AND claimed_at = $5 AND status IS NULL",
            vec![
                Box::new(owner.to_string()),
                Box::new(self.key.to_owned()),
                Box::new(self.index.to_string()),
                Box::new(result),
                Box::new(self.hold.0),
            ],
        )
        .expect(Expect::One(Error::IdempotencyKeyTakenOver {
            key: self.key.to_owned(),
        }))
    }
}

impl Store {
    /// Claims `key` of `owner` for a request whose canonical hash is
    /// `request_hash`.
    pub async fn claim_idempotency_key(
        &self,
        owner: &Owner,
        key: &str,
        request_hash: &str,
        times: KeyTimes,
    ) -> Result<Claim> {
        let client = self.client().await?;
        let owner = owner.to_string();
        let keep_secs = times.keep_for.as_secs_f64();
        let stale_secs = times.stale_after.as_secs_f64();
        // A key whose row disappears between the statements (the reaper)
        // is claimed again from the top.
        for _ in 0..3 {
            let fresh = client
                .query_opt(
                    "INSERT INTO idempotency_keys (owner, key, request_hash) VALUES ($1, $2, $3)
                     ON CONFLICT (owner, key) DO UPDATE
                       SET request_hash = EXCLUDED.request_hash, created_at = now(),
                           claimed_at = now(), status = NULL, response = NULL, items = '{}'
                       WHERE idempotency_keys.created_at < now() - make_interval(secs => $4)
                     RETURNING claimed_at",
                    &[&owner, &key, &request_hash, &keep_secs],
                )
                .await?;
            if let Some(row) = fresh {
                return Ok(Claim::Process {
                    recorded: BTreeMap::new(),
                    hold: Hold(row.get(0)),
                });
            }
            let Some(row) = client
                .query_opt(
                    "SELECT request_hash, status, response,
                            claimed_at < now() - make_interval(secs => $3) AS stale
                     FROM idempotency_keys WHERE owner = $1 AND key = $2",
                    &[&owner, &key, &stale_secs],
                )
                .await?
            else {
                continue;
            };
            if row.get::<_, String>("request_hash") != request_hash {
                return Ok(Claim::Mismatch);
            }
            if let Some(status) = row.get::<_, Option<i16>>("status") {
                return Ok(Claim::Completed {
                    status: status as u16,
                    response: row.get::<_, Option<Value>>("response").unwrap_or_default(),
                });
            }
            if !row.get::<_, bool>("stale") {
                return Ok(Claim::InProgress);
            }
            // Of two retries taking over at once, one does.
            let taken = client
                .query_opt(
                    "UPDATE idempotency_keys SET claimed_at = now()
                     WHERE owner = $1 AND key = $2 AND status IS NULL
                       AND claimed_at < now() - make_interval(secs => $3)
                     RETURNING items, claimed_at",
                    &[&owner, &key, &stale_secs],
                )
                .await?;
            return Ok(match taken {
                Some(row) => Claim::Process {
                    recorded: recorded_items(row.get("items")),
                    hold: Hold(row.get("claimed_at")),
                },
                None => Claim::InProgress,
            });
        }
        Ok(Claim::InProgress)
    }

    /// Keeps the response of the request under `key`, if this attempt
    /// still holds it (`hold`): the same request with the key gets it
    /// again. False when a retry took the key over: its response stands.
    pub async fn complete_idempotency_key(
        &self,
        owner: &Owner,
        key: &str,
        hold: Hold,
        status: u16,
        response: &Value,
    ) -> Result<bool> {
        let client = self.client().await?;
        Ok(client
            .execute(
                "UPDATE idempotency_keys SET status = $3, response = $4
                 WHERE owner = $1 AND key = $2 AND claimed_at = $5 AND status IS NULL",
                &[
                    &owner.to_string(),
                    &key,
                    &(status as i16),
                    response,
                    &hold.0,
                ],
            )
            .await?
            == 1)
    }

    /// Lets a retry take `key` over at once, if this attempt still holds
    /// it: it gave up (a dependency failed) and what it recorded stands.
    pub async fn release_idempotency_key(
        &self,
        owner: &Owner,
        key: &str,
        hold: Hold,
    ) -> Result<()> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE idempotency_keys SET claimed_at = '-infinity'
                 WHERE owner = $1 AND key = $2 AND claimed_at = $3 AND status IS NULL",
                &[&owner.to_string(), &key, &hold.0],
            )
            .await?;
        Ok(())
    }

    /// Deletes up to `batch` keys first used more than `keep_for` ago;
    /// returns how many.
    pub async fn delete_expired_idempotency_keys(
        &self,
        keep_for: Duration,
        batch: i64,
    ) -> Result<u64> {
        let client = self.client().await?;
        Ok(client
            .execute(
                "DELETE FROM idempotency_keys WHERE (owner, key) IN (
                     SELECT owner, key FROM idempotency_keys
                     WHERE created_at < now() - make_interval(secs => $1)
                     ORDER BY created_at LIMIT $2)",
                &[&keep_for.as_secs_f64(), &batch],
            )
            .await?)
    }
}

fn recorded_items(items: Value) -> BTreeMap<usize, Value> {
    match items {
        Value::Object(map) => map
            .into_iter()
            .filter_map(|(index, result)| Some((index.parse().ok()?, result)))
            .collect(),
        _ => BTreeMap::new(),
    }
}
