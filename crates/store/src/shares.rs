//! Fair shares (docs/budgets.md, "Fair shares"): a run started under a cap
//! is admitted, or held back, in the transaction that starts or resumes
//! it, and a run that stops running admits the held runs of its owner that
//! now fit, in the transaction that stops it. The rule and its lock are
//! the functions of migration 0017 (`run_slot_is_free`,
//! `admit_held_runs`); this file is the statements that call them.
//!
//! A held run is `queued` with `held_since` set and no segment anywhere:
//! it waits in Postgres, holding no worker and no broker message. Nothing
//! else moves it (the reaper's stalled-run rule skips it, a lease cannot be
//! taken on it), so it runs only when admitted.

use agentenkit_core::shares::Slot;
use agentenkit_core::{QueueMessage, RunId, ThreadId};

use crate::outbox::OutboxRow;
use crate::pipeline::{Expect, Op};
use crate::{Result, Store};

/// How many held runs one stopping run admits at most (more than one: a
/// higher cap configured since, or several runs stopped in one commit).
const ADMITTED_PER_STOP: i32 = 8;

/// A run started under its caps: its slot keys from the thread row (the
/// owner, and the agent's key per owner and fair key value), held at once
/// when no slot is free. `$11` the owner cap, `$12` the agent cap, `$13`
/// the fair key's metadata key.
const INSERT_RUN_UNDER_CAP_SQL: &str = "
    INSERT INTO runs (id, thread_id, root_run_id, parent_run_id, parent_tool_call_id,
                      name, depth, status, segment_seq, agent_version, traceparent, tracestate,
                      slot_owner, slot_owner_cap, slot_key, slot_key_cap, held_since)
    SELECT $1::uuid, $2::uuid, $3::uuid, $4::uuid, $5::text, $6::text, $7::int, 'queued', 1,
           $8::text, $9::text, $10::text, s.owner, $11::int, s.key, $12::int,
           CASE WHEN run_slot_is_free($1::uuid, s.owner, $11::int, s.key, $12::int)
                THEN NULL ELSE now() END
    FROM (SELECT t.owner,
                 CASE WHEN $12::int IS NOT NULL
                      THEN jsonb_build_array(t.owner, $6::text, t.metadata ->> $13::text)::text
                 END AS key
          FROM threads t WHERE t.id = $2::uuid) s";

/// Puts run `$1` (of thread `$6`, agent `$4`), written without caps, under
/// them: admitted or held as a run started under them is (a fork's run).
const PLACE_UNDER_CAP_SQL: &str = "
    UPDATE runs r SET slot_owner = s.owner, slot_owner_cap = $2::int, slot_key = s.key,
           slot_key_cap = $3::int,
           held_since = CASE WHEN run_slot_is_free(r.id, s.owner, $2::int, s.key, $3::int)
                             THEN NULL ELSE now() END
    FROM (SELECT t.owner,
                 CASE WHEN $3::int IS NOT NULL
                      THEN jsonb_build_array(t.owner, $4::text, t.metadata ->> $5::text)::text
                 END AS key
          FROM threads t WHERE t.id = $6::uuid) s
    WHERE r.id = $1::uuid";

/// The first segment's outbox row of run `$1`, unless it was held.
const ADMITTED_SEGMENT_SQL: &str = "
    INSERT INTO outbox (delay_ms, key, due_at)
    SELECT 0, $2, now() FROM runs WHERE id = $1 AND held_since IS NULL
    RETURNING id";

/// The insert of `run`, admitted or held under `slot`.
/// `run` is the run's `$1`..`$10` (`start::run_params`).
pub(crate) fn insert_run_op(run: Vec<crate::pipeline::Param>, slot: &Slot) -> Op {
    let mut params = run;
    params.push(Box::new(slot.owner_cap.map(cap)));
    params.push(Box::new(slot.agent_cap.map(cap)));
    params.push(Box::new(
        slot.fair_key
            .as_ref()
            .map(|key| key.metadata_key().to_owned()),
    ));
    Op::new(INSERT_RUN_UNDER_CAP_SQL, params)
}

/// [`PLACE_UNDER_CAP_SQL`]: run `run` of `thread`, an `agent`'s, under
/// `slot`; its segment then goes by [`admitted_segment_op`].
pub(crate) fn place_under_cap_op(run: RunId, thread: ThreadId, agent: &str, slot: &Slot) -> Op {
    Op::new(
        PLACE_UNDER_CAP_SQL,
        vec![
            Box::new(run.0),
            Box::new(slot.owner_cap.map(cap)),
            Box::new(slot.agent_cap.map(cap)),
            Box::new(agent.to_owned()),
            Box::new(
                slot.fair_key
                    .as_ref()
                    .map(|key| key.metadata_key().to_owned()),
            ),
            Box::new(thread.0),
        ],
    )
}

/// The first segment's outbox insert of a run started under a cap: no id
/// when it was held.
pub(crate) fn admitted_segment_op(segment: &QueueMessage) -> Op {
    let QueueMessage::Segment { run_id, .. } = segment else {
        unreachable!("a run's first message is a segment")
    };
    Op::new(
        ADMITTED_SEGMENT_SQL,
        vec![Box::new(run_id.0), Box::new(segment.outbox_key())],
    )
    .expect(Expect::Ids)
}

/// Admits the held runs of `owner` that fit now: after the statement that
/// stopped a run of it, in the same transaction. Its rows are outbox rows.
pub(crate) fn admit_held_op(owner: &str) -> Op {
    Op::new(
        "SELECT id, key FROM admit_held_runs($1, $2)",
        vec![Box::new(owner.to_owned()), Box::new(ADMITTED_PER_STOP)],
    )
    .expect(Expect::Rows)
}

fn cap(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

impl Store {
    /// Admits held runs whose slots are free (the reaper's pass): a run
    /// that stopped outside a worker's commit (failed by the reaper, or
    /// where the process gave up before admitting) sets its slot free
    /// without admitting anybody. Every owner with held runs, `batch` of
    /// them a query and each its own transaction; an owner whose admission
    /// fails is logged and passed over (the next pass tries it again).
    /// Returns the admitted runs' segments, published.
    pub async fn admit_held_runs(&self, batch: i64) -> Result<Vec<OutboxRow>> {
        let mut admitted = Vec::new();
        let mut after = String::new();
        loop {
            let owners = self.held_owners_after(&after, batch).await?;
            for owner in &owners {
                match self.admit_held_now(owner).await {
                    Ok(rows) => admitted.extend(rows),
                    Err(e) => tracing::warn!(owner = %owner, error = %e,
                        "held runs were not admitted; the next pass tries again"),
                }
            }
            match owners.last() {
                Some(last) if owners.len() as i64 == batch => after = last.clone(),
                _ => return Ok(admitted),
            }
        }
    }

    /// The owners with held runs, in order, after `after`.
    async fn held_owners_after(&self, after: &str, batch: i64) -> Result<Vec<String>> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT DISTINCT slot_owner FROM runs
                 WHERE held_since IS NOT NULL AND status = 'queued' AND slot_owner > $1
                 ORDER BY slot_owner LIMIT $2",
            )
            .await?;
        Ok(client
            .query(&stmt, &[&after, &batch])
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect())
    }

    /// [`Store::admit_held_of`] after runs of `owner` were stopped on
    /// `thread` (a stop, an interrupt, an edit): a failure is logged, and
    /// left to the reaper.
    pub(crate) async fn admit_after_stopping(&self, owner: &str, thread: ThreadId) {
        if let Err(e) = self.admit_held_of(owner).await {
            tracing::warn!(thread_id = %thread, error = %e,
                "held runs were not admitted after runs stopped; the reaper will admit them");
        }
    }

    /// Admits the held runs of `owner` that fit now, in a transaction of
    /// their own, and publishes their segments: after a run of `owner`
    /// stopped in a transaction that did not (a stop). Nothing to do, and
    /// no round trip, when no cap is set.
    pub(crate) async fn admit_held_of(&self, owner: &str) -> Result<Vec<OutboxRow>> {
        if self.run_limits().is_none() {
            return Ok(Vec::new());
        }
        self.admit_held_now(owner).await
    }

    /// Admits the held runs of `owner` that fit now (whatever caps this
    /// process was given: a held run keeps the caps it started under).
    async fn admit_held_now(&self, owner: &str) -> Result<Vec<OutboxRow>> {
        let client = self.client().await?;
        let answers = crate::pipeline::transact(&client, vec![admit_held_op(owner)]).await?;
        let mut admitted = Vec::new();
        for answer in answers {
            admitted.extend(crate::outbox::returned_rows(&answer.rows())?);
        }
        self.publish(&admitted).await;
        Ok(admitted)
    }
}
