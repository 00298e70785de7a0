//! How an event row is written: under the thread's event lock (so ids are
//! handed out in commit order), its data packed as the store's format says.

use agentenkit_core::stored_event::{self, RowFields};
use agentenkit_core::{EventType, RunId, ThreadId};
use deadpool_postgres::Transaction;
use serde_json::Value;

use crate::journal_insert::StoredJournal;
use crate::pipeline::Op;
use crate::{Result, StorageFormat};

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
    let stored = pack_event(event_type, run, data, format, rows);
    Op::new(
        INSERT_EVENT_SQL,
        vec![
            Box::new(thread.0),
            Box::new(run.map(|r| r.0)),
            Box::new(event_type.as_str()),
            Box::new(stored.data),
            Box::new(stored.packed),
        ],
    )
}

/// A `MESSAGE` event and its message (`body`) as one statement, placed
/// where events go: under the thread's event lock it inserts the message,
/// then the event naming it by `message_id` and left without it
/// (`stored_event::pack_message`). Only for a store writing packed rows.
/// The message row stores `body`, or the journal position of a model
/// entry of the commit that holds it (`body_position`, see `in_journal.rs`).
pub(crate) fn message_event_op(
    thread: ThreadId,
    run: RunId,
    data: Value,
    body: &Value,
    journal: &StoredJournal,
) -> Op {
    const SQL: &str = concat!(
        event_lock_cte!(),
        ",
    message AS (
        INSERT INTO messages (thread_id, run_id, body, body_position)
        SELECT $1::uuid, $2::uuid, $6::jsonb, $7::int FROM ordered RETURNING id)
    INSERT INTO events (thread_id, run_id, type, data, packed, message_id)
    SELECT $1::uuid, $2::uuid, $3::text, $4::jsonb, $5::smallint, message.id FROM message"
    );
    let stored = stored_event::pack_message(
        stored_event::pack(EventType::Message, Some(run), data, &RowFields::default()),
        body,
    );
    let (stored_body, body_position) = journal.message_body(body.clone());
    Op::new(
        SQL,
        vec![
            Box::new(thread.0),
            Box::new(run.0),
            Box::new(EventType::Message.as_str()),
            Box::new(stored.data),
            Box::new(stored.packed),
            Box::new(stored_body),
            Box::new(body_position),
        ],
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
