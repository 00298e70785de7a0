//! A message to a thread whose run is still active (docs/conversations.md):
//! queued behind the run, or the run interrupted (and, for a rollback or an
//! edit, cut away from the conversation) and a new turn started, each in
//! one transaction under the thread's lock.
//!
//! A queued turn waits in `queued_turns`; the run it waits for is marked
//! `followed`. Whoever ends that run learns it from the commit that ends it
//! (the finishing fence returns the flag, see `lease::fence`) and starts
//! the next turn in a transaction of its own ([`Store::start_queued`]); a
//! process that dies in between leaves it to the reaper
//! ([`Store::start_stranded_turns`]). An enqueue that finds the run
//! already ended starts the turn itself. The thread's lock orders all of
//! them, so turns start one at a time, in the order they were queued.

use agentenkit_core::{EventType, Owner, RunId, RunStatus, ThreadId, TraceContext};
use serde_json::json;
use uuid::Uuid;

use crate::event_insert::{claimed_rows, event_ops};
use crate::format::event::RowFields;
use crate::outbox::{returned_rows, OutboxRow};
use crate::pipeline::{Answer, Expect, Op, OpenTx};
use crate::start::TurnOps;
use crate::threads::not_found;
use crate::{Error, Result, Store};

mod queued;

/// What a message to a thread with an active run does with that run (a
/// thread with none starts its turn at once, whatever this says).
#[derive(Debug, Clone, Copy)]
pub enum Arrival<'a> {
    /// It waits for the run (and any turn queued before it) to end.
    Enqueue,
    /// It joins the run at its next model call (a run that ends first
    /// leaves it to start a turn of its own, in its place in the queue).
    Steer,
    /// The run stops where it is; what it did stays in the conversation.
    Interrupt,
    /// The run stops and leaves the conversation: refused when a call of a
    /// tool not named in `read_only` ran in its tree.
    Rollback { read_only: &'a [String] },
}

/// A message accepted for a thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostedTurn {
    /// The run that answers it (queued: the run it will start).
    pub run_id: RunId,
    /// It waits behind an active run.
    pub queued: bool,
    /// It joins the active run `run_id` at its next model call.
    pub steered: bool,
    /// The runs it stopped.
    pub interrupted: Vec<RunId>,
}

/// Marks the thread's current run as followed by a queued turn, when it is
/// still active (under the run's row lock: a finishing fence that waited
/// for it returns the flag; one that committed first leaves it unchanged).
const FOLLOW_SQL: &str = "
    UPDATE runs SET followed = true
    WHERE id = $1 AND status IN ('queued', 'running', 'waiting') RETURNING id";

/// Marks the thread's current run as steered (and followed: a steering
/// message it never takes starts a turn when it ends), when it is still
/// active; as [`FOLLOW_SQL`].
const STEER_SQL: &str = "
    UPDATE runs SET followed = true, steered = true
    WHERE id = $1 AND status IN ('queued', 'running', 'waiting') RETURNING id";

/// A new run is followed when turns wait in the queue.
const FOLLOWED_IF_QUEUED_SQL: &str = "
    UPDATE runs SET followed = EXISTS (SELECT 1 FROM queued_turns WHERE thread_id = $2)
    WHERE id = $1";

/// Cancels the active runs of the tree rooted at `$1` (`$2` why), returning
/// them (as `stop::CANCEL_TREE_SQL`).
const INTERRUPT_TREE_SQL: &str = "
    UPDATE runs SET status = 'cancelled', finished_at = now(), updated_at = now(),
           lease_owner = NULL, lease_expires_at = NULL, error = $2
    WHERE (id = $1 OR (root_run_id = $1 AND parent_run_id IS NOT NULL))
      AND status IN ('queued', 'running', 'waiting')
    RETURNING id";

/// A call of the tree rooted at `$1` whose tool may have changed something
/// elsewhere: it ran (or is running, or started work it waits on), and its
/// tool is not among `$2`, the read-only ones. Questions and delegations
/// change nothing themselves (a sub-agent's own calls are in the tree).
const SIDE_EFFECT_SQL: &str = "
    SELECT tc.name FROM runs r JOIN tool_calls tc ON tc.run_id = r.id
    WHERE (r.id = $1 OR (r.root_run_id = $1 AND r.parent_run_id IS NOT NULL))
      AND tc.kind NOT IN ('ask', 'delegate')
      AND (tc.status IN ('executed', 'failed')
           OR (tc.kind IN ('function', 'park') AND tc.status IN ('proposed', 'pending_approval')))
      AND NOT (tc.name = ANY($2))
    ORDER BY tc.created_at LIMIT 1";

/// Cuts away the trees of the thread's turns from message `$2` on.
const CUT_FROM_SQL: &str = "
    WITH turns AS (
        SELECT DISTINCT r.id FROM messages m JOIN runs r ON r.id = m.run_id
        WHERE m.thread_id = $1 AND m.id >= $2 AND r.parent_run_id IS NULL)
    UPDATE runs SET cut = true
    WHERE (id IN (SELECT id FROM turns)
           OR (root_run_id IN (SELECT id FROM turns) AND parent_run_id IS NOT NULL))
      AND NOT cut";

/// The thread as a turn on it reads it, under its lock.
pub(crate) struct Locked {
    agent: String,
    /// Its current run, while that one is active.
    active: Option<RunId>,
    /// Turns wait in its queue.
    queued: bool,
}

impl Store {
    /// A message to `thread` sent with `arrival` for its active run. With
    /// no active run the turn starts at once (behind the turns queued
    /// before it, if any).
    pub async fn post_turn(
        &self,
        thread: ThreadId,
        owner: &Owner,
        content: &str,
        arrival: Arrival<'_>,
        trace: Option<&TraceContext>,
    ) -> Result<PostedTurn> {
        let run = RunId::new();
        let (posted, outbox, behind) = crate::pipeline::retry_conflicts(|| {
            self.post_turn_once(thread, owner, run, content, arrival, trace)
        })
        .await?;
        self.publish(&outbox).await;
        if behind {
            self.start_queued(thread).await?;
        }
        Ok(posted)
    }

    /// The turn posted, what to publish, and whether it was queued behind
    /// turns that an ended run left to start.
    async fn post_turn_once(
        &self,
        thread: ThreadId,
        owner: &Owner,
        run: RunId,
        content: &str,
        arrival: Arrival<'_>,
        trace: Option<&TraceContext>,
    ) -> Result<(PostedTurn, Vec<OutboxRow>, bool)> {
        let tx = OpenTx::new(self.client().await?);
        let locked = lock(&tx, thread, Some(owner)).await?;
        let mut interrupted = Vec::new();
        let mut ops = Vec::new();
        let mut ordered = Vec::new();
        if let Some(active) = locked.active {
            match arrival {
                Arrival::Enqueue | Arrival::Steer => {
                    let steer = matches!(arrival, Arrival::Steer);
                    let mark = if steer { STEER_SQL } else { FOLLOW_SQL };
                    let mark = Op::new(mark, vec![Box::new(active.0)]).expect(Expect::Rows);
                    let still_active = !tx.exchange_one(mark).await?.is_empty();
                    if still_active || locked.queued {
                        let steers = (steer && still_active).then_some(active);
                        let outbox = self
                            .queue_in(&tx, thread, run, steers, content, trace)
                            .await?;
                        let posted = PostedTurn {
                            run_id: steers.unwrap_or(run),
                            queued: steers.is_none(),
                            steered: steers.is_some(),
                            interrupted,
                        };
                        // The run ended while this waited for the lock, its
                        // queue not yet started: start it from here.
                        return Ok((posted, outbox, !still_active));
                    }
                }
                Arrival::Interrupt => {
                    interrupted = self
                        .interrupt(&tx, thread, active, ("interrupted", None), &mut ordered)
                        .await?;
                }
                Arrival::Rollback { read_only } => {
                    let stop = ("rolled back", Some(read_only));
                    interrupted = self
                        .interrupt(&tx, thread, active, stop, &mut ordered)
                        .await?;
                    ops.push(cut_tree(active));
                    ordered.extend(
                        self.cut_event(thread, json!({ "cutRunId": active, "runId": run })),
                    );
                }
            }
        } else if locked.queued {
            // Earlier turns wait for an ended run: this one goes behind them.
            let outbox = self
                .queue_in(&tx, thread, run, None, content, trace)
                .await?;
            let posted = PostedTurn {
                run_id: run,
                queued: true,
                steered: false,
                interrupted,
            };
            return Ok((posted, outbox, true));
        }
        let outbox = self
            .start_in(&tx, thread, &locked, run, content, trace, ops, ordered)
            .await?;
        let posted = PostedTurn {
            run_id: run,
            queued: false,
            steered: false,
            interrupted,
        };
        Ok((posted, outbox, false))
    }

    /// Edits a turn: the thread is cut back to before user message
    /// `message` (an active run interrupted first, the turns from that one
    /// on cut away) and a new turn starts from `content`.
    pub async fn edit_turn(
        &self,
        thread: ThreadId,
        owner: &Owner,
        message: i64,
        content: &str,
        trace: Option<&TraceContext>,
    ) -> Result<PostedTurn> {
        let run = RunId::new();
        let (posted, outbox) = crate::pipeline::retry_conflicts(|| {
            self.edit_turn_once(thread, owner, run, message, content, trace)
        })
        .await?;
        self.publish(&outbox).await;
        Ok(posted)
    }

    async fn edit_turn_once(
        &self,
        thread: ThreadId,
        owner: &Owner,
        run: RunId,
        message: i64,
        content: &str,
        trace: Option<&TraceContext>,
    ) -> Result<(PostedTurn, Vec<OutboxRow>)> {
        let tx = OpenTx::new(self.client().await?);
        let locked = lock(&tx, thread, Some(owner)).await?;
        let edited = Op::new(
            "SELECT m.body_whole->>'role' = 'user' AND NOT m.body_whole ? 'steered'
                    AND r.parent_run_id IS NULL, r.cut
             FROM messages_whole m JOIN runs r ON r.id = m.run_id
             WHERE m.thread_id = $1 AND m.id = $2",
            vec![Box::new(thread.0), Box::new(message)],
        )
        .expect(Expect::Rows);
        let edited = tx.exchange_one(edited).await?;
        let refusal = match edited.first() {
            None => Some(Error::NotFound {
                what: "message",
                id: message.to_string(),
            }),
            // A turn already cut away is no longer in the conversation.
            Some(row) if row.get::<_, bool>(1) => Some(Error::NotFound {
                what: "message",
                id: message.to_string(),
            }),
            Some(row) if !row.get::<_, bool>(0) => Some(Error::NotATurn {
                message_id: message,
            }),
            Some(_) => None,
        };
        if let Some(refusal) = refusal {
            tx.rollback().await?;
            return Err(refusal);
        }
        let mut ordered = Vec::new();
        let interrupted = match locked.active {
            Some(active) => {
                self.interrupt(&tx, thread, active, ("edited", None), &mut ordered)
                    .await?
            }
            None => Vec::new(),
        };
        let cut = Op::new(CUT_FROM_SQL, vec![Box::new(thread.0), Box::new(message)]);
        ordered.extend(self.cut_event(thread, json!({ "fromMessageId": message, "runId": run })));
        let outbox = self
            .start_in(
                &tx,
                thread,
                &locked,
                run,
                content,
                trace,
                vec![cut],
                ordered,
            )
            .await?;
        let posted = PostedTurn {
            run_id: run,
            queued: false,
            steered: false,
            interrupted,
        };
        Ok((posted, outbox))
    }

    /// `CONVERSATION_CUT`: turns left the conversation (clients holding its
    /// messages read it again).
    fn cut_event(&self, thread: ThreadId, data: serde_json::Value) -> Vec<Op> {
        event_ops(
            thread,
            None,
            EventType::ConversationCut,
            data,
            &RowFields::default(),
            self.notify_rule(),
        )
    }

    /// Stops the active run tree rooted at `active` (`why` is its runs'
    /// error and their `RUN_CANCELLED` reason), cancelling its open
    /// requests; their events go to `ordered`. With `read_only` (a
    /// rollback), refused when a tool not among them ran in the tree.
    /// Returns the runs stopped.
    async fn interrupt(
        &self,
        tx: &OpenTx,
        thread: ThreadId,
        active: RunId,
        (why, read_only): (&'static str, Option<&[String]>),
        ordered: &mut Vec<Op>,
    ) -> Result<Vec<RunId>> {
        // Each pass sees what committed before it: a child started by a
        // park that committed while this waited is stopped too.
        let mut stopped: Vec<Uuid> = Vec::new();
        for _ in 0..16 {
            let pass = Op::new(
                INTERRUPT_TREE_SQL,
                vec![Box::new(active.0), Box::new(why.to_owned())],
            )
            .expect(Expect::Rows);
            let more = tx.exchange_one(pass).await?;
            if more.is_empty() {
                break;
            }
            stopped.extend(more.iter().map(|r| r.get::<_, Uuid>(0)));
        }
        // A rollback's check: once the tree's rows are locked (a call its
        // worker was committing is seen, or never committed nor run), and
        // before its calls are cancelled.
        if let Some(read_only) = read_only {
            refuse_side_effects(tx, active, read_only).await?;
        }
        tx.exchange_one(crate::calls::cancel_open(&stopped)).await?;
        for run in &stopped {
            ordered.extend(event_ops(
                thread,
                Some(RunId(*run)),
                EventType::RunCancelled,
                json!({ "runId": run, "reason": why }),
                &RowFields::default(),
                self.notify_rule(),
            ));
        }
        Ok(stopped.into_iter().map(RunId).collect())
    }

    /// Starts turn `run` in `tx` after `ops` (row writes) and before
    /// `ordered` (events), and commits; the outbox rows to publish.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start_in(
        &self,
        tx: &OpenTx,
        thread: ThreadId,
        locked: &Locked,
        run: RunId,
        content: &str,
        trace: Option<&TraceContext>,
        mut ops: Vec<Op>,
        mut ordered: Vec<Op>,
    ) -> Result<Vec<OutboxRow>> {
        let TurnOps {
            ops: turn,
            ordered: turn_ordered,
            segment,
        } = self.turn_of(thread, &locked.agent, run, content, trace)?;
        ops.extend(turn);
        if locked.queued {
            ops.push(Op::new(
                FOLLOWED_IF_QUEUED_SQL,
                vec![Box::new(run.0), Box::new(thread.0)],
            ));
        }
        // Last, after every row lock (see INSERT_EVENT_SQL).
        ordered.extend(turn_ordered);
        ops.append(&mut ordered);
        let answers = tx.commit_with(ops).await?;
        self.thread_agents.remember(thread, &locked.agent);
        let mut outbox = Vec::new();
        for answer in answers {
            match answer {
                Answer::Ids(ids) => outbox.extend(ids.into_iter().map(|id| OutboxRow {
                    id,
                    message: segment.clone(),
                    delay_ms: 0,
                    claimed: None,
                    trace: None,
                })),
                Answer::Rows(rows) => outbox.extend(returned_rows(&rows)?),
                Answer::Claimed(rows, event) => outbox.extend(claimed_rows(&rows, &event)),
                Answer::Done | Answer::Flag(_) => {}
            }
        }
        Ok(outbox)
    }
}

/// Locks the thread (the owner's, when `owner` is named) for a turn and
/// reads what it needs: its agent, its active run, whether turns wait.
pub(crate) async fn lock(tx: &OpenTx, thread: ThreadId, owner: Option<&Owner>) -> Result<Locked> {
    // The lock first, then the reads in statements of their own (sent
    // together, run one after the other), so they see the thread as of
    // after any wait for the lock (see `Store::start_run`).
    let mut answers = tx
        .begin_with(vec![
            Op::new(
                "SELECT agent FROM threads
                 WHERE id = $1 AND ($2::text IS NULL OR owner = $2) FOR NO KEY UPDATE",
                vec![
                    Box::new(thread.0),
                    Box::new(owner.map(|o| o.as_str().to_owned())),
                ],
            )
            .expect(Expect::Rows),
            Op::new(
                "SELECT r.id, r.status FROM runs r
                 WHERE r.id = (SELECT current_run_id FROM threads WHERE id = $1)",
                vec![Box::new(thread.0)],
            )
            .expect(Expect::Rows),
            Op::new(
                "SELECT 1 FROM queued_turns WHERE thread_id = $1 LIMIT 1",
                vec![Box::new(thread.0)],
            )
            .expect(Expect::Rows),
        ])
        .await?
        .into_iter()
        .map(Answer::rows);
    let locked = answers.next().unwrap_or_default();
    let current = answers.next().unwrap_or_default();
    let queued = !answers.next().unwrap_or_default().is_empty();
    let Some(agent) = locked.first().map(|row| row.get::<_, String>(0)) else {
        tx.rollback().await?;
        return Err(not_found(thread));
    };
    let mut active = None;
    if let Some(row) = current.first() {
        if row.get::<_, &str>(1).parse::<RunStatus>()?.is_active() {
            active = Some(RunId(row.get(0)));
        }
    }
    Ok(Locked {
        agent,
        active,
        queued,
    })
}

/// Refuses a rollback of the run tree rooted at `active` (rolling `tx`
/// back) when a call of a tool not among `read_only` ran in it.
async fn refuse_side_effects(tx: &OpenTx, active: RunId, read_only: &[String]) -> Result<()> {
    let check = Op::new(
        SIDE_EFFECT_SQL,
        vec![Box::new(active.0), Box::new(read_only.to_vec())],
    )
    .expect(Expect::Rows);
    let Some(row) = tx.exchange_one(check).await?.into_iter().next() else {
        return Ok(());
    };
    tx.rollback().await?;
    Err(Error::SideEffects {
        run_id: active.to_string(),
        tool: row.get(0),
    })
}

/// Cuts the tree rooted at `root` away from the conversation.
fn cut_tree(root: RunId) -> Op {
    Op::new(
        "UPDATE runs SET cut = true
         WHERE id = $1 OR (root_run_id = $1 AND parent_run_id IS NOT NULL)",
        vec![Box::new(root.0)],
    )
}
