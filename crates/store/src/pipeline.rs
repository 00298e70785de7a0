//! Statements of one transaction sent together, as one pipeline that ends
//! in a single `Sync` (tokio-postgres's `Client::pipeline`, patched in, see
//! vendor/tokio-postgres/PATCHES.md): every statement goes out before the
//! first answer is awaited, and the server answers them all with one flush,
//! so a commit of a dozen rows costs one round trip and one send each way.
//!
//! A statement that must change exactly one row checks that itself, in the
//! database (see [`Expect::One`]): a failed check aborts the transaction
//! there, and the server skips every statement after it up to the `Sync`,
//! `COMMIT` included. So [`transact`] sends a whole transaction without
//! waiting in between: the statements of one pipeline are one implicit
//! transaction, committed at its `Sync`.
//!
//! A transaction Postgres aborted for a deadlock or a serialization failure
//! is sent again whole ([`retry_conflicts`]).

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::Object;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{PipelineResult, TransactionStatus};

use crate::{Error, Result};

/// A statement's parameter, owned: the statement is built before it is sent.
pub(crate) type Param = Box<dyn ToSql + Sync + Send>;

/// The SQLSTATE `expect_one_row` raises (see migrations/0001_schema.sql).
const ROW_CHECK_FAILED: &str = "AK001";

/// What a statement's answer must be.
#[derive(Debug)]
pub(crate) enum Expect {
    /// Any row count.
    Any,
    /// Exactly one row changed; otherwise the transaction is aborted and
    /// this is the error.
    One(Error),
    /// As [`Expect::One`], and the changed row's value of the boolean
    /// column named (`RETURNING` it costs the statement nothing more).
    OneFlag(Error, &'static str),
    /// The statement checks itself (it calls `expect_one_row`, as a
    /// statement with data-modifying `WITH` clauses must: they cannot be
    /// wrapped); a failed check is this error.
    Checked(Error),
    /// The rows it returns (`RETURNING`), first column as `i64`.
    Ids,
    /// The rows it returns, whole.
    Rows,
    /// The rows of a notified event's claim (`event_insert::NOTIFY_HERE_SQL`),
    /// with the event as its transaction wrote it: the answer pairs them.
    Claimed(std::sync::Arc<crate::sent_here::EventDraft>),
}

/// One statement of a pipelined batch.
pub(crate) struct Op {
    sql: Cow<'static, str>,
    pub params: Vec<Param>,
    expect: Expect,
}

impl Op {
    pub fn new(sql: &'static str, params: Vec<Param>) -> Self {
        Self {
            sql: Cow::Borrowed(sql),
            params,
            expect: Expect::Any,
        }
    }

    /// What the answer must be. [`Expect::One`] wraps the statement (an
    /// `INSERT`/`UPDATE`/`DELETE` without `RETURNING`) so that the database
    /// counts the rows it changed and raises when they are not one.
    pub fn expect(mut self, expect: Expect) -> Self {
        match &expect {
            Expect::One(_) => {
                self.sql = Cow::Owned(format!(
                    "WITH changed AS ({} RETURNING 1) SELECT expect_one_row((SELECT count(*) FROM changed))",
                    self.sql
                ));
            }
            Expect::OneFlag(_, column) => {
                self.sql = Cow::Owned(format!(
                    "WITH changed AS ({} RETURNING {column}) \
                     SELECT expect_one_row((SELECT count(*) FROM changed)), \
                            coalesce((SELECT bool_or({column}) FROM changed), false)",
                    self.sql
                ));
            }
            _ => {}
        }
        self.expect = expect;
        self
    }

    #[cfg(test)]
    pub fn sql(&self) -> &str {
        &self.sql
    }
}

/// The answer to one statement.
#[derive(Debug)]
pub(crate) enum Answer {
    /// The statement ran (its row count, if checked, held).
    Done,
    /// An [`Expect::OneFlag`] statement's column.
    Flag(bool),
    Ids(Vec<i64>),
    Rows(Vec<tokio_postgres::Row>),
    /// The rows of an [`Expect::Claimed`] statement, with its event.
    Claimed(
        Vec<tokio_postgres::Row>,
        std::sync::Arc<crate::sent_here::EventDraft>,
    ),
}

impl Answer {
    /// The rows of an [`Expect::Rows`] statement.
    pub fn rows(self) -> Vec<tokio_postgres::Row> {
        match self {
            Answer::Rows(rows) => rows,
            _ => Vec::new(),
        }
    }
}

/// `ops` as one transaction in one round trip: a transaction whose
/// statements do not depend on each other's answers. They go out as one
/// pipeline with a single `Sync`, which makes them one implicit transaction
/// (no `BEGIN` or `COMMIT` to send): nothing is committed unless every
/// statement succeeded and every [`Expect::One`] held, since the first
/// failure aborts the transaction in the database and the server skips the
/// rest.
pub(crate) async fn transact(client: &Object, ops: Vec<Op>) -> Result<Vec<Answer>> {
    send(client, None, ops, None, TransactionStatus::Idle).await
}

/// A transaction on a pooled connection whose `BEGIN` goes out with its
/// first statements and whose `COMMIT` goes out with its last: a
/// read-then-write transaction in two round trips. Dropped while open (the
/// caller returned early or was cancelled), it rolls back before its
/// connection goes back to the pool.
pub(crate) struct OpenTx {
    client: Option<Object>,
    open: AtomicBool,
}

impl OpenTx {
    pub fn new(client: Object) -> Self {
        Self {
            client: Some(client),
            open: AtomicBool::new(false),
        }
    }

    /// `BEGIN`, then `ops`, in one round trip.
    pub async fn begin_with(&self, ops: Vec<Op>) -> Result<Vec<Answer>> {
        self.open.store(true, Ordering::Release);
        send(
            self.client(),
            Some("BEGIN"),
            ops,
            None,
            TransactionStatus::InTransaction,
        )
        .await
    }

    /// `ops`, then `COMMIT`, in one round trip. A failed statement aborts
    /// the transaction and the server skips the `COMMIT`: the transaction
    /// is rolled back before the error returns.
    pub async fn commit_with(&self, ops: Vec<Op>) -> Result<Vec<Answer>> {
        match send(
            self.client(),
            None,
            ops,
            Some("COMMIT"),
            TransactionStatus::Idle,
        )
        .await
        {
            Ok(answers) => {
                self.open.store(false, Ordering::Release);
                Ok(answers)
            }
            Err(e) => {
                // ROLLBACK ends an aborted transaction, and one that the
                // failed exchange may have left open; its own failure
                // leaves `open` set, so the drop tries again.
                if self.rollback().await.is_ok() {
                    self.open.store(false, Ordering::Release);
                }
                Err(e)
            }
        }
    }

    /// One statement in the open transaction, its rows once answered: for
    /// a step whose next depends on what this one found.
    pub async fn exchange_one(&self, op: Op) -> Result<Vec<tokio_postgres::Row>> {
        Ok(send(
            self.client(),
            None,
            vec![op],
            None,
            TransactionStatus::InTransaction,
        )
        .await?
        .into_iter()
        .next()
        .map(Answer::rows)
        .unwrap_or_default())
    }

    pub async fn rollback(&self) -> Result<()> {
        send(
            self.client(),
            None,
            Vec::new(),
            Some("ROLLBACK"),
            TransactionStatus::Idle,
        )
        .await?;
        self.open.store(false, Ordering::Release);
        Ok(())
    }

    fn client(&self) -> &Object {
        self.client
            .as_ref()
            .expect("the client is taken only on drop")
    }
}

impl Drop for OpenTx {
    fn drop(&mut self) {
        if !self.open.load(Ordering::Acquire) {
            return;
        }
        let Some(client) = self.client.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    // A connection that cannot even roll back is broken: the
                    // pool discards it when it is checked out next.
                    let _ = client.batch_execute("ROLLBACK").await;
                });
            }
            // Nothing can roll it back here: the connection leaves the pool
            // (closed) rather than go back inside the transaction.
            Err(_) => drop(Object::take(client)),
        }
    }
}

/// `first`, `ops` and `last` as one pipeline (one `Sync`, one round trip),
/// and the answers of `ops`. `Ok` only when every statement ran and the
/// session is then where the exchange `leaves` it: the first failure in
/// statement order is the error, as the error its statement expects when
/// it is a failed row check.
async fn send(
    client: &Object,
    first: Option<&'static str>,
    ops: Vec<Op>,
    last: Option<&'static str>,
    leaves: TransactionStatus,
) -> Result<Vec<Answer>> {
    let mut statements = Vec::with_capacity(ops.len() + 2);
    let sqls = first.iter().copied();
    let sqls = sqls.chain(ops.iter().map(|op| &*op.sql)).chain(last);
    for sql in sqls {
        statements.push(client.prepare_cached(sql).await?);
    }
    // `first` and `last` take no parameters.
    let none = Vec::new();
    let params: Vec<Vec<&(dyn ToSql + Sync)>> = ops
        .iter()
        .map(|op| op.params.iter().map(|p| p.as_ref() as _).collect())
        .collect();
    let params = first.map(|_| &none).into_iter().chain(&params);
    let params = params.chain(last.map(|_| &none)).map(Vec::as_slice);
    let items: Vec<_> = statements.iter().zip(params).collect();
    let pg: &tokio_postgres::Client = client;
    let (results, status) = pg.pipeline(&items).await?;
    let mut results = results.into_iter();
    if first.is_some() {
        ran(results.next())?;
    }
    let mut answers = Vec::with_capacity(ops.len());
    for op in ops {
        let rows = match results.next() {
            Some(PipelineResult::Failed(e)) if is_row_check(&e) => {
                return Err(match op.expect {
                    Expect::One(error) | Expect::OneFlag(error, _) | Expect::Checked(error) => {
                        error
                    }
                    _ => Error::Db(e),
                })
            }
            other => ran(other)?,
        };
        answers.push(match op.expect {
            Expect::Ids => Answer::Ids(rows.iter().map(|r| r.get(0)).collect()),
            Expect::Rows => Answer::Rows(rows),
            Expect::Claimed(draft) => Answer::Claimed(rows, draft),
            Expect::OneFlag(..) => Answer::Flag(rows.first().is_some_and(|r| r.get(1))),
            Expect::One(_) | Expect::Checked(_) | Expect::Any => Answer::Done,
        });
    }
    if last.is_some() {
        ran(results.next())?;
    }
    if status != leaves {
        // Every statement ran, yet the session is not where this exchange
        // leaves it: the connection came from the pool inside a transaction
        // that something left open, so nothing here was committed. End it.
        let _ = pg.batch_execute("ROLLBACK").await;
        return Err(Error::Corrupt(format!(
            "a pooled connection was in a transaction left open ({status:?} after an exchange \
             that leaves it {leaves:?}); its statements were rolled back"
        )));
    }
    Ok(answers)
}

/// The rows of a statement that ran; its error when it failed.
fn ran(result: Option<PipelineResult>) -> Result<Vec<tokio_postgres::Row>> {
    match result {
        Some(PipelineResult::Ran { rows, .. }) => Ok(rows),
        Some(PipelineResult::Failed(e)) => Err(Error::Db(e)),
        // A statement is skipped only after one that failed, whose error
        // was returned first.
        Some(PipelineResult::Skipped) | None => Err(Error::Corrupt(
            "a pipeline answered fewer statements than it was sent".into(),
        )),
    }
}

/// Whether `e` is a failed row check (`expect_one_row`): the statement
/// changed or found other than one row.
pub(crate) fn is_row_check(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::from_code(ROW_CHECK_FAILED))
}

/// How often a transaction Postgres aborted for a conflict is run again
/// before the error is returned.
const CONFLICT_RETRIES: u32 = 6;

/// Runs `attempt` and, when Postgres aborted it for a deadlock or a
/// serialization failure, runs it again at once after a short random pause
/// (so two conflicting transactions do not meet again in step), rather than
/// handing the work back for a lease's time.
pub async fn retry_conflicts<T, F, Fut>(mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(e) if e.is_conflict() && tries < CONFLICT_RETRIES => {
                tries += 1;
                tracing::debug!(error = %e, tries, "transaction aborted by a conflict; retrying");
                // 1..=2^tries ms, random: cheap, and enough to break a tie.
                let spread = 1u128 << tries;
                let pause = 1 + (uuid::Uuid::new_v4().as_u128() % spread) as u64;
                tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_that_must_change_one_row_checks_it_in_the_database() {
        let op = Op::new("UPDATE t SET a = 1 WHERE id = $1", vec![])
            .expect(Expect::One(Error::Corrupt("x".into())));
        assert_eq!(
            op.sql(),
            "WITH changed AS (UPDATE t SET a = 1 WHERE id = $1 RETURNING 1) \
             SELECT expect_one_row((SELECT count(*) FROM changed))"
        );
        let plain = Op::new("INSERT INTO t VALUES ($1)", vec![]);
        assert_eq!(plain.sql(), "INSERT INTO t VALUES ($1)");
        // A flag comes back from the same statement, false when no row
        // changed (the check has failed the transaction by then anyway).
        let flagged = Op::new("UPDATE t SET a = 1 WHERE id = $1", vec![])
            .expect(Expect::OneFlag(Error::Corrupt("x".into()), "f"));
        assert_eq!(
            flagged.sql(),
            "WITH changed AS (UPDATE t SET a = 1 WHERE id = $1 RETURNING f) \
             SELECT expect_one_row((SELECT count(*) FROM changed)), \
                    coalesce((SELECT bool_or(f) FROM changed), false)"
        );
    }
}
