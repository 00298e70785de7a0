//! API keys: `AGENTENKIT_API_KEYS="owner:key,owner2:key2"`.

use std::collections::HashMap;

use agentenkit_core::Owner;
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

/// The authenticated owner of the request's API key.
pub struct Caller(pub Owner);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let key = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token)
            .ok_or(ApiError::Unauthorized)?;
        state
            .keys
            .owner(key)
            .cloned()
            .map(Caller)
            .ok_or(ApiError::Unauthorized)
    }
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

    #[test]
    fn malformed_entries_are_refused() {
        for bad in ["alice", "alice:", ":k", "a:k,b"] {
            assert!(ApiKeys::parse(bad).is_err(), "{bad}");
        }
    }
}
