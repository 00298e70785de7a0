//! Starting a run: a queued run row, its user message, its first segment in
//! the outbox and `RUN_STARTED`, all in the transaction that decides it. A
//! turn's root run (`Store::start_run`) and a delegation's child run (a
//! commit's `Change::StartChild`) start the same way.

use agentenkit_core::conversation::Message;
use agentenkit_core::{EventType, QueueMessage, RunId, ThreadId, ToolCallId, TraceContext};
use serde_json::json;

use crate::event_insert::{ordered_ops, Ordered};
use crate::format::event::{self as stored_event, RowFields};
use crate::format::event_item::event_item;
use crate::outbox;
use crate::pipeline::Op;
use crate::Result;

const INSERT_RUN_SQL: &str = "
    INSERT INTO runs (id, thread_id, root_run_id, parent_run_id, parent_tool_call_id,
                      name, depth, status, segment_seq, agent_version, traceparent, tracestate)
    VALUES ($1, $2, $3, $4, $5, $6, $7, 'queued', 1, $8, $9, $10)";

/// The trace a run row keeps, read from `row`'s columns `first`
/// (`traceparent`) and `first + 1` (`tracestate`); `None` for a run
/// started untraced (or a value no longer well formed).
pub(crate) fn trace_in(row: &tokio_postgres::Row, first: usize) -> Option<TraceContext> {
    let parent: Option<&str> = row.get(first);
    TraceContext::from_headers(parent?, row.get(first + 1)).ok()
}

/// A run to start.
pub(crate) struct NewRun<'a> {
    pub id: RunId,
    pub thread: ThreadId,
    /// The root of its run tree: its own id for a turn's run.
    pub root: RunId,
    /// The run and the delegation call it answers, for a child run.
    pub parent: Option<(RunId, &'a ToolCallId)>,
    /// The agent's name (a sub-agent's for a child run).
    pub name: &'a str,
    /// The version of that agent the run is pinned to, when it has one.
    pub version: Option<&'a str>,
    pub depth: i32,
    /// Its user message: what the turn said, or the delegated task.
    pub task: &'a str,
    /// The span it starts under, when traces are exported: its trace.
    pub trace: Option<&'a TraceContext>,
}

/// The statements that start a run, in the order they go.
pub(crate) struct Started {
    /// The run row.
    pub run: Op,
    /// The first segment's outbox row ([`crate::pipeline::Expect::Ids`]),
    /// and the segment it publishes.
    pub outbox: (Op, QueueMessage),
    /// Its user message, then `RUN_STARTED` (one statement): after every
    /// other statement of the transaction (see `INSERT_EVENT_SQL`).
    pub ordered: Vec<Op>,
}

pub(crate) fn start(run: &NewRun<'_>) -> Result<Started> {
    let user = serde_json::to_value(Message::User {
        content: run.task.to_owned(),
    })?;
    let mut started = json!({ "runId": run.id, "runName": run.name, "depth": run.depth });
    if let Some(version) = run.version {
        started["agentVersion"] = json!(version);
    }
    if let Some((parent, call)) = run.parent {
        started["parentRunId"] = json!(parent);
        started["parentToolCallId"] = json!(call);
    }
    let segment = QueueMessage::Segment {
        run_id: run.id,
        seq: 1,
    };
    Ok(Started {
        run: Op::new(
            INSERT_RUN_SQL,
            vec![
                Box::new(run.id.0),
                Box::new(run.thread.0),
                Box::new(run.root.0),
                Box::new(run.parent.map(|(parent, _)| parent.0)),
                Box::new(run.parent.map(|(_, call)| call.as_str().to_owned())),
                Box::new(run.name.to_owned()),
                Box::new(run.depth),
                Box::new(run.version.map(str::to_owned)),
                Box::new(run.trace.map(|t| t.traceparent.clone())),
                Box::new(run.trace.and_then(|t| t.tracestate.clone())),
            ],
        ),
        outbox: (outbox::insert_op(&segment, 0), segment),
        ordered: ordered_ops(
            run.thread,
            run.id,
            vec![
                Ordered::Message(Some(user), None),
                Ordered::Event(event_item(
                    Some(run.id),
                    EventType::RunStarted,
                    started,
                    &RowFields {
                        run: stored_event::run_row(run.name, run.depth, run.version),
                        ..RowFields::default()
                    },
                )),
            ],
        ),
    })
}
