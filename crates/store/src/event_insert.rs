//! How event and message rows are written: under the thread's event lock
//! (so a thread's ids of each are handed out in commit order), an event's
//! data as `format::encode::event_item` stores it.

use std::sync::Arc;

use agentenkit_core::notify::NotifiedEvents;
use agentenkit_core::{EventType, RunId, ThreadId};
use serde_json::Value;

use crate::format::encode::{event_item, EventItem};
use crate::format::event::RowFields;
use crate::outbox::OutboxRow;
use crate::pipeline::{Answer, Expect, Op, Param};
use crate::sent_here::{EventDraft, SentHere};
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

/// A message (`$3` its body, or `$4` the journal position that holds it,
/// when `$5`) and the events `$7`-`$9` (type, data, packing), in their
/// order, in one statement: under the thread's event lock (as
/// [`INSERT_EVENT_SQL`]), with the event at ordinal `$6` naming the message
/// by `message_id`. Their ids are taken in that order: the rows are sorted
/// by ordinal before the insert assigns them, so `currval` after it is the
/// last event's (a `Notify` row may follow only the last, see
/// [`ordered_ops`]).
const INSERT_EVENTS_SQL: &str = "
    WITH ordered AS (SELECT pg_advisory_xact_lock(1702260340, hashtext($1::uuid::text))),
    message AS (
        INSERT INTO messages (thread_id, run_id, body, body_position)
        SELECT $1::uuid, $2::uuid, $3::jsonb, $4::int FROM ordered WHERE $5::bool
        RETURNING id)
    INSERT INTO events (thread_id, run_id, type, data, packed, message_id)
    SELECT $1::uuid, $2::uuid, e.type, e.data, e.packed,
           CASE WHEN e.n = $6::int THEN (SELECT id FROM message) END
    FROM ordered,
         unnest($7::text[], $8::jsonb[], $9::smallint[]) WITH ORDINALITY AS e(type, data, packed, n)
    ORDER BY e.n";

/// How a store's transactions notify: which events get a `Notify` outbox
/// row, and which of those it claims and sends itself.
#[derive(Clone, Copy)]
pub(crate) struct NotifyRule<'a> {
    pub(crate) events: NotifiedEvents,
    pub(crate) here: Option<&'a SentHere>,
}

impl NotifyRule<'_> {
    pub(crate) fn contains(&self, event_type: EventType) -> bool {
        self.events.contains(event_type)
    }

    /// The targets this process claims an event of `event_type` for, and
    /// the claim in ms, when it sends it itself.
    pub(crate) fn claimed_here(&self, event_type: EventType) -> Option<(&[String], u64)> {
        let here = self.here?;
        Some((here.targets_of(event_type)?, here.claim_ms()))
    }
}

/// What a transaction writes after every row lock, in its order: an event
/// or a message of the run [`ordered_ops`] is given, which it writes
/// together where it can, or a statement of its own.
pub(crate) enum Ordered {
    Event(EventItem),
    /// A message's body, or the journal position that holds it.
    Message(Option<Value>, Option<i32>),
    Op(Op),
}

/// An event (`item`, stored from `data`) as [`Ordered`] writes: the event,
/// then its `Notify` outbox row when the deployment tells its targets of
/// events of this type.
pub(crate) fn ordered_item(
    thread: ThreadId,
    run: Option<RunId>,
    item: EventItem,
    data: &Value,
    notified: NotifyRule<'_>,
) -> Vec<Ordered> {
    let event_type = item.event_type;
    let notify = run.filter(|_| notified.contains(event_type));
    let mut ordered = vec![Ordered::Event(item)];
    ordered
        .extend(notify.map(|run| Ordered::Op(notify_op(thread, run, event_type, data, notified))));
    ordered
}

/// The statements of `ordered`, writes of `run` in `thread`: each stretch
/// of events between two statements of their own is one
/// [`INSERT_EVENTS_SQL`] (with the stretch's message, when it has one and
/// only one), a lone event or message its own insert. A statement of its
/// own (a `Notify` row, which reads the id of the event just before it)
/// ends a stretch.
pub(crate) fn ordered_ops(thread: ThreadId, run: RunId, ordered: Vec<Ordered>) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut stretch = Vec::new();
    for write in ordered {
        let write = match write {
            Ordered::Op(op) => {
                flush(thread, run, &mut stretch, &mut ops);
                ops.push(op);
                continue;
            }
            Ordered::Event(item) => Stretched::Event(item),
            Ordered::Message(body, position) => Stretched::Message(body, position),
        };
        // A second message starts a stretch of its own.
        if write.has_message() && stretch.iter().any(Stretched::has_message) {
            flush(thread, run, &mut stretch, &mut ops);
        }
        stretch.push(write);
    }
    flush(thread, run, &mut stretch, &mut ops);
    ops
}

/// An [`Ordered`] write a stretch can hold: not a statement of its own.
enum Stretched {
    Event(EventItem),
    Message(Option<Value>, Option<i32>),
}

impl Stretched {
    fn has_message(&self) -> bool {
        match self {
            Stretched::Message(..) => true,
            Stretched::Event(item) => item.message.is_some(),
        }
    }
}

/// The statement(s) of a stretch of events and at most one message.
fn flush(thread: ThreadId, run: RunId, stretch: &mut Vec<Stretched>, ops: &mut Vec<Op>) {
    match stretch.len() {
        0 => {}
        1 => match stretch.pop() {
            Some(Stretched::Event(item)) => ops.push(item_op(thread, Some(run), item)),
            Some(Stretched::Message(body, position)) => {
                ops.push(message_op(thread, run, body, position))
            }
            None => {}
        },
        _ => ops.push(events_op(thread, run, std::mem::take(stretch))),
    }
}

/// [`INSERT_EVENTS_SQL`] of a stretch.
fn events_op(thread: ThreadId, run: RunId, stretch: Vec<Stretched>) -> Op {
    let (mut body, mut position, mut with_message, mut naming) = (None, None, false, None);
    let (mut types, mut data, mut packings) = (Vec::new(), Vec::new(), Vec::new());
    for write in stretch {
        match write {
            Stretched::Message(b, p) => (body, position, with_message) = (b, p, true),
            Stretched::Event(item) => {
                if let Some((b, p)) = item.message {
                    (body, position, with_message) = (b, p, true);
                    naming = Some(types.len() as i32 + 1);
                }
                types.push(item.event_type.as_str());
                data.push(item.stored.data);
                packings.push(item.stored.packed);
            }
        }
    }
    Op::new(
        INSERT_EVENTS_SQL,
        vec![
            Box::new(thread.0),
            Box::new(run.0),
            Box::new(body),
            Box::new(position),
            Box::new(with_message),
            Box::new(naming),
            Box::new(types),
            Box::new(data),
            Box::new(packings),
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

/// An event's insert, leaving to `rows` what they hold (see [`item_op`]),
/// and when notified its `Notify` outbox row (see [`ordered_item`]).
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
            Answer::Done | Answer::Ids(_) | Answer::Flag(_) => {}
        }
    }
    Ok(outbox)
}

/// The outbox rows of a claimed notification's statement, with its event.
pub(crate) fn claimed_rows(rows: &[tokio_postgres::Row], event: &EventDraft) -> Vec<OutboxRow> {
    rows.iter().map(|row| event.claimed_row(row)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(message: bool) -> Ordered {
        let mut item = event_item(
            Some(RunId::new()),
            EventType::ToolCall,
            json!({}),
            &RowFields::default(),
        );
        if message {
            item.message = Some((Some(json!({"role": "assistant"})), None));
        }
        Ordered::Event(item)
    }

    fn message() -> Ordered {
        Ordered::Message(Some(json!({"role": "tool"})), None)
    }

    fn notify() -> Ordered {
        Ordered::Op(Op::new(NOTIFY_SQL, Vec::new()))
    }

    fn statements(ordered: Vec<Ordered>) -> Vec<&'static str> {
        ordered_ops(ThreadId::new(), RunId::new(), ordered)
            .iter()
            .map(|op| match op.sql() {
                INSERT_EVENTS_SQL => "events",
                INSERT_EVENT_SQL => "event",
                INSERT_MESSAGE_EVENT_SQL => "message+event",
                INSERT_MESSAGE_SQL => "message",
                NOTIFY_SQL => "notify",
                other => panic!("unexpected statement {other}"),
            })
            .collect()
    }

    #[test]
    fn a_stretch_of_events_and_one_message_is_one_statement() {
        assert_eq!(
            statements(vec![event(true), event(false), event(false)]),
            ["events"]
        );
        assert_eq!(statements(vec![message(), event(false)]), ["events"]);
        assert_eq!(statements(vec![event(false)]), ["event"]);
        assert_eq!(statements(vec![event(true)]), ["message+event"]);
        assert_eq!(statements(vec![message()]), ["message"]);
        assert!(statements(Vec::new()).is_empty());
    }

    #[test]
    fn a_notify_row_follows_the_event_it_reads_and_a_second_message_starts_anew() {
        // `currval` in the notify row is the last event written before it.
        assert_eq!(
            statements(vec![event(false), event(false), notify(), event(false)]),
            ["events", "notify", "event"]
        );
        assert_eq!(
            statements(vec![message(), event(false), message(), event(true)]),
            ["events", "message", "message+event"]
        );
        assert_eq!(
            statements(vec![message(), event(true), event(false)]),
            ["message", "events"]
        );
    }

    #[test]
    fn the_event_that_names_the_message_is_given_by_its_ordinal() {
        let ops = ordered_ops(
            ThreadId::new(),
            RunId::new(),
            vec![event(false), event(true), event(false)],
        );
        let params = format!("{:?}", ops[0].params);
        // with a message ($5), named by the second event ($6), three types ($7)
        assert!(
            params.contains("true, Some(2), [\"TOOL_CALL\", \"TOOL_CALL\", \"TOOL_CALL\"]"),
            "{params}"
        );
    }
}
