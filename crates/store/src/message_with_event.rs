//! A message and its `MESSAGE` event written by one statement, the event
//! keeping only a reference to the message row: see [`MessageWithEvent`].

use agentenkit_core::stored_event;
use agentenkit_core::{EventType, RunId, ThreadId};
use serde_json::Value;

use crate::commit::Change;
use crate::pipeline::Op;
use crate::Result;

/// A `MESSAGE` event repeated its message whole beside the messages row
/// inserted in the same commit (the largest event of a parked thread after
/// its arguments). When the message is the commit's last, the two are one
/// statement, placed where the event goes (after every row lock: see
/// `INSERT_EVENT_SQL`): it takes the thread's event lock, inserts the
/// message, and inserts the event naming it by `message_id`. Moving the
/// message there keeps the thread's messages in order only because no
/// other message of the commit comes after it; a commit that starts or
/// ends a child run (whose messages are written apart) is left as it is.
pub(crate) struct MessageWithEvent<'a> {
    /// `(event, message, body)` of the folded pair.
    pair: Option<(&'a Change, &'a Change, Value)>,
}

impl<'a> MessageWithEvent<'a> {
    /// Nothing folded: every message and event apart.
    pub(crate) fn none() -> Self {
        MessageWithEvent { pair: None }
    }

    pub(crate) fn find(changes: &'a [Change]) -> Result<Self> {
        let none = Self::none();
        if changes.iter().any(|c| {
            matches!(
                c,
                Change::StartChild { .. } | Change::FinishDelegation { .. }
            )
        }) {
            return Ok(none);
        }
        let Some(message) = changes
            .iter()
            .rev()
            .find(|c| matches!(c, Change::Message(_)))
        else {
            return Ok(none);
        };
        let Change::Message(m) = message else {
            return Ok(none);
        };
        let body = serde_json::to_value(m)?;
        let event = changes.iter().find(|c| match c {
            Change::Event {
                event_type: EventType::Message,
                data,
            } => data.get("message") == Some(&body),
            _ => false,
        });
        Ok(MessageWithEvent {
            pair: event.map(|event| (event, message, body)),
        })
    }

    /// The message of the pair: written by its event's statement.
    pub(crate) fn folds(&self, change: &Change) -> bool {
        self.pair
            .as_ref()
            .is_some_and(|(_, message, _)| std::ptr::eq(*message, change))
    }

    /// The one statement of the pair, for its event.
    pub(crate) fn event_op(&self, thread: ThreadId, run: RunId, change: &Change) -> Option<Op> {
        let (event, _, body) = self.pair.as_ref()?;
        if !std::ptr::eq(*event, change) {
            return None;
        }
        let Change::Event { event_type, data } = change else {
            return None;
        };
        let stored = stored_event::pack_message(
            stored_event::pack(*event_type, Some(run), data.clone()),
            body,
        );
        Some(Op::new(
            "WITH ordered AS (
                 SELECT pg_advisory_xact_lock(1702260340, hashtext($1::uuid::text))),
             message AS (
                 INSERT INTO messages (thread_id, run_id, body)
                 SELECT $1::uuid, $2::uuid, $6::jsonb FROM ordered RETURNING id)
             INSERT INTO events (thread_id, run_id, type, data, packed, message_id)
             SELECT $1::uuid, $2::uuid, $3::text, $4::jsonb, $5::smallint, message.id FROM message",
            vec![
                Box::new(thread.0),
                Box::new(run.0),
                Box::new(event_type.as_str()),
                Box::new(stored.data),
                Box::new(stored.packed),
                Box::new(body.clone()),
            ],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentenkit_core::conversation::Message;
    use agentenkit_core::ToolCallId;
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
        let op = folded
            .event_op(ThreadId::new(), RunId::new(), &changes[1])
            .expect("the pair");
        assert!(op.sql().contains("INSERT INTO messages"), "{}", op.sql());
        assert!(folded
            .event_op(ThreadId::new(), RunId::new(), &changes[0])
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
                task: "t".into(),
            },
        ];
        assert!(!MessageWithEvent::find(&changes).unwrap().folds(&changes[1]));
        // no MESSAGE event for it
        let changes = [Change::Message(first)];
        assert!(!MessageWithEvent::find(&changes).unwrap().folds(&changes[0]));
    }
}
