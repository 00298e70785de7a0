//! The wire form of queue messages (JSON bodies).

use serde::{Deserialize, Serialize};

use crate::ids::{RunId, ToolCallId};

/// A message on the segment queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum QueueMessage {
    /// "Advance run `run_id`". `seq` identifies the segment: a run accepts
    /// only the segment it last enqueued, so a duplicate delivery is dropped.
    #[serde(rename_all = "camelCase")]
    Segment { run_id: RunId, seq: i64 },
    /// "Expire this request if it is still open and due". Delivered through
    /// the delay ladder at the request's `expires_at`; an early delivery
    /// re-schedules itself, a late one after an answer is dropped.
    #[serde(rename_all = "camelCase")]
    Expiry {
        run_id: RunId,
        tool_call_id: ToolCallId,
    },
    /// "Send event `event_id` of run `run_id` to the deployment's
    /// notification targets". Written in the commit that wrote the event;
    /// a failed delivery re-schedules itself with backoff.
    #[serde(rename_all = "camelCase")]
    Notify { run_id: RunId, event_id: i64 },
    /// "Remind the tool's escalation target of this request if it is still
    /// open". Delivered through the delay ladder at the tool's
    /// `remind_after`; one after an answer is dropped.
    #[serde(rename_all = "camelCase")]
    Remind {
        run_id: RunId,
        tool_call_id: ToolCallId,
    },
    /// "Ask the tool whether the work this call waits for is done" (an MCP
    /// server's task). Delivered through the delay ladder; `attempt`
    /// counts the checks before this one, so that each wait is longer,
    /// and names the one message of the chain still due: a duplicate of
    /// an earlier check finds its outbox row gone and is dropped.
    #[serde(rename_all = "camelCase")]
    Poll {
        run_id: RunId,
        tool_call_id: ToolCallId,
        attempt: u32,
    },
}

impl QueueMessage {
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serializing a plain enum of ids and integers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// Whether it is for the notifications queue (a `Notify` or a
    /// `Remind`): sending to receivers outside, which may be slow, is kept
    /// off the segments' queue and its consumers' slots.
    pub fn is_notification(&self) -> bool {
        matches!(
            self,
            QueueMessage::Notify { .. } | QueueMessage::Remind { .. }
        )
    }

    pub fn run_id(&self) -> RunId {
        match self {
            QueueMessage::Segment { run_id, .. }
            | QueueMessage::Expiry { run_id, .. }
            | QueueMessage::Notify { run_id, .. }
            | QueueMessage::Remind { run_id, .. }
            | QueueMessage::Poll { run_id, .. } => *run_id,
        }
    }

    /// What names this message's outbox row: the handler that consumes the
    /// message deletes the row by it, in its own transaction. Copies of one
    /// message (a re-publish, a re-schedule) share it.
    pub fn outbox_key(&self) -> String {
        match self {
            QueueMessage::Segment { run_id, seq } => format!("segment:{run_id}:{seq}"),
            QueueMessage::Expiry {
                run_id,
                tool_call_id,
            } => format!("expiry:{run_id}:{tool_call_id}"),
            QueueMessage::Notify { run_id, event_id } => format!("notify:{run_id}:{event_id}"),
            QueueMessage::Remind {
                run_id,
                tool_call_id,
            } => format!("remind:{run_id}:{tool_call_id}"),
            // The attempt before the call id, which may hold colons.
            QueueMessage::Poll {
                run_id,
                tool_call_id,
                attempt,
            } => format!("poll:{run_id}:{attempt}:{tool_call_id}"),
        }
    }

    /// The message an outbox key names: the key holds all of it, so the
    /// row need not store the message again. Only a key [`outbox_key`]
    /// writes is read back (`None` otherwise).
    ///
    /// [`outbox_key`]: QueueMessage::outbox_key
    pub fn from_outbox_key(key: &str) -> Option<Self> {
        let (kind, rest) = key.split_once(':')?;
        // A run id is a hyphenated UUID: 36 characters, no colon.
        let (run, rest) = (rest.get(..36)?, rest.get(36..)?.strip_prefix(':')?);
        let run_id: RunId = run.parse().ok()?;
        let message = match kind {
            "segment" => QueueMessage::Segment {
                run_id,
                seq: rest.parse().ok()?,
            },
            "expiry" => QueueMessage::Expiry {
                run_id,
                tool_call_id: rest.into(),
            },
            "notify" => QueueMessage::Notify {
                run_id,
                event_id: rest.parse().ok()?,
            },
            "remind" => QueueMessage::Remind {
                run_id,
                tool_call_id: rest.into(),
            },
            "poll" => {
                let (attempt, call) = rest.split_once(':')?;
                QueueMessage::Poll {
                    run_id,
                    tool_call_id: call.into(),
                    attempt: attempt.parse().ok()?,
                }
            }
            _ => return None,
        };
        (message.outbox_key() == key).then_some(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A message comes back from its outbox key, whatever its call id.
        #[test]
        fn a_message_is_read_back_from_its_outbox_key(seq in any::<i64>(), call in ".{0,16}", run in any::<u128>()) {
            let run_id = RunId(uuid::Uuid::from_u128(run));
            for message in [
                QueueMessage::Segment { run_id, seq },
                QueueMessage::Expiry { run_id, tool_call_id: call.as_str().into() },
                QueueMessage::Notify { run_id, event_id: seq },
                QueueMessage::Remind { run_id, tool_call_id: call.as_str().into() },
                QueueMessage::Poll { run_id, tool_call_id: call.as_str().into(), attempt: seq as u32 },
            ] {
                prop_assert_eq!(QueueMessage::from_outbox_key(&message.outbox_key()), Some(message));
            }
        }

        /// Any other text names no message, and never panics.
        #[test]
        fn other_keys_name_no_message(key in ".{0,60}") {
            if let Some(message) = QueueMessage::from_outbox_key(&key) {
                prop_assert_eq!(message.outbox_key(), key);
            }
        }

        /// Whatever arrives on the queue, decoding answers and never panics;
        /// what decodes re-encodes to the same message.
        #[test]
        fn any_bytes_decode_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(message) = QueueMessage::from_bytes(&bytes) {
                prop_assert_eq!(QueueMessage::from_bytes(&message.to_bytes()).unwrap(), message);
            }
        }

        /// Near-misses of a valid body (a field changed, dropped or added)
        /// are decoded exactly or refused.
        #[test]
        fn mutated_messages_decode_or_are_refused(
            seq in any::<i64>(),
            call in ".{0,12}",
            field in prop_oneof![Just("type"), Just("runId"), Just("seq"), Just("toolCallId"), Just("eventId"), Just("extra")],
            value in prop_oneof![
                Just(serde_json::json!(null)),
                Just(serde_json::json!(7)),
                Just(serde_json::json!("segment")),
                Just(serde_json::json!("expiry")),
                Just(serde_json::json!("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")),
                Just(serde_json::json!([1, 2])),
            ],
        ) {
            let run: RunId = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b".parse().unwrap();
            for message in [
                QueueMessage::Segment { run_id: run, seq },
                QueueMessage::Expiry { run_id: run, tool_call_id: call.as_str().into() },
                QueueMessage::Notify { run_id: run, event_id: seq },
                QueueMessage::Remind { run_id: run, tool_call_id: call.as_str().into() },
                QueueMessage::Poll { run_id: run, tool_call_id: call.as_str().into(), attempt: 2 },
            ] {
                let mut body: serde_json::Value = serde_json::from_slice(&message.to_bytes()).unwrap();
                body[field] = value.clone();
                let bytes = serde_json::to_vec(&body).unwrap();
                if let Ok(decoded) = QueueMessage::from_bytes(&bytes) {
                    prop_assert_eq!(QueueMessage::from_bytes(&decoded.to_bytes()).unwrap(), decoded);
                }
            }
        }
    }

    #[test]
    fn near_miss_outbox_keys_name_no_message() {
        let run = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
        for key in [
            String::new(),
            "segment".into(),
            format!("segment:{run}"),
            format!("segment:{run}:"),
            format!("segment:{run}:x"),
            format!("segment:{run}:01"),
            format!("segment:{}:1", run.to_uppercase()),
            format!("segment:{}:1", run.replace('-', "")),
            format!("other:{run}:1"),
            format!("expiry:{run}"),
            format!("notify:{run}:"),
            format!("notify:{run}:1x"),
            format!("notify:{run}:+1"),
            format!("remind:{run}"),
            format!("poll:{run}:c1"),
            format!("poll:{run}:x:c1"),
            format!("poll:{run}:01:c1"),
        ] {
            assert_eq!(QueueMessage::from_outbox_key(&key), None, "{key}");
        }
        assert_eq!(
            QueueMessage::from_outbox_key(&format!("expiry:{run}:c:1")),
            Some(QueueMessage::Expiry {
                run_id: run.parse().unwrap(),
                tool_call_id: "c:1".into()
            })
        );
    }

    #[test]
    fn segment_wire_form() {
        let run: RunId = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b".parse().unwrap();
        let msg = QueueMessage::Segment {
            run_id: run,
            seq: 3,
        };
        let bytes = msg.to_bytes();
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"type":"segment","runId":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","seq":3}"#
        );
        assert_eq!(QueueMessage::from_bytes(&bytes).unwrap(), msg);
        assert!(QueueMessage::from_bytes(b"{\"type\":\"nope\"}").is_err());
        let expiry = QueueMessage::Expiry {
            run_id: run,
            tool_call_id: "c1".into(),
        };
        assert_eq!(
            std::str::from_utf8(&expiry.to_bytes()).unwrap(),
            r#"{"type":"expiry","runId":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","toolCallId":"c1"}"#
        );
        assert_eq!(expiry.run_id(), run);
        assert_eq!(
            msg.outbox_key(),
            "segment:0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:3"
        );
        assert_eq!(
            expiry.outbox_key(),
            "expiry:0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:c1"
        );
        let notify = QueueMessage::Notify {
            run_id: run,
            event_id: 42,
        };
        assert_eq!(
            std::str::from_utf8(&notify.to_bytes()).unwrap(),
            r#"{"type":"notify","runId":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","eventId":42}"#
        );
        assert_eq!(
            notify.outbox_key(),
            "notify:0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:42"
        );
        let remind = QueueMessage::Remind {
            run_id: run,
            tool_call_id: "c1".into(),
        };
        assert_eq!(
            std::str::from_utf8(&remind.to_bytes()).unwrap(),
            r#"{"type":"remind","runId":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","toolCallId":"c1"}"#
        );
        assert_eq!(
            QueueMessage::from_outbox_key(&remind.outbox_key()),
            Some(remind)
        );
        let poll = QueueMessage::Poll {
            run_id: run,
            tool_call_id: "c:1".into(),
            attempt: 3,
        };
        assert_eq!(
            std::str::from_utf8(&poll.to_bytes()).unwrap(),
            r#"{"type":"poll","runId":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","toolCallId":"c:1","attempt":3}"#
        );
        assert_eq!(
            poll.outbox_key(),
            "poll:0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:3:c:1"
        );
        assert!(!poll.is_notification());
    }
}
