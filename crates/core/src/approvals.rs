//! Approvals that need more than one person: how many, from which groups,
//! and what one more approval comes to.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// How many distinct people must approve a call, and the groups they must
/// belong to (any key's owner when `from` is empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRule {
    pub required: u32,
    #[serde(default)]
    pub from: Vec<String>,
}

impl Default for ApprovalRule {
    fn default() -> Self {
        ApprovalRule {
            required: 1,
            from: Vec::new(),
        }
    }
}

impl ApprovalRule {
    /// One approval from anyone: the usual approval, settled by its first
    /// answer.
    pub fn is_single(&self) -> bool {
        self.required <= 1 && self.from.is_empty()
    }
}

/// Who a key made with `agentenkit keys` speaks for when it answers: the
/// key, the person holding it (several keys of one person share a
/// holder), and the holder's approver groups. A key of
/// `AGENTENKIT_API_KEYS` has none of these: its owner answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Approver {
    pub key_id: Option<String>,
    pub holder: Option<String>,
    pub groups: Vec<String>,
}

impl Approver {
    /// Whose approval an answer of `owner`'s with this key is: its
    /// holder's (`holder:<name>`), so two keys of one person count once;
    /// else the key's; else the owner's.
    pub fn principal(&self, owner: &str) -> String {
        match (&self.holder, &self.key_id) {
            (Some(holder), _) => format!("holder:{holder}"),
            (None, Some(key_id)) => key_id.clone(),
            (None, None) => owner.to_owned(),
        }
    }
}

/// One person's approval of a call that needs several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Vote {
    /// Who: the key's holder (`holder:<name>`), the key's id for a key
    /// without one, or the owner of an `AGENTENKIT_API_KEYS` key.
    pub principal: String,
    /// The key that gave it: revoking the key drops the vote while the
    /// call still waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    pub answered_by: String,
    pub answered_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What one more approval comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cast {
    /// Counted; more are needed.
    Counted { given: u32, required: u32 },
    /// Counted, and it was the last one needed: the call is approved.
    Complete,
    /// This principal approved it already.
    AlreadyGiven,
    /// The principal is in none of the rule's groups.
    NotAnApprover,
}

/// The approval of `principal` (in `groups`) of a call with `rule` that
/// has `votes` so far.
pub fn cast(rule: &ApprovalRule, votes: &[Vote], principal: &str, groups: &[String]) -> Cast {
    if !rule.from.is_empty() && !groups.iter().any(|g| rule.from.contains(g)) {
        return Cast::NotAnApprover;
    }
    // Enough already (a deploy lowered `required`): any approver's answer
    // settles it.
    if votes.len() as u32 >= rule.required.max(1) {
        return Cast::Complete;
    }
    if votes.iter().any(|v| v.principal == principal) {
        return Cast::AlreadyGiven;
    }
    let given = votes.len() as u32 + 1;
    if given >= rule.required.max(1) {
        Cast::Complete
    } else {
        Cast::Counted {
            given,
            required: rule.required,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn vote(principal: &str) -> Vote {
        Vote {
            principal: principal.into(),
            key_id: None,
            answered_by: "acme".into(),
            answered_at: Utc::now(),
            message: None,
        }
    }

    fn rule(required: u32, from: &[&str]) -> ApprovalRule {
        ApprovalRule {
            required,
            from: from.iter().map(|g| g.to_string()).collect(),
        }
    }

    #[test]
    fn keys_of_one_holder_are_one_principal() {
        let key = |id: &str, holder: Option<&str>| Approver {
            key_id: Some(id.into()),
            holder: holder.map(str::to_owned),
            groups: vec!["ops".into()],
        };
        let (a, b) = (key("k1", Some("ann")), key("k2", Some("ann")));
        assert_eq!(a.principal("acme"), b.principal("acme"));
        assert_eq!(a.principal("acme"), "holder:ann");
        assert_eq!(key("k3", None).principal("acme"), "k3");
        assert_eq!(Approver::default().principal("acme"), "acme");
        let two = rule(2, &["ops"]);
        let first = vote(&a.principal("acme"));
        assert_eq!(
            cast(&two, &[first], &b.principal("acme"), &b.groups),
            Cast::AlreadyGiven
        );
    }

    #[test]
    fn two_of_ops_or_security() {
        let two = rule(2, &["ops", "security"]);
        let ops = ["ops".to_string()];
        assert_eq!(
            cast(&two, &[], "k1", &ops),
            Cast::Counted {
                given: 1,
                required: 2
            }
        );
        assert_eq!(cast(&two, &[vote("k1")], "k1", &ops), Cast::AlreadyGiven);
        assert_eq!(
            cast(&two, &[vote("k1")], "k2", &["security".into()]),
            Cast::Complete
        );
        assert_eq!(
            cast(&two, &[], "k3", &["sales".into()]),
            Cast::NotAnApprover
        );
        assert_eq!(cast(&two, &[], "k3", &[]), Cast::NotAnApprover);
    }

    #[test]
    fn a_rule_lowered_below_the_approvals_given_is_complete_at_the_next_answer() {
        let one = rule(1, &["ops"]);
        let ops = ["ops".to_string()];
        assert_eq!(
            cast(&one, &[vote("k1"), vote("k2")], "k1", &ops),
            Cast::Complete
        );
        assert_eq!(
            cast(&one, &[vote("k1")], "k3", &["sales".into()]),
            Cast::NotAnApprover
        );
    }

    #[test]
    fn a_rule_without_groups_takes_anyone_and_one_is_the_usual_approval() {
        assert!(ApprovalRule::default().is_single());
        assert!(!rule(1, &["ops"]).is_single());
        assert_eq!(
            cast(&rule(2, &[]), &[], "k", &[]),
            Cast::Counted {
                given: 1,
                required: 2
            }
        );
        assert_eq!(
            cast(&rule(1, &["ops"]), &[], "k", &["ops".into()]),
            Cast::Complete
        );
    }

    proptest! {
        #[test]
        fn exactly_the_required_number_of_distinct_principals_completes(required in 1u32..6, extra in 0usize..4) {
            let all = rule(required, &[]);
            let mut votes = Vec::new();
            let mut completed_at = None;
            for n in 0..(required as usize + extra) {
                let principal = format!("k{n}");
                match cast(&all, &votes, &principal, &[]) {
                    Cast::Complete => { completed_at.get_or_insert(n + 1); break; }
                    Cast::Counted { given, .. } => { prop_assert_eq!(given as usize, n + 1); votes.push(vote(&principal)); }
                    other => prop_assert!(false, "{:?}", other),
                }
                // The same principal again never counts.
                prop_assert_eq!(cast(&all, &votes, &principal, &[]), Cast::AlreadyGiven);
            }
            prop_assert_eq!(completed_at, Some(required as usize));
        }
    }
}
