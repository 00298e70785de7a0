//! How an event row is written: under the thread's event lock (so ids are
//! handed out in commit order), its data packed as the store's format says.

use agentenkit_core::event_row;
use agentenkit_core::stored_event::{self, RowFields};
use agentenkit_core::{EventType, RunId, ThreadId};
use deadpool_postgres::Transaction;
use serde_json::Value;

use crate::journal_insert::StoredJournal;
use crate::pipeline::Op;
use crate::{Result, StorageFormat};

/// How far apart the sequence hands out row ids (migration 0018): a row's
/// events take the ids from its own up to the next row's.
pub(crate) const ROW_ID_STEP: i64 = event_row::MAX_EVENTS_PER_ROW as i64;

/// The thread `$1`'s event lock, as the CTE `ordered` every event insert
/// selects from (see [`INSERT_EVENT_SQL`]).
macro_rules! event_lock_cte {
    () => {
        "WITH ordered AS (
        SELECT pg_advisory_xact_lock(1702260340, hashtext($1::uuid::text)))"
    };
}

/// The statement of [`INSERT_EVENT_SQL`], as a literal both it and the
/// `RETURNING` form are made from.
macro_rules! insert_event_sql {
    () => {
        concat!(
            event_lock_cte!(),
            "
    INSERT INTO events (thread_id, run_id, type, data, packed)
    SELECT $1::uuid, $2::uuid, $3::text, $4::jsonb, $5::smallint FROM ordered"
        )
    };
}

/// Inserts one event of thread `$1`, its id taken only once this
/// transaction holds the thread's event lock (an advisory lock, held to
/// commit): a later event of the thread waits for this transaction to end
/// before it takes its id, so a thread's ids are handed out in commit order
/// and a reader that sees an event has seen every earlier one. Readers
/// (`after=N`, streams) can then never skip an event.
///
/// Every transaction inserts its events *last*, after every row lock it
/// takes: whoever holds the event lock waits for nothing more, so the lock
/// cannot close a cycle of waits.
pub const INSERT_EVENT_SQL: &str = insert_event_sql!();
const INSERT_EVENT_RETURNING: &str = concat!(insert_event_sql!(), " RETURNING id");

/// An event insert as a pipelined statement (see [`INSERT_EVENT_SQL`]):
/// it goes after every other statement of its transaction. The data is
/// stored as `format` says (packed: `agentenkit_core::stored_event`).
pub(crate) fn event_op(
    thread: ThreadId,
    run: Option<RunId>,
    event_type: EventType,
    data: Value,
    format: StorageFormat,
) -> Op {
    event_op_with_rows(thread, run, event_type, data, format, &RowFields::default())
}

/// [`event_op`] of an event whose writer knows what its call or run row
/// holds (`rows`): the fields they repeat are left to them.
pub(crate) fn event_op_with_rows(
    thread: ThreadId,
    run: Option<RunId>,
    event_type: EventType,
    data: Value,
    format: StorageFormat,
    rows: &RowFields,
) -> Op {
    single_op(thread, run, event_item(run, event_type, data, format, rows))
}

/// The statement of a [`message_event_item`] in a row of its own: under the thread's event lock
/// it inserts the message, then the event naming it by `message_id`.
const INSERT_MESSAGE_EVENT_SQL: &str = concat!(
    event_lock_cte!(),
    ",
    message AS (
        INSERT INTO messages (thread_id, run_id, body, body_position)
        SELECT $1::uuid, $2::uuid, $6::jsonb, $7::int FROM ordered RETURNING id)
    INSERT INTO events (thread_id, run_id, type, data, packed, message_id)
    SELECT $1::uuid, $2::uuid, $3::text, $4::jsonb, $5::smallint, message.id FROM message"
);

/// A row of several events (`agentenkit_core::event_row`): the array of
/// their data and their layout, the type left empty (a reader of a version
/// before 0018 refuses it as an unknown event type rather than serving the
/// first event's type with the array).
const INSERT_SHARED_ROW_SQL: &str = concat!(
    event_lock_cte!(),
    "
    INSERT INTO events (thread_id, run_id, type, data, packed, layout)
    SELECT $1::uuid, $2::uuid, '', $3::jsonb, 0, $4::bytea FROM ordered"
);

/// [`INSERT_SHARED_ROW_SQL`] with the row's one `MESSAGE` event's message,
/// inserted first as in [`INSERT_MESSAGE_EVENT_SQL`].
const INSERT_SHARED_ROW_WITH_MESSAGE_SQL: &str = concat!(
    event_lock_cte!(),
    ",
    message AS (
        INSERT INTO messages (thread_id, run_id, body, body_position)
        SELECT $1::uuid, $2::uuid, $5::jsonb, $6::int FROM ordered RETURNING id)
    INSERT INTO events (thread_id, run_id, type, data, packed, layout, message_id)
    SELECT $1::uuid, $2::uuid, '', $3::jsonb, 0, $4::bytea, message.id FROM message"
);

/// One event of a commit as it will be stored, before its row is chosen
/// ([`events_ops`]).
pub(crate) struct EventItem {
    event_type: EventType,
    stored: stored_event::Packed,
    /// The message row its statement inserts and it names (packed bit 4):
    /// the body, or the journal position that holds it.
    message: Option<(Option<Value>, Option<i32>)>,
}

/// An event of `run` as `format` stores it, leaving to `rows` what they
/// hold (see [`event_op_with_rows`]).
pub(crate) fn event_item(
    run: Option<RunId>,
    event_type: EventType,
    data: Value,
    format: StorageFormat,
    rows: &RowFields,
) -> EventItem {
    EventItem {
        event_type,
        stored: pack_event(event_type, run, data, format, rows),
        message: None,
    }
}

/// A `MESSAGE` event and its message (`body`), written by one statement:
/// the event names the message row by `message_id` and is stored without
/// it (`stored_event::pack_message`). Only for a store writing packed rows.
/// The message row stores `body`, or the journal position of a model
/// entry of the commit that holds it (`body_position`, see `in_journal.rs`).
pub(crate) fn message_event_item(
    run: RunId,
    data: Value,
    body: &Value,
    journal: &StoredJournal,
) -> EventItem {
    let stored = stored_event::pack_message(
        stored_event::pack(EventType::Message, Some(run), data, &RowFields::default()),
        body,
    );
    EventItem {
        event_type: EventType::Message,
        stored,
        message: Some(journal.message_body(body.clone())),
    }
}

/// The statements that store `items`, a commit's events of `run` in
/// thread `thread`, in order: one row each, or for a store writing
/// [`StorageFormat::Packed`] rows as `agentenkit_core::event_row` splits
/// them. They go after every other statement of the transaction (see
/// [`INSERT_EVENT_SQL`]).
pub(crate) fn events_ops(
    thread: ThreadId,
    run: Option<RunId>,
    items: Vec<EventItem>,
    format: StorageFormat,
) -> Vec<Op> {
    if !format.writes_newest_rows() {
        return items
            .into_iter()
            .map(|item| single_op(thread, run, item))
            .collect();
    }
    let kinds: Vec<(EventType, i16)> = items
        .iter()
        .map(|item| (item.event_type, item.stored.packed))
        .collect();
    let ranges = event_row::rows(&kinds);
    let mut items = items.into_iter();
    ranges
        .into_iter()
        .map(|range| {
            let row: Vec<EventItem> = items.by_ref().take(range.len()).collect();
            if row.len() == 1 {
                let item = row.into_iter().next().expect("one");
                single_op(thread, run, item)
            } else {
                shared_op(thread, run, &kinds[range], row)
            }
        })
        .collect()
}

/// A row of one event, stored as rows were before 0018.
fn single_op(thread: ThreadId, run: Option<RunId>, item: EventItem) -> Op {
    let params: Vec<crate::pipeline::Param> = vec![
        Box::new(thread.0),
        Box::new(run.map(|r| r.0)),
        Box::new(item.event_type.as_str()),
        Box::new(item.stored.data),
        Box::new(item.stored.packed),
    ];
    with_message(
        params,
        item.message,
        INSERT_EVENT_SQL,
        INSERT_MESSAGE_EVENT_SQL,
    )
}

/// The insert `sql` of `params`, or `message_sql`, which also inserts the
/// message row the event names (its body and body position last).
fn with_message(
    mut params: Vec<crate::pipeline::Param>,
    message: Option<(Option<Value>, Option<i32>)>,
    sql: &'static str,
    message_sql: &'static str,
) -> Op {
    match message {
        None => Op::new(sql, params),
        Some((body, body_position)) => {
            params.push(Box::new(body));
            params.push(Box::new(body_position));
            Op::new(message_sql, params)
        }
    }
}

/// A row shared by the events `row` (of types and bits `kinds`).
fn shared_op(
    thread: ThreadId,
    run: Option<RunId>,
    kinds: &[(EventType, i16)],
    row: Vec<EventItem>,
) -> Op {
    let mut message = None;
    let mut data = Vec::with_capacity(row.len());
    for item in row {
        // event_row::rows keeps at most one message per row.
        message = message.or(item.message);
        data.push(item.stored.data);
    }
    let params: Vec<crate::pipeline::Param> = vec![
        Box::new(thread.0),
        Box::new(run.map(|r| r.0)),
        Box::new(Value::Array(data)),
        Box::new(event_row::layout(kinds)),
    ];
    with_message(
        params,
        message,
        INSERT_SHARED_ROW_SQL,
        INSERT_SHARED_ROW_WITH_MESSAGE_SQL,
    )
}

/// An event's data as `format` stores it.
fn pack_event(
    event_type: EventType,
    run: Option<RunId>,
    data: Value,
    format: StorageFormat,
    rows: &RowFields,
) -> stored_event::Packed {
    if format.packs() {
        stored_event::pack(event_type, run, data, rows)
    } else {
        stored_event::Packed { data, packed: 0 }
    }
}

/// An event insert in a transaction that has taken every row lock it will
/// take (see [`INSERT_EVENT_SQL`]).
pub(crate) async fn insert_event(
    tx: &Transaction<'_>,
    thread: ThreadId,
    run: Option<RunId>,
    event_type: EventType,
    data: &Value,
    format: StorageFormat,
) -> Result<i64> {
    let stmt = tx.prepare_cached(INSERT_EVENT_RETURNING).await?;
    let stored = pack_event(event_type, run, data.clone(), format, &RowFields::default());
    let row = tx
        .query_one(
            &stmt,
            &[
                &thread.0,
                &run.map(|r| r.0),
                &event_type.as_str(),
                &stored.data,
                &stored.packed,
            ],
        )
        .await?;
    Ok(row.get(0))
}
