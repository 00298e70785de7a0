//! A message and its `MESSAGE` event written by one statement, the event
//! keeping only a reference to the message row: see [`MessageWithEvent`].

use agentenkit_core::{EventType, RunId};
use serde_json::Value;

use super::event_item::{message_event_item, EventItem};
use crate::change::Change;
use crate::format::journal_insert::StoredJournal;
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
    /// The pair to fold in `changes`, if any.
    pub(crate) fn find(changes: &'a [Change]) -> Result<Self> {
        let none = MessageWithEvent { pair: None };
        let child_run = changes.iter().any(|c| {
            matches!(
                c,
                Change::StartChild { .. } | Change::FinishDelegation { .. }
            )
        });
        let has_message_event = changes.iter().any(|c| {
            matches!(
                c,
                Change::Event {
                    event_type: EventType::Message,
                    ..
                }
            )
        });
        let last_message = changes.iter().rev().find_map(|c| match c {
            Change::Message(m) => Some((c, m)),
            _ => None,
        });
        let (false, true, Some((message, m))) = (child_run, has_message_event, last_message) else {
            return Ok(none);
        };
        // Serialized only when a MESSAGE event may carry it (not for the
        // tool results most commits write).
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

    /// The event of the pair, carrying its message.
    pub(crate) fn event_item(
        &self,
        run: RunId,
        change: &Change,
        journal: &StoredJournal,
    ) -> Option<EventItem> {
        match (&self.pair, change) {
            (Some((event, _, body)), Change::Event { data, .. })
                if std::ptr::eq(*event, change) =>
            {
                Some(message_event_item(run, data.clone(), body, journal))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
