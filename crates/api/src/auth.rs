//! API keys: `AGENTENKIT_API_KEYS="owner:key,owner2:key2"` (every scope),
//! and keys with scopes made with `agentenkit keys` (stored hashed, looked
//! up on use and kept a few seconds).

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use agentenkit_core::approvals::Approver;
use agentenkit_core::{KeyScope, KeyScopes, Owner};
use agentenkit_store::{KeyRecord, Store};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use thiserror::Error;

use crate::{ApiError, AppState};

#[derive(Debug, Clone, Default)]
pub struct ApiKeys {
    by_key: HashMap<String, Owner>,
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid API key entry {entry:?}: expected owner:key")]
pub struct ApiKeysError {
    pub entry: String,
}

impl ApiKeys {
    /// Parses `owner:key,owner2:key2`; whitespace around entries is ignored.
    pub fn parse(text: &str) -> Result<ApiKeys, ApiKeysError> {
        let mut by_key = HashMap::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            match entry.split_once(':') {
                Some((owner, key)) if !owner.is_empty() && !key.is_empty() => {
                    by_key.insert(key.to_owned(), Owner(owner.to_owned()));
                }
                _ => {
                    return Err(ApiKeysError {
                        entry: entry.chars().take(40).collect(),
                    })
                }
            }
        }
        Ok(ApiKeys { by_key })
    }

    pub fn owner(&self, key: &str) -> Option<&Owner> {
        self.by_key.get(key)
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// Who calls, and what their key allows.
#[derive(Debug, Clone)]
pub struct Caller {
    pub owner: Owner,
    pub scopes: KeyScopes,
    /// For a key made with `agentenkit keys`: its id, its holder and the
    /// holder's approver groups (empty for a key of `AGENTENKIT_API_KEYS`).
    pub approver: Approver,
    /// The token of a key made with `agentenkit keys`, kept so a long
    /// request (a stream) can ask again whether it still holds.
    token: Option<String>,
}

impl Caller {
    /// Whether the key still holds (not revoked), as the key cache knows
    /// within its window; a key of `AGENTENKIT_API_KEYS` always does. An
    /// unreachable store answers `false`: a stream ends, and its client
    /// reconnects and is authenticated afresh.
    pub(crate) async fn still_valid(&self, state: &AppState) -> bool {
        match &self.token {
            None => true,
            Some(token) => matches!(state.key_cache.find(&state.store, token).await, Ok(Some(_))),
        }
    }

    /// 403 naming `scope` unless the key has it.
    pub fn require(&self, scope: KeyScope) -> Result<(), ApiError> {
        if self.scopes.allow(scope) {
            Ok(())
        } else {
            Err(ApiError::Forbidden { missing: scope })
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let key = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token)
            .ok_or(ApiError::Unauthorized)?;
        if let Some(owner) = state.keys.owner(key) {
            return Ok(Caller {
                owner: owner.clone(),
                scopes: KeyScopes::all(),
                approver: Approver::default(),
                token: None,
            });
        }
        match state.key_cache.find(&state.store, key).await? {
            Some(record) => Ok(Caller {
                owner: Owner(record.owner),
                scopes: record.scopes,
                approver: Approver {
                    key_id: Some(record.id.to_string()),
                    holder: record.holder,
                    groups: record.groups,
                },
                token: Some(key.to_owned()),
            }),
            None => Err(ApiError::Unauthorized),
        }
    }
}

/// A route's scope, named by a type: `Scoped<Read>`.
pub trait RouteScope {
    const SCOPE: KeyScope;
}

/// Reading threads, runs, the inbox; streaming.
pub struct Read;

impl RouteScope for Read {
    const SCOPE: KeyScope = KeyScope::Read;
}

/// Starting threads, sending messages, stopping turns.
pub struct ThreadsWrite;

impl RouteScope for ThreadsWrite {
    const SCOPE: KeyScope = KeyScope::ThreadsWrite;
}

/// The owner of a caller whose key has `S`'s scope (403 naming it
/// otherwise).
pub struct Scoped<S>(pub Owner, pub PhantomData<S>);

impl<S: RouteScope> FromRequestParts<AppState> for Scoped<S> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        caller.require(S::SCOPE)?;
        Ok(Scoped(caller.owner, PhantomData))
    }
}

/// Answering approvals (or settling jobs): the scope a refused key is told
/// it lacks on the approval routes.
pub struct Approvals;

impl RouteScope for Approvals {
    const SCOPE: KeyScope = KeyScope::RespondApprovals;
}

/// Answering question sets.
pub struct Questions;

impl RouteScope for Questions {
    const SCOPE: KeyScope = KeyScope::RespondQuestions;
}

/// A caller whose key may answer something (approvals, questions or jobs),
/// checked from the headers alone: a key that can answer nothing is
/// refused before its body is read, told it lacks `S`'s scope (the
/// route's usual one). Which kind the request needs is checked under the
/// run's lock, once the request is found.
pub struct Responder<S>(pub Caller, pub PhantomData<S>);

/// The scopes that answer some kind of open request.
const RESPOND_SCOPES: [KeyScope; 3] = [
    KeyScope::RespondApprovals,
    KeyScope::RespondQuestions,
    KeyScope::SettleJobs,
];

impl<S: RouteScope> FromRequestParts<AppState> for Responder<S> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        if RESPOND_SCOPES
            .iter()
            .any(|scope| caller.scopes.allow(*scope))
        {
            Ok(Responder(caller, PhantomData))
        } else {
            Err(ApiError::Forbidden { missing: S::SCOPE })
        }
    }
}

/// Keys of the store, as looked up lately: a request does not pay a
/// database read for its key each time, and a revoked key is refused
/// within `ttl`.
pub struct KeyCache {
    ttl: Duration,
    found: Mutex<HashMap<String, (KeyRecord, Instant)>>,
    /// Tokens of a key's form that named no live key, lately: asked again
    /// within `ttl`, they cost no lookup.
    missing: Mutex<HashMap<String, Instant>>,
    /// Lookups in flight of tokens never seen valid: a flood of made-up
    /// tokens holds at most this many of the store's connections, never
    /// the whole pool.
    lookups: tokio::sync::Semaphore,
    /// Lookups in flight of tokens seen valid before (their cache entry
    /// expired): slots of their own, so that such a flood cannot keep the
    /// keys people use from being looked up again.
    known_lookups: tokio::sync::Semaphore,
}

/// Key lookups the store serves at once; a request past them waits up to
/// [`KEY_LOOKUP_WAIT`], then is a 503.
pub const KEY_LOOKUPS_AT_ONCE: usize = 4;
pub const KEY_LOOKUP_WAIT: Duration = Duration::from_secs(2);

/// Past this many keys the cache starts over (keys are few; this bounds
/// what a flood of distinct valid keys could hold).
const KEY_CACHE_MAX: usize = 10_000;

impl KeyCache {
    pub fn new(ttl: Duration) -> Self {
        KeyCache {
            ttl,
            found: Mutex::new(HashMap::new()),
            missing: Mutex::new(HashMap::new()),
            lookups: tokio::sync::Semaphore::new(KEY_LOOKUPS_AT_ONCE),
            known_lookups: tokio::sync::Semaphore::new(KEY_LOOKUPS_AT_ONCE),
        }
    }

    pub(crate) async fn find(
        &self,
        store: &Store,
        key: &str,
    ) -> Result<Option<KeyRecord>, ApiError> {
        self.find_with(key, || async { store.find_api_key(key).await })
            .await
    }

    /// [`KeyCache::find`], the store's lookup being `lookup`.
    async fn find_with<F, Fut>(&self, key: &str, lookup: F) -> Result<Option<KeyRecord>, ApiError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = agentenkit_store::Result<Option<KeyRecord>>>,
    {
        // Only the form of a key made here costs a lookup.
        if !agentenkit_store::is_key_form(key) {
            return Ok(None);
        }
        // Kept by digest: the cache holds no key.
        let digest = hex_sha256(key);
        let mut seen_valid = false;
        if let Some((record, at)) = self.found.lock().expect("key cache").get(&digest) {
            if at.elapsed() < self.ttl {
                return Ok(Some(record.clone()));
            }
            seen_valid = true;
        }
        if let Some(at) = self.missing.lock().expect("key cache").get(&digest) {
            if at.elapsed() < self.ttl {
                return Ok(None);
            }
        }
        let slots = if seen_valid {
            &self.known_lookups
        } else {
            &self.lookups
        };
        let _lookup = tokio::time::timeout(KEY_LOOKUP_WAIT, slots.acquire())
            .await
            .map_err(|_| {
                ApiError::Unavailable("too many API keys are being looked up at once".into())
            })?
            .expect("never closed");
        let record = lookup().await?;
        match &record {
            Some(record) => {
                let mut found = self.found.lock().expect("key cache");
                if found.len() >= KEY_CACHE_MAX {
                    found.clear();
                }
                found.insert(digest.clone(), (record.clone(), Instant::now()));
                self.missing.lock().expect("key cache").remove(&digest);
            }
            None => {
                self.found.lock().expect("key cache").remove(&digest);
                let mut missing = self.missing.lock().expect("key cache");
                if missing.len() >= KEY_CACHE_MAX {
                    missing.clear();
                }
                missing.insert(digest, Instant::now());
            }
        }
        Ok(record)
    }
}

fn hex_sha256(text: &str) -> String {
    agentenkit_core::canonical::sha256_hex(text.as_bytes())
}

/// The token of a `Bearer` credential: the scheme is case-insensitive
/// (RFC 7235 §2.1), separated from the token by spaces.
fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer k1"), Some("k1"));
        assert_eq!(bearer_token("bearer k1"), Some("k1"));
        assert_eq!(bearer_token("BEARER   k1 "), Some("k1"));
        assert_eq!(bearer_token("Basic k1"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearerk1"), None);
    }

    #[test]
    fn parses_owner_key_pairs() {
        let keys = ApiKeys::parse(" alice:k1, bob:k2 ,").unwrap();
        assert_eq!(keys.owner("k1"), Some(&Owner("alice".into())));
        assert_eq!(keys.owner("k2"), Some(&Owner("bob".into())));
        assert_eq!(keys.owner("k3"), None);
        assert!(ApiKeys::parse("").unwrap().is_empty());
    }

    /// A key made here, and its record.
    fn made_key(n: u8) -> (String, KeyRecord) {
        let key = format!(
            "{}{}",
            agentenkit_store::KEY_PREFIX,
            format!("{n:02x}").repeat(32)
        );
        assert!(agentenkit_store::is_key_form(&key), "{key}");
        let record = KeyRecord {
            id: uuid::Uuid::now_v7(),
            owner: "alice".into(),
            name: "k".into(),
            scopes: agentenkit_core::KeyScopes::all(),
            groups: vec![],
            holder: None,
            created_at: chrono::Utc::now(),
            revoked_at: None,
        };
        (key, record)
    }

    /// Made-up keys whose lookups never end hold every slot of the unknown;
    /// a key seen valid before is still looked up again (its entry
    /// expired: the TTL is zero), not refused as "too many at once".
    #[tokio::test]
    async fn a_flood_of_made_up_keys_leaves_keys_seen_valid_answered() {
        let cache = std::sync::Arc::new(KeyCache::new(Duration::ZERO));
        let (valid, record) = made_key(1);
        let found = cache
            .find_with(&valid, || async { Ok(Some(record.clone())) })
            .await
            .unwrap();
        assert!(found.is_some());
        let mut flood = Vec::new();
        for n in 0..(KEY_LOOKUPS_AT_ONCE as u8 + 2) {
            let cache = cache.clone();
            let (made_up, _) = made_key(100 + n);
            flood.push(tokio::spawn(async move {
                cache.find_with(&made_up, std::future::pending).await
            }));
        }
        tokio::task::yield_now().await;
        assert_eq!(
            cache.lookups.available_permits(),
            0,
            "the flood holds the slots"
        );
        let again = cache
            .find_with(&valid, || async { Ok(Some(record.clone())) })
            .await;
        assert!(matches!(again, Ok(Some(_))), "{again:?}");
        for task in flood {
            task.abort();
        }
    }

    #[test]
    fn malformed_entries_are_refused() {
        for bad in ["alice", "alice:", ":k", "a:k,b"] {
            assert!(ApiKeys::parse(bad).is_err(), "{bad}");
        }
    }
}
