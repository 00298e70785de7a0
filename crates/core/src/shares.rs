//! Fair shares of a shared fleet (docs/budgets.md, "Fair shares"): how many
//! runs of one owner, and of one agent per fair key, may be running at
//! once. A run past either cap is held back (in the store, holding no
//! worker and no broker message) until a run of its own owner stops
//! running, so a burst from one owner puts at most its cap of segments in
//! the queue ahead of anybody else's.
//!
//! What counts as running: a run queued with its segment in flight or
//! held by a worker. A run waiting for a person, or for its sub-agents,
//! holds no slot: a thread can wait a week without keeping its owner's
//! other runs back, and a parent's children can run under the same cap.

use std::collections::BTreeMap;
use std::fmt;

/// The caps a deployment sets: `max_concurrent_runs_per_owner` at the top
/// of the agent file, and each agent's `max_concurrent_runs` (per value of
/// its `fair_key`, the owner when it names none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunLimits {
    pub per_owner: Option<u32>,
    pub agents: BTreeMap<String, AgentShare>,
}

/// One agent's share.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentShare {
    pub max_concurrent_runs: Option<u32>,
    /// The thread metadata key whose values are served fairly (within one
    /// owner); the owner alone when `None`.
    pub fair_key: Option<FairKey>,
}

/// The caps one run is started under; what the store keys its slots by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// How many runs of its owner may run at once.
    pub owner_cap: Option<u32>,
    /// How many runs of its agent (per owner and fair key value) may.
    pub agent_cap: Option<u32>,
    /// The thread metadata key the agent's cap is kept per value of.
    pub fair_key: Option<FairKey>,
}

impl RunLimits {
    /// Whether any cap is set (a deployment with none pays nothing for
    /// shares: its runs start as they always did).
    pub fn is_empty(&self) -> bool {
        self.per_owner.is_none()
            && self
                .agents
                .values()
                .all(|share| share.max_concurrent_runs.is_none())
    }

    /// The slot a run of `agent` takes, `None` when no cap applies to it.
    pub fn slot_of(&self, agent: &str) -> Option<Slot> {
        let share = self.agents.get(agent);
        let agent_cap = share.and_then(|s| s.max_concurrent_runs);
        if self.per_owner.is_none() && agent_cap.is_none() {
            return None;
        }
        Some(Slot {
            owner_cap: self.per_owner,
            agent_cap,
            fair_key: agent_cap.and(share.and_then(|s| s.fair_key.clone())),
        })
    }
}

/// `fair_key = "metadata.KEY"`: a key of the thread's metadata.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FairKey(String);

impl FairKey {
    /// The metadata key it names.
    pub fn metadata_key(&self) -> &str {
        &self.0
    }
}

/// Why a `fair_key` was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidFairKey(pub String);

impl fmt::Display for InvalidFairKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fair_key {:?} must be \"metadata.KEY\", naming a key of the thread's metadata",
            self.0
        )
    }
}

impl std::error::Error for InvalidFairKey {}

impl std::str::FromStr for FairKey {
    type Err = InvalidFairKey;

    fn from_str(text: &str) -> Result<FairKey, InvalidFairKey> {
        match text.strip_prefix("metadata.") {
            Some(key) if !key.is_empty() && key.trim() == key => Ok(FairKey(key.to_owned())),
            _ => Err(InvalidFairKey(text.to_owned())),
        }
    }
}

impl fmt::Display for FairKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "metadata.{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn share(max: Option<u32>, key: Option<&str>) -> AgentShare {
        AgentShare {
            max_concurrent_runs: max,
            fair_key: key.map(|k| k.parse().expect("fair key")),
        }
    }

    #[test]
    fn no_cap_no_slot() {
        let limits = RunLimits::default();
        assert!(limits.is_empty());
        assert_eq!(limits.slot_of("a"), None);
        // A fair key alone caps nothing.
        let limits = RunLimits {
            per_owner: None,
            agents: [("a".to_owned(), share(None, Some("metadata.user")))].into(),
        };
        assert!(limits.is_empty());
        assert_eq!(limits.slot_of("a"), None);
    }

    #[test]
    fn the_owner_cap_applies_to_every_agent() {
        let limits = RunLimits {
            per_owner: Some(4),
            agents: [("a".to_owned(), share(Some(2), Some("metadata.user")))].into(),
        };
        assert!(!limits.is_empty());
        assert_eq!(
            limits.slot_of("b"),
            Some(Slot {
                owner_cap: Some(4),
                agent_cap: None,
                fair_key: None
            })
        );
        assert_eq!(
            limits.slot_of("a"),
            Some(Slot {
                owner_cap: Some(4),
                agent_cap: Some(2),
                fair_key: Some("metadata.user".parse().unwrap())
            })
        );
    }

    #[test]
    fn an_agent_cap_alone() {
        let limits = RunLimits {
            per_owner: None,
            agents: [("a".to_owned(), share(Some(3), None))].into(),
        };
        assert_eq!(
            limits.slot_of("a"),
            Some(Slot {
                owner_cap: None,
                agent_cap: Some(3),
                fair_key: None
            })
        );
        assert_eq!(limits.slot_of("other"), None);
    }

    #[test]
    fn fair_keys_name_a_metadata_key() {
        let key: FairKey = "metadata.tenant".parse().unwrap();
        assert_eq!(key.metadata_key(), "tenant");
        assert_eq!(key.to_string(), "metadata.tenant");
        for bad in ["tenant", "metadata.", "metadata. x", "Metadata.x", ""] {
            let err = bad.parse::<FairKey>().unwrap_err();
            assert!(err.to_string().contains("metadata.KEY"), "{err}");
        }
    }

    proptest! {
        #[test]
        fn a_fair_key_reads_back_as_written(key in "[a-zA-Z0-9_.-]{1,24}") {
            let written = format!("metadata.{key}");
            let parsed: FairKey = written.parse().unwrap();
            prop_assert_eq!(parsed.metadata_key(), key.as_str());
            prop_assert_eq!(parsed.to_string(), written);
        }

        #[test]
        fn a_slot_exactly_when_a_cap_applies(
            owner in proptest::option::of(1u32..100),
            agent in proptest::option::of(1u32..100),
        ) {
            let limits = RunLimits {
                per_owner: owner,
                agents: [("a".to_owned(), share(agent, Some("metadata.k")))].into(),
            };
            let slot = limits.slot_of("a");
            prop_assert_eq!(slot.is_some(), owner.is_some() || agent.is_some());
            prop_assert_eq!(limits.is_empty(), slot.is_none());
            if let Some(slot) = slot {
                prop_assert_eq!(slot.owner_cap, owner);
                prop_assert_eq!(slot.agent_cap, agent);
                prop_assert_eq!(slot.fair_key.is_some(), agent.is_some());
            }
        }
    }
}
