//! Starting a run: a queued run row, its user message, its first segment in
//! the outbox and `RUN_STARTED`, all in the transaction that decides it. A
//! turn's root run (`Store::start_run`) and a delegation's child run (a
//! commit's `Change::StartChild`) start the same way.

use std::collections::HashMap;
use std::sync::Mutex;

use agentenkit_core::conversation::Message;
use agentenkit_core::{
    EventType, Owner, QueueMessage, RunId, RunStatus, ThreadId, ToolCallId, TraceContext,
};
use serde_json::json;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::event_insert::{ordered_ops, Ordered};
use crate::format::encode::event_item;
use crate::format::event::{self as stored_event, RowFields};
use crate::outbox::{self, OutboxRow};
use crate::pipeline::{self, Answer, Expect, Op, OpenTx};
use crate::threads::not_found;
use crate::{Error, Result, Store};

/// A turn that was started: its run, and the segment to publish.
#[derive(Debug, Clone)]
pub struct StartedRun {
    pub run_id: RunId,
    pub outbox: Vec<OutboxRow>,
}

/// How many threads' agents [`ThreadAgents`] holds before it starts over.
const THREAD_AGENTS_HELD: usize = 4096;

/// The agent of each thread this process created or started a turn on: a
/// thread's agent never changes, so a turn on one of them can be written
/// whole before anything is read (`Store::start_run`). Only a hint: the
/// transaction checks it under the thread's lock. Bounded by emptying it
/// when full, which costs the threads it held one round trip at their next
/// turn.
#[derive(Default)]
pub(crate) struct ThreadAgents(Mutex<HashMap<ThreadId, String>>);

impl ThreadAgents {
    fn agent_of(&self, thread: ThreadId) -> Option<String> {
        self.0.lock().ok()?.get(&thread).cloned()
    }

    pub(crate) fn remember(&self, thread: ThreadId, agent: &str) {
        if let Ok(mut agents) = self.0.lock() {
            if agents.len() >= THREAD_AGENTS_HELD {
                agents.clear();
            }
            agents.insert(thread, agent.to_owned());
        }
    }
}

/// Locks the thread for a turn whose agent was known before it was read:
/// exactly one row, the owner's, with that agent (otherwise the row check
/// fails and the transaction with it).
const LOCK_KNOWN_THREAD_SQL: &str = "
    WITH locked AS (SELECT 1 FROM threads WHERE id = $1 AND owner = $2 AND agent = $3
                    FOR NO KEY UPDATE)
    SELECT expect_one_row((SELECT count(*) FROM locked))";

/// Fails the row check when the thread's current run is still active, or
/// turns queued behind it have not started yet (a message does not jump
/// the queue). A statement of its own after the lock, so that it reads the
/// current run as of after any wait for the lock.
const NO_ACTIVE_RUN_SQL: &str = "
    SELECT expect_one_row(CASE WHEN EXISTS (
        SELECT 1 FROM runs r
        WHERE r.id = (SELECT current_run_id FROM threads WHERE id = $1)
          AND r.status IN ('queued', 'running', 'waiting'))
        OR EXISTS (SELECT 1 FROM queued_turns q WHERE q.thread_id = $1)
        THEN 0 ELSE 1 END)";

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
    /// The caps it starts under, when any applies (`crate::shares`).
    pub slot: Option<&'a agentenkit_core::shares::Slot>,
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
    let ordered = ordered_ops(
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
    );
    // A run under a cap may be held: its row decides, and its segment
    // follows only if it was admitted.
    if let Some(slot) = run.slot {
        return Ok(Started {
            run: crate::shares::insert_run_op(run_params(run), slot),
            outbox: (crate::shares::admitted_segment_op(&segment), segment),
            ordered,
        });
    }
    Ok(Started {
        run: Op::new(INSERT_RUN_SQL, run_params(run)),
        outbox: (outbox::insert_op(&segment, 0), segment),
        ordered,
    })
}

/// `$1`..`$10` of [`INSERT_RUN_SQL`] (and of a run started under a cap).
pub(crate) fn run_params(run: &NewRun<'_>) -> Vec<crate::pipeline::Param> {
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
    ]
}

impl Store {
    /// Starts a turn: a queued run, the user's message, `RUN_STARTED` and
    /// the first segment in the outbox, in one transaction. The thread row is
    /// locked so two concurrent turns cannot both start.
    ///
    /// A thread whose agent this process knows (`ThreadAgents`) starts in
    /// one round trip: the lock, the check that no run of it is active and
    /// the writes go out together, and a failed check rolls them all back.
    /// Any other thread, or one whose check failed, starts in two: the
    /// lock and the reads, then the writes, so the error says why.
    pub async fn start_run(
        &self,
        thread: ThreadId,
        owner: &Owner,
        content: &str,
        trace: Option<&TraceContext>,
    ) -> Result<StartedRun> {
        if let Some(agent) = self.thread_agents.agent_of(thread) {
            let mut ops = vec![
                Op::new(
                    LOCK_KNOWN_THREAD_SQL,
                    vec![
                        Box::new(thread.0),
                        Box::new(owner.as_str().to_owned()),
                        Box::new(agent.clone()),
                    ],
                ),
                Op::new(NO_ACTIVE_RUN_SQL, vec![Box::new(thread.0)]),
            ];
            let (turn, run, segment) = self.turn(thread, &agent, content, trace)?;
            ops.extend(turn);
            match pipeline::transact(&self.client().await?, ops).await {
                Ok(answers) => return self.started(answers, run, segment).await,
                // Not the owner's, or a run still active: the two round
                // trips below say which.
                Err(Error::Db(e)) if pipeline::is_row_check(&e) => {}
                Err(e) => return Err(e),
            }
        }
        let tx = OpenTx::new(self.client().await?);
        // Lock the thread first, then read its current run in a separate
        // statement (sent together, run one after the other): a join under
        // FOR UPDATE would re-check only the locked row after waiting and
        // see the run as of the statement's start, letting two concurrent
        // turns both pass.
        let mut answers = tx
            .begin_with(vec![
                Op::new(
                    "SELECT agent FROM threads WHERE id = $1 AND owner = $2 FOR NO KEY UPDATE",
                    vec![Box::new(thread.0), Box::new(owner.as_str().to_owned())],
                )
                .expect(Expect::Rows),
                Op::new(
                    // The run by its key, not by a join: a join planned on
                    // empty tables may check every run against the key.
                    // With the first turn queued behind it, if any.
                    "SELECT r.id, r.status,
                            (SELECT q.run_id FROM queued_turns q WHERE q.thread_id = $1
                             ORDER BY q.position LIMIT 1)
                     FROM runs r
                     WHERE r.id = (SELECT current_run_id FROM threads WHERE id = $1)",
                    vec![Box::new(thread.0)],
                )
                .expect(Expect::Rows),
            ])
            .await?
            .into_iter();
        let locked = answers.next().map(Answer::rows).unwrap_or_default();
        let current = answers.next().map(Answer::rows).unwrap_or_default();
        let agent = match startable(thread, &locked, &current) {
            Ok(agent) => agent,
            Err(e) => {
                tx.rollback().await?;
                return Err(e);
            }
        };
        let (ops, run, segment) = self.turn(thread, &agent, content, trace)?;
        let answers = tx.commit_with(ops).await?;
        self.thread_agents.remember(thread, &agent);
        self.started(answers, run, segment).await
    }

    /// The writes of a turn on `thread`, whose agent is `agent`, after the
    /// thread's lock; its run, and the segment they put in the outbox.
    fn turn(
        &self,
        thread: ThreadId,
        agent: &str,
        content: &str,
        trace: Option<&TraceContext>,
    ) -> Result<(Vec<Op>, RunId, QueueMessage)> {
        let run = RunId::new();
        let mut turn = self.turn_of(thread, agent, run, content, trace)?;
        turn.ops.append(&mut turn.ordered);
        Ok((turn.ops, run, turn.segment))
    }

    /// The writes of turn `run` on `thread` (whose agent is `agent`) after
    /// the thread's lock: the run, the thread's current run and the first
    /// segment's outbox row, then (`ordered`, to go after every other
    /// statement of the transaction) its user message and `RUN_STARTED`.
    pub(crate) fn turn_of(
        &self,
        thread: ThreadId,
        agent: &str,
        run: RunId,
        content: &str,
        trace: Option<&TraceContext>,
    ) -> Result<TurnOps> {
        let version = self.pinned_version_of(agent);
        let slot = self.slot_of(agent);
        let started = start(&NewRun {
            id: run,
            thread,
            root: run,
            parent: None,
            name: agent,
            version: version.as_deref(),
            depth: 0,
            task: content,
            trace,
            slot: slot.as_ref(),
        })?;
        let mut ops = vec![started.run];
        ops.push(
            Op::new(
                "UPDATE threads SET current_run_id = $2 WHERE id = $1",
                vec![Box::new(thread.0), Box::new(run.0)],
            )
            .expect(Expect::One(Error::Corrupt(format!(
                "thread {thread} vanished while locked"
            )))),
        );
        let (outbox_op, segment) = started.outbox;
        ops.push(outbox_op);
        Ok(TurnOps {
            ops,
            // Last, after every row lock (see INSERT_EVENT_SQL).
            ordered: started.ordered,
            segment,
        })
    }

    /// The started turn, from its commit's answers; its segment published.
    async fn started(
        &self,
        answers: Vec<Answer>,
        run_id: RunId,
        segment: QueueMessage,
    ) -> Result<StartedRun> {
        let outbox = segment_rows(answers, segment)?;
        self.publish(&outbox).await;
        Ok(StartedRun { run_id, outbox })
    }
}

/// The statements of a turn to start (see `Store::turn_of`).
pub(crate) struct TurnOps {
    pub ops: Vec<Op>,
    /// Its user message and `RUN_STARTED`: after every other statement.
    pub ordered: Vec<Op>,
    /// Its first segment, which the outbox insert among `ops` publishes.
    pub segment: QueueMessage,
}

/// The thread's agent, when a turn may start on it: the thread is the
/// owner's (`locked`, its row), its current run, if any, has ended, and no
/// turn queued behind that run waits to start (named as the active run).
fn startable(thread: ThreadId, locked: &[Row], current: &[Row]) -> Result<String> {
    let agent = locked
        .first()
        .map(|row| row.get::<_, String>(0))
        .ok_or_else(|| not_found(thread))?;
    if let Some(row) = current.first() {
        let active = row
            .get::<_, &str>(1)
            .parse::<RunStatus>()?
            .is_active()
            .then(|| row.get::<_, Uuid>(0));
        if let Some(run) = active.or_else(|| row.get::<_, Option<Uuid>>(2)) {
            return Err(Error::RunActive {
                thread_id: thread.to_string(),
                run_id: run.to_string(),
            });
        }
    }
    Ok(agent)
}

/// The outbox row of a new run's first segment, from its commit's answers:
/// none when the run was held for a slot (`crate::shares`).
pub(crate) fn segment_rows(answers: Vec<Answer>, segment: QueueMessage) -> Result<Vec<OutboxRow>> {
    let ids = answers
        .into_iter()
        .find_map(|answer| match answer {
            Answer::Ids(ids) => Some(ids),
            _ => None,
        })
        .ok_or_else(|| Error::Corrupt("the outbox insert returned no answer".into()))?;
    Ok(ids
        .into_iter()
        .map(|id| OutboxRow {
            id,
            message: segment.clone(),
            delay_ms: 0,
            claimed: None,
            trace: None,
        })
        .collect())
}
