//! How an event's `data` is stored: without the parts that other columns of
//! the same row, or the event's tool-call row, already hold. A parked
//! approval wrote its tool call's arguments four times (message, `TOOL_CALL`,
//! `INPUT_REQUIRED`, the call row) and the run id into every event beside
//! the `run_id` column; events were the largest table per parked thread.
//!
//! Fields that repeat the event's call row (a parked call's tool name,
//! kind, reason and expiry) or run row (the run's name and depth) are left
//! out when the writer knows the row holds the same, for good.
//!
//! [`pack`] decides what to leave out and says so in a bit set stored beside
//! the data; [`unpack`] puts it back. Readers see exactly the data that was
//! written: the pair is lossless, which the property tests below check.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

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

/// The fields [`call_fields_of`] its type (spelled as in the data) equalled
/// those of the tool-call row `(run_id, toolCallId)` and were left out.
pub const PACKED_CALL_FIELDS: i16 = 8;
/// The fields [`run_fields_of`] its type equalled those of the run row
/// `run_id` and were left out.
pub const PACKED_RUN_FIELDS: i16 = 16;

const ALL: i16 =
    PACKED_RUN_ID | PACKED_ARGUMENTS | PACKED_MESSAGE | PACKED_CALL_FIELDS | PACKED_RUN_FIELDS;

/// The call-row fields an event of `event_type` may leave out. Only
/// fields whose row value is final when the event commits: a call's name
/// never changes, and `INPUT_REQUIRED` is written in the park that sets its
/// kind, reason and expiry (a call parks once). A `TOOL_CALL`'s kind is
/// not among them: a self-parking tool's row changes kind when it parks.
pub fn call_fields_of(event_type: EventType) -> &'static [&'static str] {
    match event_type {
        EventType::InputRequired => &["toolName", "kind", "reason", "expiresAt"],
        EventType::ToolCall => &["toolName"],
        _ => &[],
    }
}

/// The run-row fields an event of `event_type` may leave out (a run's name
/// and depth never change).
pub fn run_fields_of(event_type: EventType) -> &'static [&'static str] {
    match event_type {
        EventType::RunStarted => &["runName", "depth"],
        _ => &[],
    }
}

/// What the rows an event refers to hold, keyed as event data spells it:
/// for [`pack`], what the writer knows they hold once its commit is in (an
/// empty map: nothing known); for [`unpack`], what the reader read.
/// [`call_row`] and [`run_row`] build them the same way for both.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowFields {
    pub call: Map<String, Value>,
    pub run: Map<String, Value>,
}

/// A call row's fields as event data spells them (`expiresAt` as chrono
/// serializes it, which is how the runtime wrote it).
pub fn call_row(
    name: &str,
    kind: &str,
    reason: Option<&str>,
    expires_at: Option<DateTime<Utc>>,
) -> Map<String, Value> {
    let mut row = Map::new();
    row.insert("toolName".to_owned(), Value::from(name));
    row.insert("kind".to_owned(), Value::from(kind));
    if let Some(reason) = reason {
        row.insert("reason".to_owned(), Value::from(reason));
    }
    if let Some(at) = expires_at {
        if let Ok(at) = serde_json::to_value(at) {
            row.insert("expiresAt".to_owned(), at);
        }
    }
    row
}

/// A run row's fields as event data spells them.
pub fn run_row(name: &str, depth: i32) -> Map<String, Value> {
    let mut row = Map::new();
    row.insert("runName".to_owned(), Value::from(name));
    row.insert("depth".to_owned(), Value::from(depth));
    row
}

/// What the rows an event refers to hold, for [`unpack`]: each is read only
/// when the event's `packed` says it left that part out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Referenced {
    /// The `arguments` of the tool-call row `(run_id, data.toolCallId)`.
    pub call_arguments: Option<Value>,
    /// The `body` of the messages row `message_id`.
    pub message_body: Option<Value>,
    /// The call row's and run row's fields ([`call_row`], [`run_row`]).
    pub rows: RowFields,
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
///
/// Call- and run-row fields are left out when `rows` says the row holds
/// every one of them (see [`call_fields_of`], [`run_fields_of`]).
pub fn pack(event_type: EventType, run: Option<RunId>, data: Value, rows: &RowFields) -> Packed {
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
    if object.get("toolCallId").is_some_and(Value::is_string)
        && leave_out(&mut object, call_fields_of(event_type), &rows.call)
    {
        packed |= PACKED_CALL_FIELDS;
    }
    if leave_out(&mut object, run_fields_of(event_type), &rows.run) {
        packed |= PACKED_RUN_FIELDS;
    }
    Packed {
        data: Value::Object(object),
        packed,
    }
}

/// Removes `fields` from `object` if every one is there with the value
/// `row` has for it; true if it did.
fn leave_out(object: &mut Map<String, Value>, fields: &[&str], row: &Map<String, Value>) -> bool {
    let all_the_rows = !fields.is_empty()
        && fields
            .iter()
            .all(|f| object.get(*f).is_some() && object.get(*f) == row.get(*f));
    if all_the_rows {
        for f in fields {
            object.remove(*f);
        }
    }
    all_the_rows
}

/// Puts `fields` back from `row`; false if the row lacks one.
fn put_back(object: &mut Map<String, Value>, fields: &[&str], row: &Map<String, Value>) -> bool {
    let mut whole = true;
    for f in fields {
        match row.get(*f) {
            Some(value) => {
                object.insert((*f).to_owned(), value.clone());
            }
            None => whole = false,
        }
    }
    whole
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
pub fn unpack(
    event_type: EventType,
    run: Option<RunId>,
    packed: i16,
    stored: Value,
    referenced: Referenced,
) -> Unpacked {
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
    if packed & PACKED_CALL_FIELDS != 0
        && !put_back(
            &mut object,
            call_fields_of(event_type),
            &referenced.rows.call,
        )
    {
        problems.push(UnpackError::NoCallRow);
    }
    if packed & PACKED_RUN_FIELDS != 0
        && !put_back(&mut object, run_fields_of(event_type), &referenced.rows.run)
    {
        problems.push(UnpackError::NoRunRow);
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
    #[error("packed event data left out its run's fields but its run row is missing")]
    NoRunRow,
}

fn run_value(run: RunId) -> Value {
    Value::String(run.0.hyphenated().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Map};

    /// Nothing known of the rows: nothing of them is left out.
    fn no_rows() -> RowFields {
        RowFields::default()
    }

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
        assert_eq!(
            (
                PACKED_RUN_ID,
                PACKED_ARGUMENTS,
                PACKED_MESSAGE,
                PACKED_CALL_FIELDS,
                PACKED_RUN_FIELDS
            ),
            (1, 2, 4, 8, 16)
        );
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
        let stored = pack(
            EventType::InputRequired,
            Some(run()),
            data.clone(),
            &no_rows(),
        );
        assert_eq!(stored.packed, PACKED_RUN_ID | PACKED_ARGUMENTS);
        assert!(stored.data.get("arguments").is_none() && stored.data.get("runId").is_none());
        let back = unpack(
            EventType::InputRequired,
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
            ..Referenced::default()
        }
    }

    #[test]
    fn a_message_event_written_with_its_row_keeps_only_a_reference() {
        let body = json!({"role": "assistant", "content": "Done."});
        let data = json!({"runId": run(), "message": body});
        let stored = pack_message(
            pack(EventType::Message, Some(run()), data.clone(), &no_rows()),
            &body,
        );
        assert_eq!(
            stored,
            Packed {
                data: json!({}),
                packed: PACKED_RUN_ID | PACKED_MESSAGE
            }
        );
        let referenced = Referenced {
            message_body: Some(body),
            ..Referenced::default()
        };
        assert_eq!(
            unpack(
                EventType::Message,
                Some(run()),
                stored.packed,
                stored.data,
                referenced
            )
            .whole(),
            Ok(data)
        );
        // another body than the row's is kept
        let kept = pack_message(
            pack(
                EventType::Message,
                Some(run()),
                json!({"message": 1}),
                &no_rows(),
            ),
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
            let stored = pack(EventType::ToolCall, Some(run()), data, &no_rows());
            assert_eq!(stored.packed & PACKED_ARGUMENTS != 0, left_out, "{kind}");
            assert_eq!(stored.data.get("arguments").is_none(), left_out, "{kind}");
        }
    }

    #[test]
    fn a_run_id_other_than_the_rows_is_kept() {
        let other = json!({"runId": "01912345-0000-7000-8000-000000000000", "x": 1});
        let stored = pack(
            EventType::RunStarted,
            Some(run()),
            other.clone(),
            &no_rows(),
        );
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
        assert_eq!(
            pack(EventType::Message, None, data.clone(), &no_rows()).data,
            data
        );
        assert_eq!(
            pack(EventType::Message, Some(run()), json!([1]), &no_rows()).data,
            json!([1])
        );
    }

    #[test]
    fn what_cannot_be_put_back_is_named_and_the_rest_served() {
        let none = Referenced::default;
        let problems =
            |packed, data| unpack(EventType::ToolCall, Some(run()), packed, data, none()).problems;
        assert_eq!(
            unpack(EventType::ToolCall, None, PACKED_RUN_ID, json!({}), none()).problems,
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
        let newer = unpack(
            EventType::ToolCall,
            Some(run()),
            PACKED_RUN_ID | 64,
            json!({"a": 1}),
            none(),
        );
        assert_eq!(newer.problems, [UnpackError::UnknownBits(64)]);
        assert_eq!(newer.data, json!({"a": 1, "runId": run()}));
        // Data stored whole comes back as it is, whatever it is.
        assert_eq!(
            unpack(EventType::ToolCall, None, 0, json!("x"), none()).whole(),
            Ok(json!("x"))
        );
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
            row_like_fields(),
        )
            .prop_map(|(rest, run_id, call, arguments, kind, message, row_like)| {
                let mut object: Map<String, Value> = rest.into_iter().collect();
                object.extend(row_like);
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

    const ROW_FIELDS: [&str; 6] = [
        "toolName",
        "kind",
        "reason",
        "expiresAt",
        "runName",
        "depth",
    ];

    /// Some of the fields rows may hold, from a few values, so that data
    /// and rows often agree and sometimes do not.
    fn row_like_fields() -> impl Strategy<Value = Map<String, Value>> {
        let value = prop_oneof![Just(json!("a")), Just(json!("b")), Just(json!(0))];
        prop::collection::vec(prop::option::of(value), ROW_FIELDS.len()).prop_map(|values| {
            ROW_FIELDS
                .iter()
                .zip(values)
                .filter_map(|(key, value)| Some(((*key).to_owned(), value?)))
                .collect()
        })
    }

    fn rows() -> impl Strategy<Value = RowFields> {
        (row_like_fields(), row_like_fields()).prop_map(|(call, run)| RowFields { call, run })
    }

    #[test]
    fn a_parked_calls_fields_and_its_runs_are_left_to_their_rows() {
        let at = "2026-12-02T13:34:37.934023Z"
            .parse::<DateTime<Utc>>()
            .unwrap();
        let rows = RowFields {
            call: call_row("send_email", "approval", Some("approval"), Some(at)),
            run: run_row("mailer", 0),
        };
        let data = json!({
            "toolCallId": "c1", "runId": run(), "toolName": "send_email",
            "arguments": {"to": "ops@example.com"}, "kind": "approval", "reason": "approval",
            "runName": "mailer", "depth": 0, "expiresAt": "2026-12-02T13:34:37.934023Z",
        });
        let stored = pack(EventType::InputRequired, Some(run()), data.clone(), &rows);
        assert_eq!(
            stored.data,
            json!({"toolCallId": "c1", "runName": "mailer", "depth": 0})
        );
        assert_eq!(
            stored.packed,
            PACKED_RUN_ID | PACKED_ARGUMENTS | PACKED_CALL_FIELDS
        );
        let referenced = Referenced {
            call_arguments: Some(json!({"to": "ops@example.com"})),
            rows: rows.clone(),
            ..Referenced::default()
        };
        let back = unpack(
            EventType::InputRequired,
            Some(run()),
            stored.packed,
            stored.data,
            referenced,
        );
        assert_eq!(back.whole(), Ok(data));
        // A reason the row does not hold keeps every field in the data.
        let other = json!({"toolCallId": "c1", "toolName": "send_email", "kind": "approval",
                           "reason": "other", "expiresAt": "2026-12-02T13:34:37.934023Z"});
        let kept = pack(EventType::InputRequired, Some(run()), other.clone(), &rows);
        assert_eq!((kept.data, kept.packed), (other, 0));
        // A run start leaves its name and depth to the run row.
        let started = json!({"runId": run(), "runName": "mailer", "depth": 0});
        let stored = pack(EventType::RunStarted, Some(run()), started, &rows);
        assert_eq!(
            (stored.data, stored.packed),
            (json!({}), PACKED_RUN_ID | PACKED_RUN_FIELDS)
        );
    }

    proptest! {
        /// Whatever is written reads back the same, given what the rows
        /// hold (the writer's knowledge of them: see [`pack`]).
        #[test]
        fn unpack_gives_back_what_pack_was_given_with_rows(
            data in prop_oneof![event_data(), json_value()],
            event_type in prop::sample::select(EventType::ALL.to_vec()),
            rows in rows(),
        ) {
            let referenced = Referenced {
                call_arguments: data.get("arguments").cloned(),
                message_body: None,
                rows: rows.clone(),
            };
            let stored = pack(event_type, Some(run()), data.clone(), &rows);
            prop_assert_eq!(
                unpack(event_type, Some(run()), stored.packed, stored.data, referenced).whole(),
                Ok(data)
            );
        }

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
                rows: RowFields::default(),
            };
            let mut stored = pack(event_type, run, data.clone(), &no_rows());
            if let (Some(body), true) = (&referenced.message_body, with_message_row) {
                stored = pack_message(stored, body);
            }
            prop_assert_eq!(
                unpack(event_type, run, stored.packed, stored.data, referenced).whole(),
                Ok(data)
            );
        }

        /// Packing never adds: the stored data is the written object less
        /// some of its keys.
        #[test]
        fn pack_only_leaves_keys_out(
            data in event_data(),
            event_type in prop::sample::select(EventType::ALL.to_vec()),
            rows in rows(),
        ) {
            let stored = pack(event_type, Some(run()), data.clone(), &rows);
            let (Value::Object(written), Value::Object(kept)) = (&data, &stored.data) else {
                panic!("objects in, objects out");
            };
            for (key, value) in kept {
                prop_assert_eq!(written.get(key), Some(value));
            }
        }
    }
}
