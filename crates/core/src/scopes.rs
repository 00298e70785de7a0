//! What an API key may do: its scopes, and the scope each kind of open
//! request needs to be answered.

use std::fmt;
use std::str::FromStr;

use crate::{Error, ToolKind};

/// One thing a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyScope {
    /// Read threads, runs, journals and the inbox; stream events.
    Read,
    /// Approve or deny a person's approval.
    RespondApprovals,
    /// Answer or skip a question set.
    RespondQuestions,
    /// Settle a job a self-parking tool waits for (its webhook).
    SettleJobs,
    /// Start threads, send messages, stop turns.
    ThreadsWrite,
    /// Everything.
    Admin,
}

impl KeyScope {
    pub const ALL: [KeyScope; 6] = [
        KeyScope::Read,
        KeyScope::RespondApprovals,
        KeyScope::RespondQuestions,
        KeyScope::SettleJobs,
        KeyScope::ThreadsWrite,
        KeyScope::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            KeyScope::Read => "read",
            KeyScope::RespondApprovals => "respond:approvals",
            KeyScope::RespondQuestions => "respond:questions",
            KeyScope::SettleJobs => "settle:jobs",
            KeyScope::ThreadsWrite => "threads:write",
            KeyScope::Admin => "admin",
        }
    }

    /// The scope an answer to an open request of `kind` needs; `None` for
    /// kinds nobody answers (a function call, a delegation).
    pub fn to_answer(kind: ToolKind) -> Option<KeyScope> {
        match kind {
            ToolKind::Approval => Some(KeyScope::RespondApprovals),
            ToolKind::Ask => Some(KeyScope::RespondQuestions),
            ToolKind::Park => Some(KeyScope::SettleJobs),
            ToolKind::Function | ToolKind::Delegate => None,
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for KeyScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for KeyScope {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Error> {
        KeyScope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == text)
            .ok_or_else(|| Error::Unknown {
                what: "key scope",
                value: text.chars().take(40).collect(),
            })
    }
}

/// The scopes of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeyScopes(u8);

impl KeyScopes {
    /// Every scope: what a key of `AGENTENKIT_API_KEYS` has.
    pub fn all() -> KeyScopes {
        KeyScopes::of(&[KeyScope::Admin])
    }

    pub fn of(scopes: &[KeyScope]) -> KeyScopes {
        KeyScopes(scopes.iter().fold(0, |bits, scope| bits | scope.bit()))
    }

    /// Whether these scopes allow what `needed` allows (`admin` allows
    /// everything).
    pub fn allow(self, needed: KeyScope) -> bool {
        self.0 & (needed.bit() | KeyScope::Admin.bit()) != 0
    }

    /// The scopes, in `KeyScope::ALL`'s order.
    pub fn list(self) -> Vec<KeyScope> {
        KeyScope::ALL
            .into_iter()
            .filter(|scope| self.0 & scope.bit() != 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn scopes_read_back_from_their_names() {
        for scope in KeyScope::ALL {
            assert_eq!(scope.as_str().parse::<KeyScope>().unwrap(), scope);
        }
        assert!("write".parse::<KeyScope>().is_err());
        assert!("Read".parse::<KeyScope>().is_err());
    }

    #[test]
    fn admin_allows_everything_and_others_only_themselves() {
        assert!(KeyScope::ALL.iter().all(|s| KeyScopes::all().allow(*s)));
        let webhook = KeyScopes::of(&[KeyScope::SettleJobs]);
        assert!(webhook.allow(KeyScope::SettleJobs));
        assert!(!webhook.allow(KeyScope::RespondApprovals));
        assert!(!webhook.allow(KeyScope::Read));
        assert!(!KeyScopes::default().allow(KeyScope::Read));
    }

    #[test]
    fn each_kind_of_request_needs_its_scope() {
        assert_eq!(
            KeyScope::to_answer(ToolKind::Approval),
            Some(KeyScope::RespondApprovals)
        );
        assert_eq!(
            KeyScope::to_answer(ToolKind::Park),
            Some(KeyScope::SettleJobs)
        );
        assert_eq!(
            KeyScope::to_answer(ToolKind::Ask),
            Some(KeyScope::RespondQuestions)
        );
        assert_eq!(KeyScope::to_answer(ToolKind::Function), None);
    }

    proptest! {
        #[test]
        fn a_set_allows_exactly_its_members_or_all_with_admin(picks in prop::collection::vec(0usize..6, 0..6)) {
            let chosen: Vec<KeyScope> = picks.iter().map(|&i| KeyScope::ALL[i]).collect();
            let scopes = KeyScopes::of(&chosen);
            let admin = chosen.contains(&KeyScope::Admin);
            for scope in KeyScope::ALL {
                prop_assert_eq!(scopes.allow(scope), admin || chosen.contains(&scope));
            }
            prop_assert_eq!(KeyScopes::of(&scopes.list()), scopes);
        }
    }
}
