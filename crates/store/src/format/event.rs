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

use agentenkit_core::EventType;
use agentenkit_core::RunId;

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
/// The fields [`parked_run_fields_of`] its type equalled those of the run
/// row `run_id` and were left out.
pub const PACKED_PARKED_RUN_FIELDS: i16 = 32;
/// The fields [`run_version_fields_of`] its type (the agent version the
/// run is pinned to) equalled those of the run row and were left out.
pub const PACKED_RUN_VERSION: i16 = 64;

const ALL: i16 = PACKED_RUN_ID
    | PACKED_ARGUMENTS
    | PACKED_MESSAGE
    | PACKED_CALL_FIELDS
    | PACKED_RUN_FIELDS
    | PACKED_PARKED_RUN_FIELDS
    | PACKED_RUN_VERSION;

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

/// The run-row fields an event of `event_type` may leave out under
/// [`PACKED_RUN_FIELDS`] (a run's name and depth never change).
pub fn run_fields_of(event_type: EventType) -> &'static [&'static str] {
    match event_type {
        EventType::RunStarted => &["runName", "depth"],
        _ => &[],
    }
}

/// The run-row fields an event of `event_type` may leave out under
/// [`PACKED_PARKED_RUN_FIELDS`].
pub fn parked_run_fields_of(event_type: EventType) -> &'static [&'static str] {
    match event_type {
        EventType::InputRequired => &["runName", "depth"],
        _ => &[],
    }
}

/// The run-row fields an event of `event_type` may leave out under
/// [`PACKED_RUN_VERSION`] (a run's version never changes; a run without
/// one has no such field to leave out).
pub fn run_version_fields_of(event_type: EventType) -> &'static [&'static str] {
    match event_type {
        EventType::RunStarted => &["agentVersion"],
        _ => &[],
    }
}

/// Each bit that leaves run-row fields out, with the fields it stands for
/// in an event of `event_type`.
fn run_field_bits(event_type: EventType) -> [(i16, &'static [&'static str]); 3] {
    [
        (PACKED_RUN_FIELDS, run_fields_of(event_type)),
        (PACKED_PARKED_RUN_FIELDS, parked_run_fields_of(event_type)),
        (PACKED_RUN_VERSION, run_version_fields_of(event_type)),
    ]
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
pub fn run_row(name: &str, depth: i32, version: Option<&str>) -> Map<String, Value> {
    let mut row = Map::new();
    row.insert("runName".to_owned(), Value::from(name));
    row.insert("depth".to_owned(), Value::from(depth));
    if let Some(version) = version {
        row.insert("agentVersion".to_owned(), Value::from(version));
    }
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
    for (bit, fields) in run_field_bits(event_type) {
        if leave_out(&mut object, fields, &rows.run) {
            packed |= bit;
        }
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
    for (bit, fields) in run_field_bits(event_type) {
        if packed & bit != 0 && !put_back(&mut object, fields, &referenced.rows.run) {
            problems.push(UnpackError::NoRunRow);
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
    #[error("packed event data left out its run's fields but its run row is missing")]
    NoRunRow,
}

fn run_value(run: RunId) -> Value {
    Value::String(run.0.hyphenated().to_string())
}

#[cfg(test)]
mod tests;
