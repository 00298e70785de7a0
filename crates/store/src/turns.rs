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

mod edit;
mod fork;
mod once;
mod queued;

pub use fork::Forked;
pub use once::Once;

/// What a message to a thread with an active run does with that run (a
/// thread with none starts its turn at once, whatever this says).
#[derive(Debug, Clone, Copy)]
pub enum Arrival<'a> {
    /// It is refused (`RunActive`), as it is while turns wait to start.
    Reject,
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

/// A message accepted for a thread (as an `Idempotency-Key` keeps it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PostedTurn {
    /// The run that answers it (queued: the run it will start).
    pub run_id: RunId,
    /// It waits behind an active run.
    #[serde(default)]
    pub queued: bool,
    /// It joins the active run `run_id` at its next model call.
    #[serde(default)]
    pub steered: bool,
    /// The runs it stopped.
    #[serde(default)]
    pub interrupted: Vec<RunId>,
    /// This is what a first message with the same `Idempotency-Key`
    /// became: nothing was done now.
    #[serde(skip)]
    pub replayed: bool,
}

impl PostedTurn {
    /// A turn started now as run `run`, after stopping `interrupted`.
    fn started(run: RunId, interrupted: Vec<RunId>) -> PostedTurn {
        PostedTurn {
            run_id: run,
            queued: false,
            steered: false,
            interrupted,
            replayed: false,
        }
    }

    /// A turn queued to start run `run`.
    fn queued(run: RunId) -> PostedTurn {
        PostedTurn {
            run_id: run,
            queued: true,
            steered: false,
            interrupted: Vec::new(),
            replayed: false,
        }
    }
}

/// What a person sent: the text, the trace it came under, and its
/// `Idempotency-Key`, if any.
#[derive(Debug, Clone, Copy)]
pub struct Sent<'a> {
    pub content: &'a str,
    pub trace: Option<&'a TraceContext>,
    pub once: Option<Once<'a>>,
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
        let sent = Sent {
            content,
            trace,
            once: None,
        };
        self.send_turn(thread, owner, sent, arrival).await
    }

    /// [`Store::post_turn`] of what was `sent`: with an `Idempotency-Key`,
    /// a second message with the key gets what the first became.
    pub async fn send_turn(
        &self,
        thread: ThreadId,
        owner: &Owner,
        sent: Sent<'_>,
        arrival: Arrival<'_>,
    ) -> Result<PostedTurn> {
        let run = RunId::new();
        let (posted, outbox, behind) = crate::pipeline::retry_conflicts(|| {
            self.post_turn_once(thread, owner, run, sent, arrival)
        })
        .await?;
        self.publish(&outbox).await;
        if matches!(arrival, Arrival::Interrupt | Arrival::Rollback { .. }) {
            // The interrupted tree's slots are free (its new turn took one).
            self.admit_after_stopping(owner.as_str(), thread).await;
        }
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
        sent: Sent<'_>,
        arrival: Arrival<'_>,
    ) -> Result<(PostedTurn, Vec<OutboxRow>, bool)> {
        let tx = OpenTx::new(self.client().await?);
        let locked = lock(&tx, thread, Some(owner)).await?;
        if let Some(kept) = before_turn(&tx, thread, owner, &locked, &sent, arrival).await? {
            return Ok((kept, Vec::new(), false));
        }
        let mut interrupted = Vec::new();
        let mut ops = Vec::new();
        let mut ordered = Vec::new();
        if let Some(active) = locked.active {
            match arrival {
                Arrival::Reject => unreachable!("refused by before_turn"),
                Arrival::Enqueue | Arrival::Steer => {
                    let behind = (owner, &locked, active, run);
                    if let Some(queued) = self
                        .queue_behind(&tx, thread, behind, sent, arrival)
                        .await?
                    {
                        return Ok(queued);
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
            let posted = PostedTurn::queued(run);
            let keep = keep(owner, &sent, &posted)?;
            let outbox = self.queue_in(&tx, thread, (run, None), sent, keep).await?;
            return Ok((posted, outbox, true));
        }
        let posted = PostedTurn::started(run, interrupted);
        ops.extend(keep(owner, &sent, &posted)?);
        let (content, trace) = (sent.content, sent.trace);
        let outbox = self
            .start_in(&tx, thread, &locked, run, content, trace, ops, ordered)
            .await?;
        Ok((posted, outbox, false))
    }

    /// A message queued behind the active run, or steering it: the posted
    /// turn, what to publish, and whether the run ended meanwhile, leaving
    /// its queue to start from here. `None` when the run ended and no turn
    /// waits: this one starts now.
    async fn queue_behind(
        &self,
        tx: &OpenTx,
        thread: ThreadId,
        (owner, locked, active, run): (&Owner, &Locked, RunId, RunId),
        sent: Sent<'_>,
        arrival: Arrival<'_>,
    ) -> Result<Option<(PostedTurn, Vec<OutboxRow>, bool)>> {
        let steer = matches!(arrival, Arrival::Steer);
        let mark = if steer { STEER_SQL } else { FOLLOW_SQL };
        let mark = Op::new(mark, vec![Box::new(active.0)]).expect(Expect::Rows);
        let still_active = !tx.exchange_one(mark).await?.is_empty();
        if !still_active && !locked.queued {
            return Ok(None);
        }
        let steers = (steer && still_active).then_some(active);
        let posted = match steers {
            Some(active) => PostedTurn {
                run_id: active,
                queued: false,
                steered: true,
                interrupted: Vec::new(),
                replayed: false,
            },
            None => PostedTurn::queued(run),
        };
        let keep = keep(owner, &sent, &posted)?;
        let outbox = self.queue_in(tx, thread, (run, steers), sent, keep).await?;
        Ok(Some((posted, outbox, !still_active)))
    }
}

/// What comes before a message's turn under the thread's lock: what a
/// first message with its `Idempotency-Key` became (`tx` committed), or a
/// `reject`'s refusal (`tx` rolled back) while a run is active or turns
/// wait to start.
async fn before_turn(
    tx: &OpenTx,
    thread: ThreadId,
    owner: &Owner,
    locked: &Locked,
    sent: &Sent<'_>,
    arrival: Arrival<'_>,
) -> Result<Option<PostedTurn>> {
    if let Some(kept) = once::replay(tx, owner, sent).await? {
        return Ok(Some(kept));
    }
    if matches!(arrival, Arrival::Reject) && (locked.active.is_some() || locked.queued) {
        tx.rollback().await?;
        return Err(Error::RunActive {
            thread_id: thread.to_string(),
            run_id: locked.active.map(|r| r.to_string()).unwrap_or_default(),
        });
    }
    Ok(None)
}

/// The record of `sent`'s `Idempotency-Key` with what it became, if it
/// came with one.
fn keep(owner: &Owner, sent: &Sent<'_>, posted: &PostedTurn) -> Result<Option<Op>> {
    sent.once
        .as_ref()
        .map(|once| once::keep_op(owner, once, posted))
        .transpose()
}

impl Store {
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
    pub(crate) async fn interrupt(
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
