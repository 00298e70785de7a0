//! Tests of `stored_event`: each bit packed and put back, and the
//! property that whatever is written reads back the same.

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
            PACKED_RUN_FIELDS,
            PACKED_PARKED_RUN_FIELDS,
            PACKED_RUN_VERSION
        ),
        (1, 2, 4, 8, 16, 32, 64)
    );
}

/// A run's version is on its row: `RUN_STARTED` keeps none of it, and a
/// run without a version keeps nothing either.
#[test]
fn a_run_started_keeps_no_version_its_run_row_holds() {
    let hash = "9f".repeat(32);
    let data = json!({ "runId": run(), "runName": "mailer", "depth": 0, "agentVersion": hash });
    let rows = RowFields {
        run: run_row("mailer", 0, Some(&hash)),
        ..RowFields::default()
    };
    let stored = pack(EventType::RunStarted, Some(run()), data.clone(), &rows);
    assert_eq!(
        stored.packed,
        PACKED_RUN_ID | PACKED_RUN_FIELDS | PACKED_RUN_VERSION
    );
    assert_eq!(stored.data, json!({}));
    let read = unpack(
        EventType::RunStarted,
        Some(run()),
        stored.packed,
        stored.data,
        Referenced {
            rows,
            ..Referenced::default()
        },
    );
    assert_eq!(read.whole().unwrap(), data);
    // Without a version: the bit is not set, and nothing is missing.
    let plain = json!({ "runId": run(), "runName": "mailer", "depth": 0 });
    let rows = RowFields {
        run: run_row("mailer", 0, None),
        ..RowFields::default()
    };
    let stored = pack(EventType::RunStarted, Some(run()), plain.clone(), &rows);
    assert_eq!(stored.packed, PACKED_RUN_ID | PACKED_RUN_FIELDS);
    let read = unpack(
        EventType::RunStarted,
        Some(run()),
        stored.packed,
        stored.data,
        Referenced {
            rows,
            ..Referenced::default()
        },
    );
    assert_eq!(read.whole().unwrap(), plain);
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
        let data = json!({"runId": run(), "toolCallId": "c1", "arguments": {"a": 1}, "kind": kind});
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
        PACKED_RUN_ID | 128,
        json!({"a": 1}),
        none(),
    );
    assert_eq!(newer.problems, [UnpackError::UnknownBits(128)]);
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
        run: run_row("mailer", 0, None),
    };
    let data = json!({
        "toolCallId": "c1", "runId": run(), "toolName": "send_email",
        "arguments": {"to": "ops@example.com"}, "kind": "approval", "reason": "approval",
        "runName": "mailer", "depth": 0, "expiresAt": "2026-12-02T13:34:37.934023Z",
    });
    let stored = pack(EventType::InputRequired, Some(run()), data.clone(), &rows);
    assert_eq!(stored.data, json!({"toolCallId": "c1"}));
    assert_eq!(
        stored.packed,
        PACKED_RUN_ID | PACKED_ARGUMENTS | PACKED_CALL_FIELDS | PACKED_PARKED_RUN_FIELDS
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
    // A depth the run row does not hold keeps the run's fields in the data;
    // and its reader, given no run row, names what it could not put back.
    let deeper = json!({"toolCallId": "c1", "runName": "mailer", "depth": 1});
    let kept = pack(EventType::InputRequired, Some(run()), deeper.clone(), &rows);
    assert_eq!((kept.data, kept.packed), (deeper, 0));
    let alone = json!({"toolCallId": "c1", "runName": "mailer", "depth": 0});
    let stored = pack(EventType::InputRequired, Some(run()), alone, &rows);
    assert_eq!(stored.packed, PACKED_PARKED_RUN_FIELDS);
    let unread = unpack(
        EventType::InputRequired,
        Some(run()),
        stored.packed,
        stored.data,
        Referenced::default(),
    );
    assert_eq!(unread.problems, vec![UnpackError::NoRunRow]);
    // Other events keep a run name beside a call (bit 32 is INPUT_REQUIRED's).
    let call = json!({"toolCallId": "c1", "runName": "mailer", "depth": 0});
    let kept = pack(EventType::ToolCall, Some(run()), call.clone(), &rows);
    assert_eq!(kept.data, call);
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
