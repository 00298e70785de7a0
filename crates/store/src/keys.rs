//! API keys with scopes: made, listed, revoked and looked up. A key is
//! shown once, when made; the store keeps its SHA-256 only.

use agentenkit_core::{KeyScope, KeyScopes};
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::{Error, Result, Store};

/// What every key made here starts with: easy to tell apart from an
/// `AGENTENKIT_API_KEYS` key, and for secret scanners to find.
pub const KEY_PREFIX: &str = "aek_";

/// A key as the store knows it (never the key itself).
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRecord {
    pub id: Uuid,
    /// Whose threads the key acts on.
    pub owner: String,
    /// What the key is for, for people listing keys.
    pub name: String,
    pub scopes: KeyScopes,
    /// The approver groups of the key's holder.
    pub groups: Vec<String>,
    /// The person holding the key, when it was named: keys of one holder
    /// count as one approver.
    pub holder: Option<String>,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A key just made: its record, and the key, shown this once.
#[derive(Clone)]
pub struct NewKey {
    pub record: KeyRecord,
    pub key: String,
}

/// Never the key itself: a `{:?}` in a log line must not leak it.
impl std::fmt::Debug for NewKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewKey")
            .field("record", &self.record)
            .field("key", &"<shown once>")
            .finish()
    }
}

/// Whether `key` has the form of a key made here (`aek_` and 64 hex
/// digits): anything else is not looked up at all.
pub fn is_key_form(key: &str) -> bool {
    key.strip_prefix(KEY_PREFIX).is_some_and(|rest| {
        rest.len() == 64 && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

fn digest(key: &str) -> Vec<u8> {
    Sha256::digest(key.as_bytes()).to_vec()
}

fn record(row: &tokio_postgres::Row) -> Result<KeyRecord> {
    let names: Vec<String> = row.get("scopes");
    let scopes = names
        .iter()
        .map(|name| name.parse::<KeyScope>())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Corrupt(format!("api key scopes: {e}")))?;
    Ok(KeyRecord {
        id: row.get("id"),
        owner: row.get("owner"),
        name: row.get("name"),
        scopes: KeyScopes::of(&scopes),
        groups: row.get("groups"),
        holder: row.get("holder"),
        created_at: row.get("created_at"),
        revoked_at: row.get("revoked_at"),
    })
}

const COLUMNS: &str = "id, owner, name, scopes, groups, holder, created_at, revoked_at";

impl Store {
    /// Makes a key for `owner` with `scopes`, held by `holder` (the key
    /// itself when `None`) in the approver `groups`.
    pub async fn create_api_key(
        &self,
        owner: &str,
        name: &str,
        scopes: &[KeyScope],
        groups: &[String],
        holder: Option<&str>,
    ) -> Result<NewKey> {
        if owner.is_empty() || scopes.is_empty() {
            return Err(Error::Config(
                "a key needs an owner and at least one scope".into(),
            ));
        }
        if holder.is_some_and(str::is_empty) {
            return Err(Error::Config("a key's holder is a name, not empty".into()));
        }
        // 2 × 122 random bits (UUID v4, from the OS's generator).
        let key = format!(
            "{KEY_PREFIX}{}{}",
            Uuid::new_v4().simple(),
            Uuid::new_v4().simple()
        );
        let names: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
        let client = self.client().await?;
        let row = client
            .query_one(
                &format!(
                    "INSERT INTO api_keys (id, owner, name, secret_sha256, scopes, groups, holder)
                     VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {COLUMNS}"
                ),
                &[
                    &Uuid::now_v7(),
                    &owner,
                    &name,
                    &digest(&key),
                    &names,
                    &groups,
                    &holder,
                ],
            )
            .await?;
        Ok(NewKey {
            record: record(&row)?,
            key,
        })
    }

    /// Every key (revoked ones too), oldest first; of one owner when given.
    pub async fn list_api_keys(&self, owner: Option<&str>) -> Result<Vec<KeyRecord>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM api_keys WHERE $1::text IS NULL OR owner = $1
                     ORDER BY created_at, id"
                ),
                &[&owner],
            )
            .await?;
        rows.iter().map(record).collect()
    }

    /// Revokes key `id`: from now on it is refused, and the approvals it
    /// gave to calls still waiting for more are dropped with it, in one
    /// transaction (a vote stands for a key that can still be held to
    /// account). False when there is no such key or it was revoked already.
    pub async fn revoke_api_key(&self, id: Uuid) -> Result<bool> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let revoked = tx
            .execute(
                "UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL",
                &[&id],
            )
            .await?
            == 1;
        if revoked {
            let key = id.to_string();
            tx.execute(crate::calls::LOCK_RUNS_WITH_VOTES_OF_KEY_SQL, &[&key])
                .await?;
            tx.execute(crate::calls::DROP_VOTES_OF_KEY_SQL, &[&key])
                .await?;
        }
        tx.commit().await?;
        Ok(revoked)
    }

    /// The live (not revoked) key `key`, if there is one.
    pub async fn find_api_key(&self, key: &str) -> Result<Option<KeyRecord>> {
        if !is_key_form(key) {
            return Ok(None);
        }
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM api_keys WHERE secret_sha256 = $1 AND revoked_at IS NULL"
            ))
            .await?;
        client
            .query_opt(&stmt, &[&digest(key)])
            .await?
            .as_ref()
            .map(record)
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_form_of_a_key_made_here_is_looked_up() {
        let made = format!(
            "{KEY_PREFIX}{}{}",
            Uuid::new_v4().simple(),
            Uuid::new_v4().simple()
        );
        assert!(is_key_form(&made));
        assert!(!is_key_form("aek_"));
        assert!(!is_key_form(&made.to_uppercase()));
        assert!(!is_key_form(&format!("{made}0")));
        assert!(!is_key_form("alice-key"));
    }

    #[test]
    fn a_new_key_is_never_in_its_debug_text() {
        let key = NewKey {
            record: KeyRecord {
                id: Uuid::nil(),
                owner: "o".into(),
                name: String::new(),
                scopes: KeyScopes::all(),
                groups: vec![],
                holder: None,
                created_at: Utc::now(),
                revoked_at: None,
            },
            key: "aek_secret".into(),
        };
        assert!(!format!("{key:?}").contains("aek_secret"));
    }
}
