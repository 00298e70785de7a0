//! How event and message rows are written: under the thread's event lock
//! (so a thread's ids of each are handed out in commit order), an event's
//! data as `format::event_item` stores it.

use std::sync::Arc;

use agentenkit_core::{EventType, RunId, ThreadId};
use serde_json::Value;

use crate::format::event::RowFields;
use crate::format::event_item::{event_item, EventItem};
use crate::outbox::OutboxRow;
use crate::pipeline::{Answer, Expect, Op, Param};
use crate::sent_here::{EventDraft, NotifyRule};
use crate::Result;

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
pub const INSERT_EVENT_SQL: &str = "
    WITH ordered AS (SELECT pg_advisory_xact_lock(1702260340, hashtext($1::uuid::text)))
    INSERT INTO events (thread_id, run_id, type, data, packed)
    SELECT $1::uuid, $2::uuid, $3::text, $4::jsonb, $5::smallint FROM ordered";

/// A `MESSAGE` event and its message in one statement: under the thread's
/// event lock (as [`INSERT_EVENT_SQL`]) it inserts the message (`$6` body,
/// or `$7` the journal position that holds it), then the event naming it
/// by `message_id`.
const INSERT_MESSAGE_EVENT_SQL: &str = "
    WITH ordered AS (SELECT pg_advisory_xact_lock(1702260340, hashtext($1::uuid::text))),
    message AS (
        INSERT INTO messages (thread_id, run_id, body, body_position)
        SELECT $1::uuid, $2::uuid, $6::jsonb, $7::int FROM ordered RETURNING id)
    INSERT INTO events (thread_id, run_id, type, data, packed, message_id)
    SELECT $1::uuid, $2::uuid, $3::text, $4::jsonb, $5::smallint, message.id FROM message";

/// Inserts one message of thread `$1` (`$3` its body, or `$4` the journal
/// position that holds it), its id taken under the thread's event lock as
/// [`INSERT_EVENT_SQL`] takes an event's: a message's id is handed out in
/// commit order too, so a reader paging messages with `after=N` never skips
/// one that a slower transaction had numbered lower. It goes with the
/// events, after every row lock of its transaction.
pub const INSERT_MESSAGE_SQL: &str = "
    WITH ordered AS (SELECT pg_advisory_xact_lock(1702260340, hashtext($1::uuid::text)))
    INSERT INTO messages (thread_id, run_id, body, body_position)
    SELECT $1::uuid, $2::uuid, $3::jsonb, $4::int FROM ordered";

/// [`INSERT_MESSAGE_SQL`] as a pipelined statement: it goes after every
/// statement that takes a row lock.
pub(crate) fn message_op(
    thread: ThreadId,
    run: RunId,
    body: Option<Value>,
    body_position: Option<i32>,
) -> Op {
    Op::new(
        INSERT_MESSAGE_SQL,
        vec![
            Box::new(thread.0),
            Box::new(run.0),
            Box::new(body),
            Box::new(body_position),
        ],
    )
}

/// The insert of `item`, an event of `run` in `thread`, as a pipelined
/// statement: it goes after every other statement of its transaction (see
/// [`INSERT_EVENT_SQL`]).
pub(crate) fn item_op(thread: ThreadId, run: Option<RunId>, item: EventItem) -> Op {
    let mut params: Vec<Param> = vec![
        Box::new(thread.0),
        Box::new(run.map(|r| r.0)),
        Box::new(item.event_type.as_str()),
        Box::new(item.stored.data),
        Box::new(item.stored.packed),
    ];
    match item.message {
        None => Op::new(INSERT_EVENT_SQL, params),
        Some((body, body_position)) => {
            params.push(Box::new(body));
            params.push(Box::new(body_position));
            Op::new(INSERT_MESSAGE_EVENT_SQL, params)
        }
    }
}

/// An event insert as a pipelined statement, leaving to `rows` what they
/// hold (see [`item_op`]).
pub(crate) fn event_op(
    thread: ThreadId,
    run: Option<RunId>,
    event_type: EventType,
    data: Value,
    rows: &RowFields,
) -> Op {
    item_op(thread, run, event_item(run, event_type, data, rows))
}

/// The `Notify` outbox row of the event the statement just before it
/// inserted, in the same transaction: `currval` is the id that insert took
/// (it is this session's, and a transaction's statements run in order,
/// pipelined or not). Returns `(id, key)` as a resume does.
const NOTIFY_SQL: &str = "
    INSERT INTO outbox (delay_ms, key, due_at)
    SELECT 0, 'notify:' || $1::uuid::text || ':' || currval(pg_get_serial_sequence('events', 'id')), now()
    RETURNING id, key";

/// [`NOTIFY_SQL`] for an event this process sends itself (see
/// `sent_here`): the row is due when the claim (`$3` ms) runs out, and the
/// same statement claims the first attempt for each target `$2` names. It
/// returns what the database gave the event, its id and its time (`now()`,
/// the column's default, is the transaction's); the rest of the event the
/// process has in memory (`sent_here::EventDraft`).
const NOTIFY_HERE_SQL: &str = "
    WITH inserted AS (SELECT currval(pg_get_serial_sequence('events', 'id')) AS id),
    claimed AS (
        INSERT INTO notification_deliveries (delivery_id, target, next_at, attempts)
        SELECT inserted.id::text, unnest($2::text[]),
               now() + $3::bigint * interval '1 millisecond', 1
        FROM inserted
    ),
    notify AS (
        INSERT INTO outbox (delay_ms, key, due_at)
        SELECT $3::bigint, 'notify:' || $1::uuid::text || ':' || inserted.id,
               now() + $3::bigint * interval '1 millisecond'
        FROM inserted
        RETURNING id
    )
    SELECT inserted.id AS event_id, now() AS created_at, notify.id AS outbox_id
    FROM inserted, notify";

/// The `Notify` outbox row of an event of `event_type` (`data`, whole), as
/// a pipelined statement right after its event's insert: [`NOTIFY_SQL`],
/// or when this process sends it itself, [`NOTIFY_HERE_SQL`], whose answer
/// carries the event (see `sent_here`).
pub(crate) fn notify_op(
    thread: ThreadId,
    run: RunId,
    event_type: EventType,
    data: &Value,
    rule: NotifyRule<'_>,
) -> Op {
    match rule.claimed_here(event_type) {
        None => Op::new(NOTIFY_SQL, vec![Box::new(run.0)]).expect(Expect::Rows),
        Some((targets, claim_ms)) => {
            let params: Vec<Param> = vec![
                Box::new(run.0),
                Box::new(targets.to_vec()),
                Box::new(claim_ms as i64),
            ];
            let event = EventDraft::new(thread, run, event_type, data.clone(), targets, claim_ms);
            Op::new(NOTIFY_HERE_SQL, params).expect(Expect::Claimed(Arc::new(event)))
        }
    }
}

/// The statements that write an event (`item`, stored from `data`), and
/// its `Notify` outbox row when the deployment tells its targets of events
/// of this type.
pub(crate) fn item_ops(
    thread: ThreadId,
    run: Option<RunId>,
    item: EventItem,
    data: &Value,
    notified: NotifyRule<'_>,
) -> Vec<Op> {
    let event_type = item.event_type;
    let notify = run.filter(|_| notified.contains(event_type));
    let mut ops = vec![item_op(thread, run, item)];
    ops.extend(notify.map(|run| notify_op(thread, run, event_type, data, notified)));
    ops
}

/// [`event_op`] and, when notified, its `Notify` outbox row (see
/// [`item_ops`]).
pub(crate) fn event_ops(
    thread: ThreadId,
    run: Option<RunId>,
    event_type: EventType,
    data: Value,
    rows: &RowFields,
    notified: NotifyRule<'_>,
) -> Vec<Op> {
    // The data is copied only for an event this process may send.
    let notify = run
        .filter(|_| notified.contains(event_type))
        .map(|run| notify_op(thread, run, event_type, &data, notified));
    let mut ops = vec![item_op(
        thread,
        run,
        event_item(run, event_type, data, rows),
    )];
    ops.extend(notify);
    ops
}

/// The outbox rows that [`notify_op`]s (and resumes, which answer alike)
/// returned among a transaction's answers.
pub(crate) fn returned_outbox(answers: Vec<Answer>) -> Result<Vec<OutboxRow>> {
    let mut outbox = Vec::new();
    for answer in answers {
        match answer {
            Answer::Rows(rows) => outbox.extend(crate::outbox::returned_rows(&rows)?),
            Answer::Claimed(rows, event) => outbox.extend(claimed_rows(&rows, &event)),
            Answer::Done | Answer::Ids(_) => {}
        }
    }
    Ok(outbox)
}

/// The outbox rows of a claimed notification's statement, with its event.
pub(crate) fn claimed_rows(rows: &[tokio_postgres::Row], event: &EventDraft) -> Vec<OutboxRow> {
    rows.iter().map(|row| event.claimed_row(row)).collect()
}
