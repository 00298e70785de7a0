//! How an event's `data` is stored: without the parts that other columns of
//! the same row, or the event's tool-call row, already hold. A parked
//! approval wrote its tool call's arguments four times (message, `TOOL_CALL`,
//! `INPUT_REQUIRED`, the call row) and the run id into every event beside
//! the `run_id` column; events were the largest table per parked thread.
//!
//! [`pack`] decides what to leave out and says so in a bit set stored beside
//! the data; [`unpack`] puts it back. Readers see exactly the data that was
//! written: the pair is lossless, which the property tests below check.

use serde_json::Value;

use crate::event::EventType;
use crate::ids::RunId;

/// `runId` equalled the row's `run_id` and was left out.
pub const PACKED_RUN_ID: i16 = 1;
/// `arguments` equalled the `arguments` of the tool-call row
/// `(run_id, toolCallId)` and was left out.
pub const PACKED_ARGUMENTS: i16 = 2;
/// `message` equalled the `body` of the messages row the event's
/// `message_id` names (inserted by the same statement) and was left out.
pub const PACKED_MESSAGE: i16 = 4;

const ALL: i16 = PACKED_RUN_ID | PACKED_ARGUMENTS | PACKED_MESSAGE;

/// What the rows an event refers to hold, for [`unpack`]: each is read only
/// when the event's `packed` says it left that part out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Referenced {
    /// The `arguments` of the tool-call row `(run_id, data.toolCallId)`.
    pub call_arguments: Option<Value>,
    /// The `body` of the messages row `message_id`.
    pub message_body: Option<Value>,
}

/// The event's data as stored, and which parts [`unpack`] must put back.
#[derive(Debug, Clone, PartialEq)]
pub struct Packed {
    pub data: Value,
    pub packed: i16,
}

/// What to store of an event of `event_type` written for `run`.
///
/// Arguments are left out only where the call row's arguments are final
/// when the event commits and never change after: `INPUT_REQUIRED` is
/// written in the park that sets them, and an approval's `TOOL_CALL`
/// in the commit that inserts the row (an approval parks with the arguments
/// it was proposed with). Other calls may park with other arguments (a
/// self-parking tool's payload, an ask's validated question set), so their
/// `TOOL_CALL` keeps its own copy.
pub fn pack(event_type: EventType, run: Option<RunId>, data: Value) -> Packed {
    // An event of no run, or whose data is not an object, is stored whole.
    let (run, mut object) = match (run, data) {
        (Some(run), Value::Object(object)) => (run, object),
        (_, data) => return Packed { data, packed: 0 },
    };
    let mut packed = 0;
    if object.get("runId") == Some(&run_value(run)) {
        object.remove("runId");
        packed |= PACKED_RUN_ID;
    }
    let arguments_are_the_rows = match event_type {
        EventType::InputRequired => true,
        EventType::ToolCall => object.get("kind").and_then(Value::as_str) == Some("approval"),
        _ => false,
    };
    if arguments_are_the_rows
        && object.get("toolCallId").is_some_and(Value::is_string)
        && object.remove("arguments").is_some()
    {
        packed |= PACKED_ARGUMENTS;
    }
    Packed {
        data: Value::Object(object),
        packed,
    }
}

/// A `MESSAGE` event written in the statement that inserts its message
/// (`body`): its `message` is that row's body and is left out.
pub fn pack_message(stored: Packed, body: &Value) -> Packed {
    let Packed { data, packed } = stored;
    match data {
        Value::Object(mut object) if object.get("message") == Some(body) => {
            object.remove("message");
            Packed {
                data: Value::Object(object),
                packed: packed | PACKED_MESSAGE,
            }
        }
        data => Packed { data, packed },
    }
}

/// The data of an event as it was written: `stored` with what [`pack`] and
/// [`pack_message`] left out put back from the rows it refers to.
///
/// A part that cannot be put back (a referenced row missing, a bit a newer
/// version set) is left out and named in `problems`, for the reader to
/// log: one such event must not make every later event of its thread
/// unreadable (a stream would end on it and resume into it for ever).
pub fn unpack(run: Option<RunId>, packed: i16, stored: Value, referenced: Referenced) -> Unpacked {
    let mut problems = Vec::new();
    if packed == 0 {
        return Unpacked {
            data: stored,
            problems,
        };
    }
    let Value::Object(mut object) = stored else {
        problems.push(UnpackError::NotAnObject);
        return Unpacked {
            data: stored,
            problems,
        };
    };
    if packed & !ALL != 0 {
        problems.push(UnpackError::UnknownBits(packed & !ALL));
    }
    if packed & PACKED_RUN_ID != 0 {
        match run {
            Some(run) => {
                object.insert("runId".to_owned(), run_value(run));
            }
            None => problems.push(UnpackError::NoRun),
        }
    }
    if packed & PACKED_ARGUMENTS != 0 {
        match referenced.call_arguments {
            Some(arguments) => {
                object.insert("arguments".to_owned(), arguments);
            }
            None => problems.push(UnpackError::NoCallRow),
        }
    }
    if packed & PACKED_MESSAGE != 0 {
        match referenced.message_body {
            Some(body) => {
                object.insert("message".to_owned(), body);
            }
            None => problems.push(UnpackError::NoMessageRow),
        }
    }
    Unpacked {
        data: Value::Object(object),
        problems,
    }
}

/// What [`unpack`] could put back, and what it could not.
#[derive(Debug, Clone, PartialEq)]
pub struct Unpacked {
    pub data: Value,
    pub problems: Vec<UnpackError>,
}

/// Why stored event data could not be put back together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnpackError {
    #[error("packed event data is not an object")]
    NotAnObject,
    #[error("packed event data has unknown bits {0:#x} (written by a newer version?)")]
    UnknownBits(i16),
    #[error("packed event data left out its run id but the event has no run")]
    NoRun,
    #[error("packed event data left out its arguments but its tool call row is missing")]
    NoCallRow,
    #[error("packed event data left out its message but its message row is missing")]
    NoMessageRow,
}

fn run_value(run: RunId) -> Value {
    Value::String(run.0.hyphenated().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Map};

    impl Unpacked {
        /// The data, when all of it was put back.
        fn whole(self) -> Result<Value, UnpackError> {
            match self.problems.into_iter().next() {
                None => Ok(self.data),
                Some(problem) => Err(problem),
            }
        }
    }

    /// The bits are stored in `events.packed` and tested by the events
    /// reader's SQL (`packed & 2`, `packed & 4`): never renumber them.
    #[test]
    fn the_stored_bits_keep_their_values() {
        assert_eq!((PACKED_RUN_ID, PACKED_ARGUMENTS, PACKED_MESSAGE), (1, 2, 4));
    }

    fn run() -> RunId {
        RunId(uuid::Uuid::from_u128(
            0x0191_2345_6789_7abc_8def_0123_4567_89ab,
        ))
    }

    #[test]
    fn an_input_required_keeps_neither_its_run_id_nor_its_arguments() {
        let data = json!({
            "toolCallId": "c1", "runId": run(), "toolName": "send_email",
            "arguments": {"to": "ops@example.com"}, "kind": "approval", "reason": "approval",
            "runName": "mailer", "depth": 0, "expiresAt": "2026-12-02T13:34:37.934023Z",
        });
        let stored = pack(EventType::InputRequired, Some(run()), data.clone());
        assert_eq!(stored.packed, PACKED_RUN_ID | PACKED_ARGUMENTS);
        assert!(stored.data.get("arguments").is_none() && stored.data.get("runId").is_none());
        let back = unpack(
            Some(run()),
            stored.packed,
            stored.data,
            arguments(json!({"to": "ops@example.com"})),
        );
        assert_eq!(back.whole(), Ok(data));
    }

    fn arguments(value: Value) -> Referenced {
        Referenced {
            call_arguments: Some(value),
            message_body: None,
        }
    }

    #[test]
    fn a_message_event_written_with_its_row_keeps_only_a_reference() {
        let body = json!({"role": "assistant", "content": "Done."});
        let data = json!({"runId": run(), "message": body});
        let stored = pack_message(pack(EventType::Message, Some(run()), data.clone()), &body);
        assert_eq!(
            stored,
            Packed {
                data: json!({}),
                packed: PACKED_RUN_ID | PACKED_MESSAGE
            }
        );
        let referenced = Referenced {
            call_arguments: None,
            message_body: Some(body),
        };
        assert_eq!(
            unpack(Some(run()), stored.packed, stored.data, referenced).whole(),
            Ok(data)
        );
        // another body than the row's is kept
        let kept = pack_message(
            pack(EventType::Message, Some(run()), json!({"message": 1})),
            &json!(2),
        );
        assert_eq!(kept.packed & PACKED_MESSAGE, 0);
    }

    #[test]
    fn a_tool_call_keeps_its_arguments_unless_it_is_an_approval() {
        for (kind, left_out) in [
            ("approval", true),
            ("function", false),
            ("ask", false),
            ("delegate", false),
        ] {
            let data =
                json!({"runId": run(), "toolCallId": "c1", "arguments": {"a": 1}, "kind": kind});
            let stored = pack(EventType::ToolCall, Some(run()), data);
            assert_eq!(stored.packed & PACKED_ARGUMENTS != 0, left_out, "{kind}");
            assert_eq!(stored.data.get("arguments").is_none(), left_out, "{kind}");
        }
    }

    #[test]
    fn a_run_id_other_than_the_rows_is_kept() {
        let other = json!({"runId": "01912345-0000-7000-8000-000000000000", "x": 1});
        let stored = pack(EventType::RunStarted, Some(run()), other.clone());
        assert_eq!(
            stored,
            Packed {
                data: other,
                packed: 0
            }
        );
    }

    #[test]
    fn an_event_of_no_run_or_not_an_object_is_stored_whole() {
        let data = json!({"runId": run(), "from": "a"});
        assert_eq!(pack(EventType::Message, None, data.clone()).data, data);
        assert_eq!(
            pack(EventType::Message, Some(run()), json!([1])).data,
            json!([1])
        );
    }

    #[test]
    fn what_cannot_be_put_back_is_named_and_the_rest_served() {
        let none = Referenced::default;
        let problems = |packed, data| unpack(Some(run()), packed, data, none()).problems;
        assert_eq!(
            unpack(None, PACKED_RUN_ID, json!({}), none()).problems,
            [UnpackError::NoRun]
        );
        assert_eq!(
            problems(PACKED_ARGUMENTS, json!({"toolCallId": "c1"})),
            [UnpackError::NoCallRow]
        );
        assert_eq!(
            problems(PACKED_MESSAGE, json!({})),
            [UnpackError::NoMessageRow]
        );
        assert_eq!(
            problems(PACKED_RUN_ID, json!("x")),
            [UnpackError::NotAnObject]
        );
        // A bit of a newer version: what is known is still put back.
        let newer = unpack(Some(run()), PACKED_RUN_ID | 8, json!({"a": 1}), none());
        assert_eq!(newer.problems, [UnpackError::UnknownBits(8)]);
        assert_eq!(newer.data, json!({"a": 1, "runId": run()}));
        // Data stored whole comes back as it is, whatever it is.
        assert_eq!(unpack(None, 0, json!("x"), none()).whole(), Ok(json!("x")));
    }

    fn json_leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "[a-z0-9 ]{0,12}".prop_map(Value::String),
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        json_leaf().prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-zA-Z]{1,8}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    /// Event data as the runtime writes it: an object that may carry the
    /// run's id (or another), a call id, arguments and a kind.
    fn event_data() -> impl Strategy<Value = Value> {
        (
            prop::collection::btree_map("[a-zA-Z]{1,8}", json_value(), 0..4),
            prop_oneof![
                Just(None),
                Just(Some(json!(run()))),
                Just(Some(json!("other")))
            ],
            prop_oneof![Just(None), Just(Some(json!("c1"))), Just(Some(json!(7)))],
            prop::option::of(json_value()),
            prop_oneof![Just(None), Just(Some("approval")), Just(Some("function"))],
            prop::option::of(json_value()),
        )
            .prop_map(|(rest, run_id, call, arguments, kind, message)| {
                let mut object: Map<String, Value> = rest.into_iter().collect();
                for (key, value) in [
                    ("runId", run_id),
                    ("toolCallId", call),
                    ("arguments", arguments),
                    ("kind", kind.map(|k| json!(k))),
                    ("message", message),
                ] {
                    if let Some(value) = value {
                        object.insert(key.to_owned(), value);
                    }
                }
                Value::Object(object)
            })
    }

    proptest! {
        /// Whatever is written reads back the same, given the call row's
        /// arguments (the value the event carried: see [`pack`]).
        #[test]
        fn unpack_gives_back_what_pack_was_given(
            data in prop_oneof![event_data(), json_value()],
            event_type in prop::sample::select(EventType::ALL.to_vec()),
            has_run in any::<bool>(),
            with_message_row in any::<bool>(),
        ) {
            let run = has_run.then(run);
            let referenced = Referenced {
                call_arguments: data.get("arguments").cloned(),
                message_body: data.get("message").cloned(),
            };
            let mut stored = pack(event_type, run, data.clone());
            if let (Some(body), true) = (&referenced.message_body, with_message_row) {
                stored = pack_message(stored, body);
            }
            prop_assert_eq!(unpack(run, stored.packed, stored.data, referenced).whole(), Ok(data));
        }

        /// Packing never adds: the stored data is the written object less
        /// some of its keys.
        #[test]
        fn pack_only_leaves_keys_out(
            data in event_data(),
            event_type in prop::sample::select(EventType::ALL.to_vec()),
        ) {
            let stored = pack(event_type, Some(run()), data.clone());
            let (Value::Object(written), Value::Object(kept)) = (&data, &stored.data) else {
                panic!("objects in, objects out");
            };
            for (key, value) in kept {
                prop_assert_eq!(written.get(key), Some(value));
            }
        }
    }
}
