//! Threads: creation and reads (a turn starts in `start.rs`).

use agentenkit_core::canonical::{arguments_hash, json_len};
use agentenkit_core::{EventType, Owner, RunId, RunStatus, ThreadId, ThreadStatus};
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::bounded::{read_bounded, ReadBound, ReadPage};
use crate::format::event::{self as stored_event, RowFields};
use crate::views::{EventView, InboxPosition, MessageView, PendingInput, Spending, ThreadView};
use crate::{Error, Result, Store};

/// Open requests `GET /threads/{id}` shows; more are paged from
/// `GET /threads/{id}/pending-inputs`.
pub const THREAD_PENDING_INPUTS: usize = 100;

/// The order open requests are listed in: oldest first, a total order
/// (calls made together share `created_at`), so an inbox page can go on
/// after its last request's [`InboxPosition`].
const INBOX_ORDER: &str = "tc.created_at, tc.run_id, tc.id";

/// The condition that keeps a statement on `tool_calls tc` to the threads
/// of the owner in `param`: the owner's threads as an array of keys, each
/// then looked up in the index of open requests by thread (as a join
/// planned on empty tables it may start from every open request of the
/// database).
pub(crate) fn of_owner(param: &str) -> String {
    format!("tc.thread_id = ANY (ARRAY(SELECT id FROM threads WHERE owner = {param}))")
}

/// Open requests: pending rows of a run in the thread's current run tree
/// that is still active. Rows of earlier runs are never open.
pub(crate) const PENDING_INPUTS: &str = "
    SELECT tc.id, tc.run_id, tc.thread_id, tc.name, tc.arguments_whole, tc.kind, tc.reason,
           r.name, r.depth, tc.expires_at, tc.created_at,
           jsonb_array_length(tc.approvals), r.agent_version
    FROM tool_calls_whole tc
    JOIN threads t ON t.id = tc.thread_id
    -- each call's run by its key: OFFSET 0 keeps the lookup from being
    -- planned as a join, which on tables analyzed while empty may start
    -- from every run of the database
    CROSS JOIN LATERAL (SELECT name, depth, agent_version, root_run_id, status
                        FROM runs WHERE runs.id = tc.run_id OFFSET 0) r
    WHERE tc.status = 'pending_approval'
      AND r.root_run_id = t.current_run_id
      AND r.status IN ('queued', 'running', 'waiting')";

impl Store {
    pub async fn create_thread(
        &self,
        owner: &Owner,
        agent: &str,
        metadata: &Value,
    ) -> Result<ThreadView> {
        let client = self.client().await?;
        let id = ThreadId::new();
        let stmt = client
            .prepare_cached(
                "INSERT INTO threads (id, owner, agent, metadata) VALUES ($1, $2, $3, $4) RETURNING created_at",
            )
            .await?;
        let row = client
            .query_one(&stmt, &[&id.0, &owner.as_str(), &agent, metadata])
            .await?;
        self.thread_agents.remember(id, agent);
        Ok(ThreadView {
            id,
            agent: agent.to_owned(),
            status: ThreadStatus::Idle,
            current_run_id: None,
            metadata: metadata.clone(),
            pending_inputs: vec![],
            more_pending_inputs: false,
            created_at: row.get(0),
            last_event_id: 0,
            queued_messages: Vec::new(),
            forked_from: None,
            forked_at_message_id: None,
            spent: Spending::default(),
        })
    }

    /// The thread's agent (the owner's thread; 404 otherwise).
    pub async fn thread_agent(&self, thread: ThreadId, owner: &Owner) -> Result<String> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached("SELECT agent FROM threads WHERE id = $1 AND owner = $2")
            .await?;
        Ok(client
            .query_opt(&stmt, &[&thread.0, &owner.as_str()])
            .await?
            .ok_or_else(|| not_found(thread))?
            .get(0))
    }

    /// The thread with its derived status and open requests.
    pub async fn get_thread(&self, thread: ThreadId, owner: &Owner) -> Result<ThreadView> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT t.agent, t.current_run_id, r.status, t.metadata, t.created_at,
                        (SELECT coalesce(max(e.id), 0) FROM events e WHERE e.thread_id = t.id),
                        (SELECT jsonb_agg(jsonb_build_object('runId', q.run_id, 'steers', q.steers,
                                                             'content', q.content,
                                                             'createdAt', q.created_at)
                                          ORDER BY q.position)
                         FROM queued_turns q WHERE q.thread_id = t.id),
                        t.forked_from, t.forked_at_message
                 FROM threads t LEFT JOIN runs r ON r.id = t.current_run_id
                 WHERE t.id = $1 AND t.owner = $2",
            )
            .await?;
        let row = client
            .query_opt(&stmt, &[&thread.0, &owner.as_str()])
            .await?
            .ok_or_else(|| not_found(thread))?;
        let run_status: Option<RunStatus> =
            row.get::<_, Option<&str>>(2).map(str::parse).transpose()?;
        // The first page only: the rest come from
        // `GET /threads/{id}/pending-inputs`.
        let stmt = client
            .prepare_cached(&format!(
                "{PENDING_INPUTS} AND tc.thread_id = $1 ORDER BY {INBOX_ORDER} LIMIT $2"
            ))
            .await?;
        let mut pending_inputs = client
            .query(&stmt, &[&thread.0, &(THREAD_PENDING_INPUTS as i64 + 1)])
            .await?
            .iter()
            .map(pending_input)
            .collect::<Result<Vec<_>>>()?;
        let more_pending_inputs = pending_inputs.len() > THREAD_PENDING_INPUTS;
        pending_inputs.truncate(THREAD_PENDING_INPUTS);
        Ok(ThreadView {
            id: thread,
            agent: row.get(0),
            status: ThreadStatus::derive(run_status, pending_inputs.len()),
            more_pending_inputs,
            current_run_id: row.get::<_, Option<Uuid>>(1).map(RunId),
            metadata: row.get(3),
            pending_inputs,
            created_at: row.get(4),
            last_event_id: row.get(5),
            queued_messages: row
                .get::<_, Option<Value>>(6)
                .map(serde_json::from_value)
                .transpose()?
                .unwrap_or_default(),
            forked_from: row.get::<_, Option<Uuid>>(7).map(ThreadId),
            forked_at_message_id: row.get(8),
            // Read by `thread_spending`, for the route that shows it (a
            // scan of the thread's journals).
            spent: Spending::default(),
        })
    }

    /// What the runs of `thread` spent, all of them (`GET /threads/{id}`):
    /// the journals' model and tool-call entries, as a thread budget
    /// counts them.
    pub async fn thread_spending(&self, thread: ThreadId) -> Result<Spending> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(crate::engine::THREAD_SPENT_SQL)
            .await?;
        // The nil id: no run is left out.
        let spent = client.query_one(&stmt, &[&thread.0, &Uuid::nil()]).await?;
        let count = |i| spent.get::<_, i64>(i).max(0) as u64;
        Ok(Spending {
            model_calls: count(0),
            tool_calls: count(1),
            input_tokens: count(2),
            output_tokens: count(3),
        })
    }

    /// The owner's open requests (across their threads) after `after`, in
    /// inbox order, as many as `bound` holds.
    pub async fn inbox(
        &self,
        owner: &Owner,
        after: Option<&InboxPosition>,
        bound: ReadBound,
    ) -> Result<ReadPage<PendingInput>> {
        let client = self.client().await?;
        self.pending_page(client, &of_owner("$1"), &owner.as_str(), after, bound)
            .await
    }

    /// A thread's open requests after `after`, in inbox order, as many as
    /// `bound` holds (`GET /threads/{id}` shows the first page).
    pub async fn thread_pending_inputs(
        &self,
        thread: ThreadId,
        owner: &Owner,
        after: Option<&InboxPosition>,
        bound: ReadBound,
    ) -> Result<ReadPage<PendingInput>> {
        let client = self.client().await?;
        self.check_owner(&client, thread, owner).await?;
        self.pending_page(client, "tc.thread_id = $1", &thread.0, after, bound)
            .await
    }

    /// Open requests where `scope` (on `$1`, `scoped_by`) holds, after
    /// `after`, in inbox order.
    async fn pending_page(
        &self,
        mut client: deadpool_postgres::Object,
        scope: &str,
        scoped_by: &(dyn tokio_postgres::types::ToSql + Sync),
        after: Option<&InboxPosition>,
        bound: ReadBound,
    ) -> Result<ReadPage<PendingInput>> {
        read_bounded(
            &mut client,
            &format!(
                "{PENDING_INPUTS} AND {scope}
                   AND ($2::timestamptz IS NULL
                        OR (tc.created_at, tc.run_id, tc.id) > ($2, $3::uuid, $4::text))
                 ORDER BY {INBOX_ORDER} LIMIT $5"
            ),
            &[
                scoped_by,
                &after.map(|p| p.created_at),
                &after.map(|p| p.run_id.0),
                &after.map(|p| p.tool_call_id.as_str()),
                &bound.rows,
            ],
            bound,
            sized_pending_input,
        )
        .await
    }

    /// The conversation, tool calls and results included, oldest first:
    /// the messages with an id above `after`, at most `limit`.
    pub async fn list_messages(
        &self,
        thread: ThreadId,
        owner: &Owner,
        after: i64,
        bound: ReadBound,
    ) -> Result<ReadPage<MessageView>> {
        let mut client = self.client().await?;
        self.check_owner(&client, thread, owner).await?;
        read_bounded(
            &mut client,
            "SELECT m.id, m.run_id, m.body_whole, m.created_at
             FROM messages_whole m WHERE m.thread_id = $1 AND m.id > $2
               -- a turn cut away by an edit or a rollback is no longer
               -- in the conversation (its events still are)
               AND NOT (SELECT r.cut FROM runs r WHERE r.id = m.run_id)
             ORDER BY m.id LIMIT $3",
            &[&thread.0, &after, &bound.rows],
            bound,
            |r| {
                let body: Value = r.get(2);
                let size = json_len(&body);
                Ok((
                    MessageView {
                        id: r.get(0),
                        run_id: RunId(r.get(1)),
                        body,
                        created_at: r.get(3),
                    },
                    size,
                ))
            },
        )
        .await
    }

    /// Events with an id above `after`, oldest first, as many as `bound`
    /// holds.
    pub async fn list_events(
        &self,
        thread: ThreadId,
        owner: &Owner,
        after: i64,
        bound: ReadBound,
    ) -> Result<ReadPage<EventView>> {
        let mut client = self.client().await?;
        self.check_owner(&client, thread, owner).await?;
        read_bounded(
            &mut client,
            concat!(
                event_select!(),
                " WHERE e.thread_id = $1 AND e.id > $2 ORDER BY e.id LIMIT $3"
            ),
            &[&thread.0, &after, &bound.rows],
            bound,
            |r| {
                let view = event_view(r)?;
                let size = json_len(&view.data);
                Ok((view, size))
            },
        )
        .await
    }

    /// Event `id`, whole, and in the same statement (one transaction) the
    /// claim of its delivery to each target `wanted` names for its type
    /// (`(target, event type)` pairs): what [`Store::claim_deliveries`]
    /// claims, without reading the event first. `None` when the event is
    /// gone (nothing is claimed).
    pub async fn event_with_claim(
        &self,
        id: i64,
        wanted: &[(String, String)],
        claim: std::time::Duration,
    ) -> Result<Option<(EventView, Vec<crate::DeliveryAttempt>)>> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(concat!(
                "WITH claimed AS (
                    INSERT INTO notification_deliveries (delivery_id, target, next_at, attempts)
                    SELECT $1::bigint::text, w.target, now() + $4 * interval '1 millisecond', 1
                    FROM unnest($2::text[], $3::text[]) AS w(target, type)
                    -- one lookup by the key, never a join the planner may
                    -- turn into a scan of every event
                    WHERE w.type = (SELECT ev.type FROM events ev WHERE ev.id = $1) ",
                crate::notifications::claim_on_conflict!(),
                "),
                 event AS (",
                event_select!(),
                " WHERE e.id = $1)
                 SELECT event.*, (SELECT coalesce(jsonb_agg(jsonb_build_array(target, attempts)), '[]')
                                  FROM claimed)
                 FROM event"
            ))
            .await?;
        let targets: Vec<&str> = wanted.iter().map(|(target, _)| target.as_str()).collect();
        let types: Vec<&str> = wanted.iter().map(|(_, kind)| kind.as_str()).collect();
        let Some(row) = client
            .query_opt(&stmt, &[&id, &targets, &types, &(claim.as_millis() as f64)])
            .await?
        else {
            return Ok(None);
        };
        let claimed: Vec<(String, i32)> = serde_json::from_value(row.get(16))?;
        let attempts = claimed
            .into_iter()
            .map(|(target, attempt)| crate::DeliveryAttempt {
                target,
                attempt: attempt.max(1) as u32,
            })
            .collect();
        Ok(Some((event_view(&row)?, attempts)))
    }

    async fn check_owner(
        &self,
        client: &deadpool_postgres::Object,
        thread: ThreadId,
        owner: &Owner,
    ) -> Result<()> {
        let stmt = client
            .prepare_cached("SELECT 1 FROM threads WHERE id = $1 AND owner = $2")
            .await?;
        client
            .query_opt(&stmt, &[&thread.0, &owner.as_str()])
            .await?
            .map(|_| ())
            .ok_or_else(|| not_found(thread))
    }
}

/// The events read whole: what the stored data left out is put back (see
/// format::event): arguments and fields from the call row, a message from
/// its row, fields from the run row. Read by [`event_view`].
macro_rules! event_select {
    () => {
        "SELECT e.id, e.run_id, e.type, e.data, e.created_at, e.packed,
                CASE WHEN e.packed & 2 <> 0 THEN tc.arguments_whole END, m.body_whole,
                tc.name, tc.kind, tc.reason, tc.expires_at, r.name, r.depth, e.thread_id,
                r.agent_version
         FROM events e
         LEFT JOIN tool_calls_whole tc
           ON e.packed & 10 <> 0 AND tc.run_id = e.run_id AND tc.id = e.data->>'toolCallId'
         LEFT JOIN messages_whole m
           ON e.packed & 4 <> 0 AND m.thread_id = e.thread_id AND m.id = e.message_id
         LEFT JOIN runs r ON e.packed & 112 <> 0 AND r.id = e.run_id"
    };
}
use event_select;

/// An event row of [`event_select`], whole.
fn event_view(r: &Row) -> Result<EventView> {
    let id: i64 = r.get(0);
    let run_id = r.get::<_, Option<Uuid>>(1).map(RunId);
    let event_type: EventType = r.get::<_, &str>(2).parse()?;
    let call = match (r.get::<_, Option<&str>>(8), r.get::<_, Option<&str>>(9)) {
        (Some(name), Some(kind)) => stored_event::call_row(name, kind, r.get(10), r.get(11)),
        _ => Default::default(),
    };
    let run = match (r.get::<_, Option<&str>>(12), r.get::<_, Option<i32>>(13)) {
        (Some(name), Some(depth)) => stored_event::run_row(name, depth, r.get(15)),
        _ => Default::default(),
    };
    let referenced = stored_event::Referenced {
        call_arguments: r.get(6),
        message_body: r.get(7),
        rows: RowFields { call, run },
    };
    let unpacked = stored_event::unpack(event_type, run_id, r.get(5), r.get(3), referenced);
    for problem in &unpacked.problems {
        // Served without the part, rather than ending every read of the
        // thread's later events on this one.
        tracing::error!(event_id = id, error = %problem, "event data served incomplete");
    }
    let data = with_arguments_hash(event_type, unpacked.data);
    Ok(EventView {
        id,
        thread_id: ThreadId(r.get(14)),
        run_id,
        event_type,
        data,
        created_at: r.get(4),
    })
}

pub(crate) fn not_found(thread: ThreadId) -> Error {
    Error::NotFound {
        what: "thread",
        id: thread.to_string(),
    }
}

/// `INPUT_REQUIRED` names the `argumentsHash` of its arguments (computed on
/// read: it is theirs, and storing it would repeat them).
pub(crate) fn with_arguments_hash(event_type: EventType, mut data: Value) -> Value {
    if event_type == EventType::InputRequired {
        if let Some(hash) = data.get("arguments").map(arguments_hash) {
            data["argumentsHash"] = Value::String(hash);
        }
    }
    data
}

/// A pending input with the size of its arguments (what makes it large).
fn sized_pending_input(row: &Row) -> Result<(PendingInput, usize)> {
    let input = pending_input(row)?;
    let size = json_len(&input.arguments);
    Ok((input, size))
}

pub(crate) fn pending_input(row: &Row) -> Result<PendingInput> {
    let kind = row.get::<_, &str>(5).parse()?;
    let expires_at: Option<DateTime<Utc>> = row.get(9);
    Ok(PendingInput {
        tool_call_id: row.get(0),
        run_id: RunId(row.get(1)),
        thread_id: ThreadId(row.get(2)),
        tool_name: row.get(3),
        arguments_hash: arguments_hash(&row.get::<_, Value>(4)),
        arguments: row.get(4),
        kind,
        reason: row.get(6),
        run_name: row.get(7),
        depth: row.get(8),
        expires_at,
        created_at: row.get(10),
        // For a question set the request is the set itself, so a client
        // knows how many questions there are before it renders the form.
        request: (kind == agentenkit_core::ToolKind::Ask).then(|| row.get::<_, Value>(4)),
        approvals_given: row.get::<_, Option<i32>>(11).map(|n| n as u32),
        approvals_required: None,
        agent_version: row.get(12),
    })
}
