//! The one write path of a worker: a step's [`Change`]s applied in one
//! transaction, fenced by the worker's lease, sent as one pipeline in one
//! round trip (the fence and the row checks abort it in the database, see
//! `pipeline.rs`).
//!
//! A commit's statements go in this order: the fence (which also ends the
//! segment when the run waits or finishes), each change's statements in the
//! order the step made them, then the messages and events (in the order the
//! step made them), after every row lock (see `INSERT_EVENT_SQL`).

use agentenkit_core::{CallEvent, QueueMessage, RunId};

use crate::calls::{insert_tool_call, NewCall};
use crate::change::Change;
use crate::event_insert::{claimed_rows, ordered_item, ordered_ops, Ordered};
use crate::format::encode::{event_item, known_rows, MessageWithEvent, StoredJournal};
use crate::lease::{fence, Lease};
use crate::outbox::returned_rows;
use crate::outbox::{self, OutboxRow};
use crate::pipeline::{self, Answer, Expect, Op};
use crate::start::{start, NewRun};
use crate::wait::{finish_delegation_ops, ParkedAtOnce};
use crate::{Error, Result, Store};

/// Takes the messages at places `$2` of the queue out of it, all of those
/// that steer run `$1` or none (the check fails the transaction), and
/// clears the run's flag unless others came since (the statement's
/// snapshot still holds the rows it deletes).
const TAKE_STEERING_SQL: &str = "
    WITH taken AS (DELETE FROM queued_turns WHERE steers = $1 AND position = ANY($2) RETURNING 1),
    cleared AS (
        UPDATE runs SET steered = EXISTS (
            SELECT 1 FROM queued_turns WHERE steers = $1 AND position <> ALL($2))
        WHERE id = $1 RETURNING 1)
    SELECT expect_one_row(CASE WHEN (SELECT count(*) FROM taken) = cardinality($2)
                                AND (SELECT count(*) FROM cleared) = 1 THEN 1 ELSE 0 END)";

/// What a commit tells the worker that made it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Committed {
    /// Messages wait to join the run at its next model call (`false` once
    /// the run waits or ends).
    pub steered: bool,
}

impl Store {
    /// Applies `changes` in one transaction if `lease` still holds the run,
    /// extending the lease, and publishes the outbox rows it wrote (which
    /// it returns). `Error::LeaseLost` when the lease ran out or was taken.
    pub async fn commit(&self, lease: &Lease, changes: &[Change]) -> Result<Committed> {
        let (outbox, flag) =
            crate::pipeline::retry_conflicts(|| self.commit_once(lease, changes)).await?;
        self.publish(&outbox).await;
        // The fence's flag: `followed` when the run finished, `steered`
        // while it goes on.
        let finished = changes
            .iter()
            .any(|c| matches!(c, Change::FinishRun { .. }));
        if flag && finished {
            // The run ended with a message queued behind it: its turn
            // starts now (or, if this process dies first, by the reaper).
            if let Err(e) = self.start_queued(lease.thread_id).await {
                tracing::warn!(thread_id = %lease.thread_id, error = %e,
                    "a queued turn did not start after its run ended; the reaper will start it");
            }
        }
        Ok(Committed {
            steered: flag && !finished,
        })
    }

    /// The outbox rows written, and the fence's flag.
    async fn commit_once(
        &self,
        lease: &Lease,
        changes: &[Change],
    ) -> Result<(Vec<OutboxRow>, bool)> {
        let (ops, publishes) =
            Statements::of(lease, changes, self.notify_rule(), self.run_limits())?.in_order(lease);
        let answers = pipeline::transact(&self.client().await?, ops).await?;
        let flag = matches!(answers.first(), Some(Answer::Flag(true)));
        Ok((written_outbox(answers, publishes)?, flag))
    }
}

/// A commit's statements as they are planned, and the message each outbox
/// insert among them publishes.
struct Statements {
    ops: Vec<Op>,
    /// Beside each of `ops`: what its outbox row publishes, and after how
    /// long.
    publishes: Vec<Option<Publish>>,
    /// The message and event inserts, which take the thread's event lock:
    /// last, after every row lock.
    ordered: Vec<Ordered>,
}

impl Statements {
    fn of(
        lease: &Lease,
        changes: &[Change],
        notified: crate::event_insert::NotifyRule<'_>,
        limits: Option<&agentenkit_core::shares::RunLimits>,
    ) -> Result<Statements> {
        // A new journal entry is progress: the attempts of the step that
        // made it start over.
        let progress = changes.iter().any(|c| matches!(c, Change::Journal { .. }));
        // A change that ends the segment (the run waits or finishes) is the
        // fence itself: one update of the run row, not two.
        let end = changes.iter().find(|c| {
            matches!(
                c,
                Change::WaitRun | Change::FinishRun { .. } | Change::Defer { .. }
            )
        });
        let mut statements = Statements {
            ops: Vec::new(),
            publishes: Vec::new(),
            ordered: Vec::new(),
        };
        statements.push(fence(lease, progress, end));
        if let Some(Change::Defer { delay_ms }) = end {
            // The next segment, due when the provider said; the row's key
            // names the seq the fence just gave the run.
            statements.push(crate::lease::deferred_segment_op(lease.run_id, *delay_ms));
        }
        let mut commit = Commit {
            lease,
            changes,
            journal: StoredJournal::of(changes)?,
            parked_at_once: ParkedAtOnce::find(changes),
            message_with_event: MessageWithEvent::find(changes)?,
            notified,
            limits,
        };
        for change in changes {
            if end.is_some_and(|end| std::ptr::eq(end, change)) {
                continue;
            }
            statements.plan(&mut commit, change)?;
        }
        // A run under a cap that stops running (it waits or ended) sets
        // its slot free: its owner's held runs that now fit are admitted,
        // after every other statement that may start or stop a run of it.
        let stops = matches!(end, Some(Change::WaitRun | Change::FinishRun { .. }));
        if let (true, Some(owner)) = (stops, &lease.slot_owner) {
            statements.push(crate::shares::admit_held_op(owner));
        }
        Ok(statements)
    }

    fn push(&mut self, op: Op) {
        self.ops.push(op);
        self.publishes.push(None);
    }

    /// An outbox insert, and what it publishes once committed.
    fn push_outbox(&mut self, op: Op, publish: Publish) {
        self.ops.push(op);
        self.publishes.push(Some(publish));
    }

    /// The statements of one change.
    fn plan(&mut self, commit: &mut Commit<'_>, change: &Change) -> Result<()> {
        let run = commit.lease.run_id;
        let thread = commit.lease.thread_id;
        if commit.parked_at_once.folds(change) || commit.message_with_event.folds(change) {
            return Ok(());
        }
        if let Some(op) = commit
            .parked_at_once
            .insert_op(run, thread, change, &commit.journal)
        {
            self.push(op);
            return Ok(());
        }
        match change {
            Change::Event { event_type, data } => {
                let folded = commit
                    .message_with_event
                    .event_item(run, change, &commit.journal);
                let item = folded.unwrap_or_else(|| {
                    let rows = known_rows(
                        &commit.lease.run_name,
                        commit.lease.depth,
                        commit.changes,
                        data,
                    );
                    event_item(Some(run), *event_type, data.clone(), &rows)
                });
                self.ordered
                    .extend(ordered_item(thread, Some(run), item, data, commit.notified));
            }
            Change::StartChild {
                call_id,
                child_run_id,
                name,
                version,
                task,
                trace,
            } => self.start_child(
                commit.lease,
                commit.limits,
                *child_run_id,
                call_id,
                (name, version.as_deref()),
                (task, trace.as_ref()),
            )?,
            Change::Message(message) => {
                let (body, body_position) =
                    commit.journal.message_body(serde_json::to_value(message)?);
                self.ordered.push(Ordered::Message(body, body_position));
            }
            Change::SteeredMessage { content } => {
                let body =
                    serde_json::json!({ "role": "user", "content": content, "steered": true });
                self.ordered.push(Ordered::Message(Some(body), None));
            }
            Change::Outbox { message, delay_ms } => self.outbox_message(message, *delay_ms),
            Change::FinishDelegation {
                parent_run_id,
                call_id,
                status,
                result,
            } => {
                for op in finish_delegation_ops(*parent_run_id, call_id, *status, result)? {
                    self.push(op);
                }
            }
            // Every entry of the commit in one insert, where its first is.
            Change::Journal { .. } => {
                if let Some(op) = commit.journal.insert_op(run) {
                    self.push(op);
                }
            }
            row_change => {
                let op = row_op(run, thread, row_change, &commit.journal)?;
                self.push(op);
            }
        }
        Ok(())
    }

    /// A message to publish once the commit is durable.
    fn outbox_message(&mut self, message: &QueueMessage, delay_ms: u64) {
        let publish = Publish {
            message: message.clone(),
            delay_ms,
            trace: None,
        };
        self.push_outbox(outbox::insert_op(message, delay_ms), publish);
    }

    /// A delegation's child run starts in its parent's commit.
    fn start_child(
        &mut self,
        lease: &Lease,
        limits: Option<&agentenkit_core::shares::RunLimits>,
        child: RunId,
        call_id: &agentenkit_core::ToolCallId,
        (name, version): (&str, Option<&str>),
        (task, trace): (&str, Option<&agentenkit_core::TraceContext>),
    ) -> Result<()> {
        let started = start(&NewRun {
            id: child,
            thread: lease.thread_id,
            root: lease.root_run_id,
            parent: Some((lease.run_id, call_id)),
            name,
            version,
            depth: lease.depth + 1,
            task,
            trace,
            slot: limits.and_then(|l| l.slot_of(name)).as_ref(),
        })?;
        self.push(started.run);
        let (op, segment) = started.outbox;
        // The child's first segment continues the delegating span.
        let publish = Publish {
            message: segment,
            delay_ms: 0,
            trace: trace.cloned(),
        };
        self.push_outbox(op, publish);
        self.ordered
            .extend(started.ordered.into_iter().map(Ordered::Op));
        Ok(())
    }

    /// Every statement, messages and events last, and what each outbox
    /// insert publishes.
    fn in_order(mut self, lease: &Lease) -> (Vec<Op>, Vec<Option<Publish>>) {
        let ordered = ordered_ops(lease.thread_id, lease.run_id, self.ordered);
        // The ordered statements' outbox rows (notifications) come back as
        // rows, read from their answers.
        self.publishes.extend(ordered.iter().map(|_| None));
        self.ops.extend(ordered);
        (self.ops, self.publishes)
    }
}

/// What a commit's changes are planned against: its lease, all its
/// changes, and what some of them leave to others (see `format::encode`
/// and `wait`).
struct Commit<'a> {
    lease: &'a Lease,
    changes: &'a [Change],
    journal: StoredJournal<'a>,
    parked_at_once: ParkedAtOnce<'a>,
    message_with_event: MessageWithEvent<'a>,
    /// The events whose `Notify` outbox row goes with them.
    notified: crate::event_insert::NotifyRule<'a>,
    /// The caps a child run starts under (`None`: none is set).
    limits: Option<&'a agentenkit_core::shares::RunLimits>,
}

/// The statement of a change that writes one row.
fn row_op(
    run: RunId,
    thread: agentenkit_core::ThreadId,
    change: &Change,
    journal: &StoredJournal,
) -> Result<Op> {
    Ok(match change {
        Change::ProposeToolCall {
            id,
            name,
            arguments,
            kind,
        } => insert_tool_call(
            run,
            thread,
            NewCall {
                id,
                name,
                kind: *kind,
                stored: journal.call_arguments(id.as_str(), arguments),
                parked: None,
            },
        ),
        // A park or a settle that finds its row elsewhere is a bug; an
        // answered call's result or a park request written twice is not.
        Change::Call { id, event } => match event {
            CallEvent::RecordParkRequest { .. } | CallEvent::RecordResult { .. } => {
                crate::calls::write(run, id, event)?
            }
            _ => crate::calls::write_one(run, id, event)?,
        },
        Change::TakeSteering { positions } => Op::new(
            TAKE_STEERING_SQL,
            vec![Box::new(run.0), Box::new(positions.clone())],
        )
        .expect(Expect::Checked(Error::LeaseLost {
            run_id: run.to_string(),
        })),
        Change::RecordProviderUsage {
            reservation,
            tokens,
        } => Op::new(
            "UPDATE provider_calls SET tokens = $2 WHERE id = $1",
            vec![
                Box::new(*reservation),
                Box::new(i64::try_from(*tokens).unwrap_or(i64::MAX)),
            ],
        ),
        Change::RecordFailure { error } => Op::new(
            "UPDATE runs SET attempts = attempts + 1, error = $2 WHERE id = $1",
            vec![Box::new(run.0), Box::new(error.clone())],
        ),
        // The end of a segment is the fence of its commit; a second one in
        // the same commit finds the run no longer running.
        Change::WaitRun | Change::FinishRun { .. } | Change::Defer { .. } => Op::new(
            "UPDATE runs SET status = status WHERE id = $1 AND status = 'running'",
            vec![Box::new(run.0)],
        )
        .expect(Expect::One(Error::Corrupt(format!(
            "run {run} ends its segment twice in one commit"
        )))),
        Change::Journal { .. }
        | Change::Event { .. }
        | Change::Message(_)
        | Change::SteeredMessage { .. }
        | Change::StartChild { .. }
        | Change::Outbox { .. }
        | Change::FinishDelegation { .. } => {
            return Err(Error::Corrupt(format!(
                "{change:?} is not a one-row change"
            )))
        }
    })
}

/// What an outbox insert of a commit publishes once it is durable.
struct Publish {
    message: QueueMessage,
    delay_ms: u64,
    /// The trace it continues, when not the committing span's.
    trace: Option<agentenkit_core::TraceContext>,
}

/// The outbox rows a commit wrote, from its statements' answers.
fn written_outbox(answers: Vec<Answer>, publishes: Vec<Option<Publish>>) -> Result<Vec<OutboxRow>> {
    let mut outbox = Vec::new();
    for (answer, publish) in answers.into_iter().zip(publishes) {
        match (answer, publish) {
            (Answer::Ids(ids), Some(publish)) => {
                outbox.extend(ids.into_iter().map(|id| OutboxRow {
                    id,
                    message: publish.message.clone(),
                    delay_ms: publish.delay_ms,
                    claimed: None,
                    trace: publish.trace.clone(),
                }))
            }
            // A parent resumed by its child's end, or an event's
            // notification.
            (Answer::Rows(rows), _) => outbox.extend(returned_rows(&rows)?),
            (Answer::Claimed(rows, event), _) => outbox.extend(claimed_rows(&rows, &event)),
            _ => {}
        }
    }
    Ok(outbox)
}
