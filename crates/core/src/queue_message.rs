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
}

impl QueueMessage {
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serializing a plain enum of ids and integers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    pub fn run_id(&self) -> RunId {
        match self {
            QueueMessage::Segment { run_id, .. } | QueueMessage::Expiry { run_id, .. } => *run_id,
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
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
            field in prop_oneof![Just("type"), Just("runId"), Just("seq"), Just("toolCallId"), Just("extra")],
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
    }
}
