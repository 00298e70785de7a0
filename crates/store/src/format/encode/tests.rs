//! Unit tests of the commit encoder, by part.

/// `StoredJournal`.
mod journal {
    use super::super::*;
    use serde_json::json;

    fn entry(position: u32, name: &str) -> Change {
        Change::Journal {
            position,
            name: name.into(),
            value: json!({"at": position}),
        }
    }

    #[test]
    fn a_commits_entries_are_one_insert_written_once() {
        let changes = [entry(0, "tool:a"), entry(1, "tool:b"), entry(2, "tool:c")];
        let mut journal = StoredJournal::of(&changes).expect("three positions");
        let run = RunId(uuid::Uuid::nil());
        let op = journal.insert_op(run).expect("the insert");
        assert_eq!(op.params.len(), 5, "run, then one array per column");
        assert!(journal.insert_op(run).is_none(), "written once");
        let mut none = StoredJournal::of(&[]).expect("no entries");
        assert!(none.insert_op(run).is_none());
    }

    #[test]
    fn a_position_written_twice_in_one_commit_is_refused() {
        let changes = [entry(3, "tool:a"), entry(3, "tool:b")];
        match StoredJournal::of(&changes) {
            Err(Error::Corrupt(message)) => assert!(message.contains("[3, 3]"), "{message}"),
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        }
    }
}

/// `known_rows`.
mod known_rows {
    use super::super::*;
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

/// `MessageWithEvent`.
mod message_with_event {
    use super::super::*;
    use agentenkit_core::conversation::Message;
    use agentenkit_core::{ThreadId, ToolCallId};
    use serde_json::json;

    fn message(text: &str) -> Message {
        Message::User {
            content: text.into(),
        }
    }

    fn event(m: &Message) -> Change {
        Change::Event {
            event_type: EventType::Message,
            data: json!({ "runId": RunId::new(), "message": m }),
        }
    }

    #[test]
    fn the_last_message_and_its_event_are_one_statement() {
        let (first, last) = (message("a"), message("b"));
        let changes = [
            Change::Message(first.clone()),
            event(&last),
            Change::Message(last.clone()),
            Change::WaitRun,
        ];
        let folded = MessageWithEvent::find(&changes).unwrap();
        assert!(folded.folds(&changes[2]) && !folded.folds(&changes[0]));
        let journal = StoredJournal::of(&changes).unwrap();
        let item = folded
            .event_item(RunId::new(), &changes[1], &journal)
            .expect("the pair");
        let op = crate::event_insert::item_op(ThreadId::new(), None, item);
        assert!(op.sql().contains("INSERT INTO messages"), "{}", op.sql());
        assert!(folded
            .event_item(RunId::new(), &changes[0], &journal)
            .is_none());
    }

    #[test]
    fn a_message_followed_by_another_or_beside_a_child_run_stays_apart() {
        let (first, last) = (message("a"), message("b"));
        // the event's message is not the commit's last
        let changes = [
            event(&first),
            Change::Message(first.clone()),
            Change::Message(last),
        ];
        let folded = MessageWithEvent::find(&changes).unwrap();
        assert!(!folded.folds(&changes[1]) && !folded.folds(&changes[2]));
        // a child run starts in the same commit
        let changes = [
            event(&first),
            Change::Message(first.clone()),
            Change::StartChild {
                call_id: ToolCallId("c1".into()),
                child_run_id: RunId::new(),
                name: "helper".into(),
                version: None,
                task: "t".into(),
                trace: None,
            },
        ];
        assert!(!MessageWithEvent::find(&changes).unwrap().folds(&changes[1]));
        // no MESSAGE event for it
        let changes = [Change::Message(first)];
        assert!(!MessageWithEvent::find(&changes).unwrap().folds(&changes[0]));
    }
}
