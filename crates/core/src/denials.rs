//! A run's memory of the calls a person denied, so that the model cannot
//! ask again for the very same call: a proposal with the same tool name and
//! canonically equal arguments is refused without asking (where the tool
//! allows it), with the first denial's reason.
//!
//! The memory is rebuilt on every segment from the replayed steps, in their
//! order, so a replay decides as the first run did.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::canonical::arguments_hash;

/// The denials of one run, keyed by tool name and `argumentsHash`.
#[derive(Debug, Default, Clone)]
pub struct DeniedCalls {
    denials: HashMap<(String, String), Denial>,
}

/// The first denial of a call: which row it was, and why.
#[derive(Debug, Clone)]
struct Denial {
    call_id: String,
    reason: String,
}

impl DeniedCalls {
    /// Remembers that a person denied call `call_id`, `name(arguments)`,
    /// for `reason`. The first denial stands: a later refusal repeats it.
    pub fn remember(&mut self, call_id: &str, name: &str, arguments: &Value, reason: &str) {
        self.denials
            .entry((name.to_owned(), arguments_hash(arguments)))
            .or_insert_with(|| Denial {
                call_id: call_id.to_owned(),
                reason: reason.to_owned(),
            });
    }

    /// The result the model reads instead of a new request when
    /// `name(arguments)` was denied before in this run; `None` otherwise.
    pub fn refusal(&self, name: &str, arguments: &Value) -> Option<Value> {
        // Hashing costs more than the rest of the check (about 48,000
        // instructions for a small call, by callgrind): only a tool with a
        // denial is worth it, and most runs have none.
        if !self.denials.keys().any(|(denied, _)| denied == name) {
            return None;
        }
        let denial = self
            .denials
            .get(&(name.to_owned(), arguments_hash(arguments)))?;
        Some(repeated_denial(&denial.call_id, &denial.reason))
    }
}

/// What the model reads when a call it proposed again was refused without
/// asking: the denial it got the first time (of call `denied_call_id`),
/// marked as a repeat.
pub fn repeated_denial(denied_call_id: &str, reason: &str) -> Value {
    json!({
        "denied": true,
        "reason": reason,
        "repeated": true,
        "deniedCallId": denied_call_id,
        "note": "the user already denied this exact call in this run; it was not asked again",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_same_call_is_refused_with_the_first_reason() {
        let mut denied = DeniedCalls::default();
        denied.remember("c1", "send", &json!({"to": "a", "amount": 5}), "too much");
        denied.remember("c2", "send", &json!({"to": "a", "amount": 5}), "still no");
        assert_eq!(
            denied.refusal("send", &json!({"amount": 5, "to": "a"})),
            Some(repeated_denial("c1", "too much"))
        );
    }

    #[test]
    fn other_arguments_or_another_tool_are_asked_again() {
        let mut denied = DeniedCalls::default();
        denied.remember("c1", "send", &json!({"to": "a", "amount": 5}), "no");
        assert_eq!(
            denied.refusal("send", &json!({"to": "a", "amount": 4})),
            None
        );
        assert_eq!(
            denied.refusal("pay", &json!({"to": "a", "amount": 5})),
            None
        );
        assert_eq!(denied.refusal("send", &json!({"to": "a"})), None);
    }

    #[test]
    fn numbers_equal_in_canonical_form_are_the_same_call() {
        let mut denied = DeniedCalls::default();
        denied.remember("c1", "send", &json!({"amount": 1.0}), "no");
        assert!(denied.refusal("send", &json!({"amount": 1})).is_some());
    }

    fn arguments() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i32>().prop_map(Value::from),
            "[a-z]{0,6}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn a_call_is_refused_exactly_when_it_equals_a_denied_one(
            first in arguments(),
            second in arguments(),
        ) {
            let mut denied = DeniedCalls::default();
            denied.remember("c1", "t", &first, "no");
            prop_assert!(denied.refusal("t", &first).is_some());
            prop_assert_eq!(denied.refusal("t", &second).is_some(), first == second);
        }
    }
}
