//! Forking a thread: a new thread of the same owner and agent whose
//! conversation is this one's up to a message (the fork point, see
//! `agentenkit_core::fork`), in one transaction.
//!
//! The turns before the fork point's turn are copied as ended runs with
//! their messages. The fork point's turn is copied as a run whose journal
//! is a prefix of the original's (a reply's `tool:<run>:` name renamed to
//! the new run): kept whole when the turn has ended there, otherwise
//! queued, so that the fork's worker replays the prefix (nothing that ran
//! runs again) and goes on from the fork point, asking again whatever was
//! open there. The original thread is only read: under its lock, and its
//! run's, so that no commit of that run falls between the reads.

use agentenkit_core::fork::{fork_point, ForkEntry, ForkPoint, TurnMessage};
use agentenkit_core::{EventType, Owner, QueueMessage, RunId, RunStatus, ThreadId, TraceContext};
use serde_json::{json, Value};
use tokio_postgres::Row;
use uuid::Uuid;

use super::queued::enqueue_op;
use super::Locked;
use crate::event_insert::event_ops;
use crate::format::event::{run_row, RowFields};
use crate::outbox::{self, OutboxRow};
use crate::pipeline::{Answer, Expect, Op, OpenTx};
use crate::start::segment_rows;
use crate::threads::not_found;
use crate::views::ThreadView;
use crate::{Error, Result, Store};

/// The message a fork is made at (`$2`, or when null the conversation's
/// last), with its run, whether that run is a turn's and whether an edit
/// or a rollback cut it away.
const FORK_AT_SQL: &str = "
    SELECT m.id, m.run_id, r.parent_run_id IS NULL, r.cut
    FROM messages m
    CROSS JOIN LATERAL (SELECT parent_run_id, cut FROM runs WHERE runs.id = m.run_id OFFSET 0) r
    WHERE m.thread_id = $1
      AND CASE WHEN $2::bigint IS NULL THEN r.parent_run_id IS NULL AND NOT r.cut
               ELSE m.id = $2 END
    ORDER BY m.id DESC LIMIT 1";

/// The turns of thread `$1` before message `$2` still in its conversation,
/// oldest first.
const EARLIER_TURNS_SQL: &str = "
    SELECT t.run_id FROM (
        SELECT run_id, min(id) AS first FROM messages
        WHERE thread_id = $1 AND id < $2 GROUP BY run_id) t
    WHERE (SELECT r.parent_run_id IS NULL AND NOT r.cut FROM runs r WHERE r.id = t.run_id)
    ORDER BY t.first";

/// The journal of the fork point's turn as the fork point reads it: each
/// entry's position and name, a question round's row, whether a reply
/// runs its call's tool (see `ForkEntry`), and the version a switch was
/// from.
const JOURNAL_SQL: &str = "
    SELECT position, name,
           CASE WHEN name LIKE 'asked:%' THEN value->>'row' END,
           name LIKE 'tool:%' AND coalesce((value->>'approved')::boolean, false)
               AND NOT value ? 'answers',
           CASE WHEN name LIKE 'version:%' THEN value->>'from' END
    FROM journal WHERE run_id = $1 ORDER BY position";

/// The messages of run `$2` of thread `$1`, oldest first, with what each
/// is to the fork point (a model's message stored with its entry has no
/// body; the intake asks with a message and a result of its own).
const TURN_MESSAGES_SQL: &str = "
    SELECT id, CASE WHEN body IS NULL THEN 'assistant'
                    WHEN body ? 'steered' THEN 'steered'
                    WHEN body->'toolCalls'->0->>'id' = 'intake'
                         OR body->>'toolCallId' = 'intake' THEN 'intake'
                    ELSE body->>'role' END
    FROM messages WHERE thread_id = $1 AND run_id = $2 ORDER BY id";

/// Copies the call rows of the ended runs `$1` as rows of runs `$2` of
/// thread `$3`, their arguments whole (their runs' journals stay behind):
/// an intake answered there is not asked again in the fork.
const COPY_TURN_CALLS_SQL: &str = "
    INSERT INTO tool_calls (run_id, id, thread_id, name, arguments, kind, tool_type, status,
                            reason, expires_at, park_request, payload, result, defaulted,
                            answered_at, answered_by, created_at, decision, approvals)
    SELECT n.new, tc.id, $3, tc.name, coalesce(tc.arguments_whole, 'null'::jsonb), tc.kind,
           tc.tool_type, tc.status, tc.reason, tc.expires_at, tc.park_request, tc.payload,
           tc.result, tc.defaulted, tc.answered_at, tc.answered_by, tc.created_at,
           tc.decision, tc.approvals
    FROM unnest($1::uuid[], $2::uuid[]) AS n(src, new)
    JOIN tool_calls_whole tc ON tc.run_id = n.src";

/// Copies the journals of the ended runs `$1` to runs `$2` (a reply's
/// name renamed to the copy's): what they spent counts toward the fork's
/// thread budget, and their calls' arguments stay where their rows say.
const COPY_TURN_JOURNALS_SQL: &str = "
    INSERT INTO journal (run_id, position, name, value, packed)
    SELECT n.new, j.position, replace(j.name, n.src::text, n.new::text), j.value, j.packed
    FROM unnest($1::uuid[], $2::uuid[]) AS n(src, new) JOIN journal j ON j.run_id = n.src";

/// Copies the ended runs `$1` as runs `$2` of thread `$3`.
const COPY_TURNS_SQL: &str = "
    INSERT INTO runs (id, thread_id, root_run_id, name, depth, status, segment_seq,
                      agent_version, output, error, created_at, finished_at)
    SELECT n.new, $3, n.new, r.name, 0, r.status, r.segment_seq, r.agent_version,
           r.output, r.error, r.created_at, r.finished_at
    FROM unnest($1::uuid[], $2::uuid[]) AS n(src, new) JOIN runs r ON r.id = n.src";

/// Copies run `$2` as run `$1` of thread `$3` on agent version `$8`: with
/// its status, output and end when `$4` (it ended at the fork point),
/// otherwise queued, steered (and followed) when `$5`.
const COPY_FORKED_RUN_SQL: &str = "
    INSERT INTO runs (id, thread_id, root_run_id, name, depth, status, segment_seq,
                      agent_version, output, error, created_at, finished_at,
                      steered, followed, traceparent, tracestate)
    SELECT $1, $3, $1, name, 0, CASE WHEN $4 THEN status ELSE 'queued' END, 1,
           $8, CASE WHEN $4 THEN output END, CASE WHEN $4 THEN error END,
           created_at, CASE WHEN $4 THEN finished_at END, $5, $5, $6, $7
    FROM runs WHERE id = $2";

/// Copies the journal entries of run `$2` before position `$3` to run
/// `$1`, a reply's name (`$4`, `tool:<$2>:`) renamed to the new run's
/// (`$5`), and a question's frame naming the new run.
const COPY_JOURNAL_SQL: &str = "
    INSERT INTO journal (run_id, position, name, value, packed)
    SELECT $1, position,
           CASE WHEN left(name, length($4)) = $4 THEN $5 || substr(name, length($4) + 1)
                ELSE name END,
           -- a question's frame names the run to answer it against
           CASE WHEN name LIKE 'stream:elicitation:%' AND value ? 'runId'
                THEN jsonb_set(value, '{runId}', to_jsonb($1::uuid::text)) ELSE value END,
           packed
    FROM journal WHERE run_id = $2 AND position < $3";

/// Copies the call rows of run `$2` to run `$1` of thread `$3`: those named
/// in `$4` (all when null), those not in `$5` (the settled ones; all when
/// null) as newly proposed, with no answer (a job's request kept: the
/// tool that returned it does not run again).
const COPY_CALLS_SQL: &str = "
    INSERT INTO tool_calls (run_id, id, thread_id, name, arguments, arguments_position, kind,
                            tool_type, status, reason, expires_at, park_request, payload,
                            result, defaulted, answered_at, answered_by, created_at,
                            decision, approvals)
    SELECT $1, tc.id, $3, tc.name, tc.arguments, tc.arguments_position, tc.kind, tc.tool_type,
           CASE WHEN s.settled THEN tc.status ELSE 'proposed' END,
           CASE WHEN s.settled THEN tc.reason END, CASE WHEN s.settled THEN tc.expires_at END,
           tc.park_request, CASE WHEN s.settled THEN tc.payload END,
           CASE WHEN s.settled THEN tc.result END, CASE WHEN s.settled THEN tc.defaulted END,
           CASE WHEN s.settled THEN tc.answered_at END,
           CASE WHEN s.settled THEN tc.answered_by END, tc.created_at,
           CASE WHEN s.settled THEN tc.decision END, CASE WHEN s.settled THEN tc.approvals END
    FROM tool_calls tc
    CROSS JOIN LATERAL (SELECT $5::text[] IS NULL OR tc.id = ANY($5) AS settled) s
    WHERE tc.run_id = $2 AND ($4::text[] IS NULL OR tc.id = ANY($4))";

/// Copies the messages of thread `$2` up to `$7` of runs `$5` (as runs
/// `$6`) and of run `$3` (as run `$4`) to thread `$1`, whole, in order.
/// The fork is not visible before this commits, so no reader pages its
/// messages while their ids are handed out.
const COPY_MESSAGES_SQL: &str = "
    INSERT INTO messages (thread_id, run_id, body, created_at)
    SELECT $1, CASE WHEN m.run_id = $3 THEN $4 ELSE n.new END, m.body_whole, m.created_at
    FROM messages_whole m LEFT JOIN unnest($5::uuid[], $6::uuid[]) AS n(src, new)
         ON n.src = m.run_id
    WHERE m.thread_id = $2 AND m.id <= $7 AND (m.run_id = $3 OR n.new IS NOT NULL)
    ORDER BY m.id";

/// A thread forked: the new thread's view (naming its origin), and the run
/// that goes on in it, if one does.
#[derive(Debug, Clone)]
pub struct Forked {
    pub thread: ThreadView,
    pub run_id: Option<RunId>,
}

/// The fork point's turn, as read under its run's lock.
struct ForkedTurn {
    /// The original run.
    run: RunId,
    name: String,
    version: Option<String>,
    ended: bool,
    /// The position of the first journal entry the fork leaves out.
    end_position: i32,
    point: ForkPoint,
    /// Its first message: the turns before it are copied whole.
    first_message: i64,
}

/// The run of a fork that goes on from the fork point, and the message
/// that joins it.
struct GoingOn<'a> {
    fork: ThreadId,
    turn: &'a ForkedTurn,
    run: RunId,
    content: Option<&'a str>,
    trace: Option<&'a TraceContext>,
}

impl Store {
    /// Forks `source` at message `at` (the conversation's last when
    /// `None`), going on with `content` when given: in the run forked,
    /// which it joins at its next model call, or else in a turn of its own.
    pub async fn fork_thread(
        &self,
        source: ThreadId,
        owner: &Owner,
        at: Option<i64>,
        content: Option<&str>,
        trace: Option<&TraceContext>,
    ) -> Result<Forked> {
        let fork = ThreadId::new();
        let (run_id, outbox) = crate::pipeline::retry_conflicts(|| {
            self.fork_once(source, owner, fork, (at, content, trace))
        })
        .await?;
        self.publish(&outbox).await;
        let thread = self.get_thread(fork, owner).await?;
        Ok(Forked { thread, run_id })
    }

    async fn fork_once(
        &self,
        source: ThreadId,
        owner: &Owner,
        fork: ThreadId,
        (at, content, trace): (Option<i64>, Option<&str>, Option<&TraceContext>),
    ) -> Result<(Option<RunId>, Vec<OutboxRow>)> {
        let tx = OpenTx::new(self.client().await?);
        let (agent, metadata, turn) = read_source(&tx, source, owner, at).await?;
        let mut ops = Vec::new();
        let forked_run = match &turn {
            Some(turn) => {
                // A message joins the turn that goes on (a trace, the run).
                let joins = (content.is_some() && !turn.ended, trace);
                Some(copy_turns(&tx, (source, fork), turn, joins, &mut ops).await?)
            }
            None => None,
        };
        let at_message = turn.as_ref().map(|t| t.point.last_message);
        ops.insert(
            0,
            Op::new(
                "INSERT INTO threads (id, owner, agent, metadata, forked_from, forked_at_message,
                                      current_run_id)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                vec![
                    Box::new(fork.0),
                    Box::new(owner.as_str().to_owned()),
                    Box::new(agent.clone()),
                    Box::new(metadata),
                    Box::new(source.0),
                    Box::new(at_message),
                    Box::new(forked_run.map(|r| r.0)),
                ],
            ),
        );
        let going_on = turn.as_ref().zip(forked_run).filter(|(t, _)| !t.ended);
        let mut forked = json!({ "forkedFrom": source, "atMessageId": at_message });
        if let Some((_, run)) = going_on {
            forked["runId"] = json!(run);
        }
        let ordered = self.event(fork, None, EventType::ThreadForked, forked);
        if let Some((turn, run)) = going_on {
            let going_on = GoingOn {
                fork,
                turn,
                run,
                content,
                trace,
            };
            return self.go_on(&tx, going_on, &agent, ops, ordered).await;
        }
        // Nothing goes on from the fork point: a message starts a turn.
        let Some(content) = content else {
            ops.extend(ordered);
            tx.commit_with(ops).await?;
            return Ok((None, Vec::new()));
        };
        let locked = Locked {
            agent,
            active: None,
            queued: false,
        };
        let run = RunId::new();
        let outbox = self
            .start_in(&tx, fork, &locked, run, content, trace, ops, ordered)
            .await?;
        Ok((Some(run), outbox))
    }

    /// Commits the fork with its run `run` going on from the fork point:
    /// its first segment, `RUN_STARTED`, and the message that joins it.
    async fn go_on(
        &self,
        tx: &OpenTx,
        going_on: GoingOn<'_>,
        agent: &str,
        mut ops: Vec<Op>,
        mut ordered: Vec<Op>,
    ) -> Result<(Option<RunId>, Vec<OutboxRow>)> {
        let GoingOn {
            fork,
            turn,
            run,
            content,
            trace,
        } = going_on;
        let segment = QueueMessage::Segment {
            run_id: run,
            seq: 1,
        };
        // A fork's run counts toward its agent's and owner's caps like any.
        match self.slot_of(agent) {
            Some(slot) => {
                ops.push(crate::shares::place_under_cap_op(run, fork, agent, &slot));
                ops.push(crate::shares::admitted_segment_op(&segment));
            }
            None => ops.push(outbox::insert_op(&segment, 0)),
        }
        let started = json!({
            "runId": run, "runName": turn.name, "depth": 0, "forkedFromRunId": turn.run,
        });
        let rows = RowFields {
            run: run_row(&turn.name, 0, turn.version.as_deref()),
            ..RowFields::default()
        };
        ordered.extend(event_ops(
            fork,
            Some(run),
            EventType::RunStarted,
            started,
            &rows,
            self.notify_rule(),
        ));
        if let Some(content) = content {
            // It joins the forked run at its next model call.
            ops.push(enqueue_op(fork, RunId::new(), Some(run), content, trace));
            let queued = json!({ "runId": run, "content": content, "steers": true });
            ordered.extend(self.event(fork, None, EventType::MessageQueued, queued));
        }
        ops.append(&mut ordered);
        let answers = tx.commit_with(ops).await?;
        self.thread_agents.remember(fork, agent);
        Ok((Some(run), segment_rows(answers, segment)?))
    }

    /// An event of the fork with no run row to refer to.
    fn event(&self, fork: ThreadId, run: Option<RunId>, kind: EventType, data: Value) -> Vec<Op> {
        event_ops(
            fork,
            run,
            kind,
            data,
            &RowFields::default(),
            self.notify_rule(),
        )
    }
}

/// The writes that copy the conversation of `source` up to the fork point
/// to `fork`; returns the run the fork point's turn is copied as (steered,
/// under the trace, when a message joins it).
async fn copy_turns(
    tx: &OpenTx,
    (source, fork): (ThreadId, ThreadId),
    turn: &ForkedTurn,
    (steered, trace): (bool, Option<&TraceContext>),
    ops: &mut Vec<Op>,
) -> Result<RunId> {
    let earlier = Op::new(
        EARLIER_TURNS_SQL,
        vec![Box::new(source.0), Box::new(turn.first_message)],
    )
    .expect(Expect::Rows);
    let earlier: Vec<Uuid> = tx
        .exchange_one(earlier)
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let copies: Vec<Uuid> = earlier.iter().map(|_| RunId::new().0).collect();
    let run = RunId::new();
    if !earlier.is_empty() {
        ops.push(Op::new(
            COPY_TURN_JOURNALS_SQL,
            vec![Box::new(earlier.clone()), Box::new(copies.clone())],
        ));
        for sql in [COPY_TURNS_SQL, COPY_TURN_CALLS_SQL] {
            ops.push(Op::new(
                sql,
                vec![
                    Box::new(earlier.clone()),
                    Box::new(copies.clone()),
                    Box::new(fork.0),
                ],
            ));
        }
    }
    ops.push(Op::new(
        COPY_FORKED_RUN_SQL,
        vec![
            Box::new(run.0),
            Box::new(turn.run.0),
            Box::new(fork.0),
            Box::new(turn.ended),
            Box::new(steered),
            Box::new(trace.map(|t| t.traceparent.clone())),
            Box::new(trace.and_then(|t| t.tracestate.clone())),
            Box::new(turn.version.clone()),
        ],
    ));
    ops.push(Op::new(
        COPY_JOURNAL_SQL,
        vec![
            Box::new(run.0),
            Box::new(turn.run.0),
            Box::new(turn.end_position),
            Box::new(format!("tool:{}:", turn.run)),
            Box::new(format!("tool:{run}:")),
        ],
    ));
    ops.push(calls_op(turn, run, fork));
    ops.push(Op::new(
        COPY_MESSAGES_SQL,
        vec![
            Box::new(fork.0),
            Box::new(source.0),
            Box::new(turn.run.0),
            Box::new(run.0),
            Box::new(earlier),
            Box::new(copies),
            Box::new(turn.point.last_message),
        ],
    ));
    Ok(run)
}

/// The copy of the fork point's turn's call rows to run `run` of `fork`.
/// An ended turn's rows are copied as they are; the rows of a turn that
/// goes on are those its kept entries made, the open ones asked again.
fn calls_op(turn: &ForkedTurn, run: RunId, fork: ThreadId) -> Op {
    let (named, settled): (Option<Vec<String>>, Option<Vec<String>>) = if turn.ended {
        (None, None)
    } else {
        let named = turn.point.rows.iter().map(|(id, _)| id.clone()).collect();
        let settled = turn
            .point
            .rows
            .iter()
            .filter(|(_, settled)| *settled)
            .map(|(id, _)| id.clone())
            .collect();
        (Some(named), Some(settled))
    };
    Op::new(
        COPY_CALLS_SQL,
        vec![
            Box::new(run.0),
            Box::new(turn.run.0),
            Box::new(fork.0),
            Box::new(named),
            Box::new(settled),
        ],
    )
}

/// Locks and reads the thread to fork (the owner's): its agent, its
/// metadata, and the fork point's turn (none for a thread with no turn);
/// a refusal rolls `tx` back.
async fn read_source(
    tx: &OpenTx,
    source: ThreadId,
    owner: &Owner,
    at: Option<i64>,
) -> Result<(String, Value, Option<ForkedTurn>)> {
    let mut answers = tx
        .begin_with(vec![
            Op::new(
                "SELECT agent, metadata FROM threads WHERE id = $1 AND owner = $2 FOR SHARE",
                vec![Box::new(source.0), Box::new(owner.as_str().to_owned())],
            )
            .expect(Expect::Rows),
            Op::new(FORK_AT_SQL, vec![Box::new(source.0), Box::new(at)]).expect(Expect::Rows),
        ])
        .await?
        .into_iter()
        .map(Answer::rows);
    let thread = answers.next().unwrap_or_default();
    let at_row = answers.next().unwrap_or_default();
    let refused = match (thread.first(), at, at_row.first()) {
        (None, ..) => Some(not_found(source)),
        (Some(_), _, Some(row)) => refusal(row),
        (Some(_), Some(message), None) => Some(Error::NotFound {
            what: "message",
            id: message.to_string(),
        }),
        // A thread with no turn yet: so is its fork.
        (Some(_), None, None) => None,
    };
    if let Some(refused) = refused {
        tx.rollback().await?;
        return Err(refused);
    }
    let thread = thread.first().expect("refused above when missing");
    let turn = match at_row.first() {
        Some(row) => Some(read_turn(tx, source, row, at.is_none()).await?),
        None => None,
    };
    Ok((thread.get(0), thread.get(1), turn))
}

/// Why a fork at the message of `row` (as [`FORK_AT_SQL`] reads it) is
/// refused, if it is.
fn refusal(row: &Row) -> Option<Error> {
    let id: i64 = row.get(0);
    if row.get::<_, bool>(3) {
        // Cut away by an edit: no longer in the conversation.
        return Some(Error::NotFound {
            what: "message",
            id: id.to_string(),
        });
    }
    (!row.get::<_, bool>(2)).then_some(Error::SubAgentMessage { message_id: id })
}

/// Reads the fork point's turn under its run's lock: the run, its journal's
/// names and its messages' kinds, and where the fork cuts them.
async fn read_turn(tx: &OpenTx, source: ThreadId, at: &Row, to_end: bool) -> Result<ForkedTurn> {
    let (at, run) = (at.get::<_, i64>(0), RunId(at.get(1)));
    let locked = Op::new(
        "SELECT status, name, agent_version FROM runs WHERE id = $1 FOR NO KEY UPDATE",
        vec![Box::new(run.0)],
    )
    .expect(Expect::Rows);
    let locked = tx.exchange_one(locked).await?;
    let row = locked
        .first()
        .ok_or_else(|| Error::Corrupt(format!("run {run} of a message vanished")))?;
    let status: RunStatus = row.get::<_, &str>(0).parse()?;
    let (name, version): (String, Option<String>) = (row.get(1), row.get(2));
    let journal = Op::new(JOURNAL_SQL, vec![Box::new(run.0)]).expect(Expect::Rows);
    let journal = tx.exchange_one(journal).await?;
    let messages =
        Op::new(TURN_MESSAGES_SQL, vec![Box::new(source.0), Box::new(run.0)]).expect(Expect::Rows);
    let messages: Vec<(i64, TurnMessage)> = tx
        .exchange_one(messages)
        .await?
        .iter()
        .map(|row| (row.get(0), turn_message(row.get(1))))
        .collect();
    let entries: Vec<ForkEntry> = journal
        .iter()
        .map(|row| ForkEntry {
            name: row.get(1),
            row: row.get(2),
            runs_tool: row.get(3),
        })
        .collect();
    // A fork of the whole conversation is at its last message as of under
    // the run's lock (a commit may have added one since it was read).
    let at = match messages.last() {
        Some((last, _)) if to_end => *last,
        _ => at,
    };
    let point = fork_point(run, &entries, &messages, at);
    let end_position = journal
        .get(point.entries)
        .map_or(i32::MAX, |row| row.get::<_, i32>(0));
    // The version the run had at the fork point: a switch journaled after
    // it says what it switched from.
    let version = journal[point.entries.min(journal.len())..]
        .iter()
        .find(|row| row.get::<_, String>(1).starts_with("version:"))
        .map_or(version, |row| row.get(4));
    Ok(ForkedTurn {
        run,
        name,
        version,
        ended: point.whole && !status.is_active(),
        end_position,
        first_message: messages.first().map_or(at, |(id, _)| *id),
        point,
    })
}

fn turn_message(role: Option<&str>) -> TurnMessage {
    match role {
        Some("user") => TurnMessage::User,
        Some("steered") => TurnMessage::Steered,
        Some("intake") => TurnMessage::Intake,
        Some("tool") => TurnMessage::Tool,
        _ => TurnMessage::Assistant,
    }
}
