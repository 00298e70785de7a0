//! What a commit's event may leave to the rows the same commit writes: a
//! call's name from its proposal, and a parked call's kind, reason and
//! expiry from its park (see `format::event::RowFields`).

use crate::format::event::{self as stored_event, RowFields};
use serde_json::{Map, Value};

use crate::change::Change;
use agentenkit_core::CallEvent;

/// What the rows of an event of a run named `run_name` at `depth` hold: the
/// run row's name and depth, and the call-row fields of the call `data` names (`toolCallId`)
/// that `changes` write. A call proposed in an earlier commit has no known
/// name here, so nothing of it is left out (its row is not re-read to
/// check).
pub(crate) fn known_rows(
    run_name: &str,
    depth: i32,
    changes: &[Change],
    data: &Value,
) -> RowFields {
    let run = stored_event::run_row(run_name, depth, None);
    let Some(call_id) = data.get("toolCallId").and_then(Value::as_str) else {
        return RowFields {
            run,
            ..RowFields::default()
        };
    };
    let proposed = changes.iter().find_map(|c| match c {
        Change::ProposeToolCall { id, name, kind, .. } if id.as_str() == call_id => {
            Some((name, kind))
        }
        _ => None,
    });
    let parked = changes.iter().find_map(|c| match c {
        Change::Call {
            id,
            event:
                CallEvent::Park {
                    kind,
                    reason,
                    expires_at,
                    ..
                },
        } if id.as_str() == call_id => Some((kind, reason, expires_at)),
        _ => None,
    });
    let call: Map<String, Value> = match (proposed, parked) {
        (Some((name, _)), Some((kind, reason, expires_at))) => {
            stored_event::call_row(name, kind.as_str(), Some(reason), *expires_at)
        }
        // The kind a call is proposed with may change when it parks; no
        // event leaves that kind out (`call_fields_of`).
        (Some((name, kind)), None) => stored_event::call_row(name, kind.as_str(), None, None),
        (None, _) => Map::new(),
    };
    RowFields { call, run }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_changes::{park, propose};
    use serde_json::json;

    /// `known_rows` of a run named `mailer` at depth 2.
    fn known(changes: &[Change], data: &Value) -> RowFields {
        known_rows("mailer", 2, changes, data)
    }

    #[test]
    fn a_call_proposed_and_parked_in_the_commit_is_known_whole() {
        let rows = known(&[propose("c1"), park("c1")], &json!({"toolCallId": "c1"}));
        assert_eq!(
            Value::Object(rows.call),
            json!({"toolName": "send_email", "kind": "approval", "reason": "approval",
                   "expiresAt": "2026-12-02T13:34:37.934023Z"})
        );
    }

    #[test]
    fn the_run_row_is_the_runs_whatever_the_event_names() {
        for data in [json!({"toolCallId": "c1"}), json!({})] {
            let rows = known(&[propose("c1")], &data);
            assert_eq!(
                Value::Object(rows.run),
                json!({"runName": "mailer", "depth": 2})
            );
        }
    }

    #[test]
    fn a_call_proposed_elsewhere_or_another_call_is_not_known() {
        let data = json!({"toolCallId": "c1"});
        assert!(known(&[park("c1")], &data).call.is_empty());
        assert!(known(&[propose("c2"), park("c2")], &data).call.is_empty());
        assert!(known(&[propose("c1")], &json!({})).call.is_empty());
        // proposed only: its name (its kind may still change)
        let proposed = known(&[propose("c1")], &data).call;
        assert_eq!(proposed.get("toolName"), Some(&json!("send_email")));
        assert!(proposed.get("reason").is_none());
    }
}
