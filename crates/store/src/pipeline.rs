//! Statements of one transaction sent together: every request goes out
//! before the first answer is awaited (tokio-postgres pipelines requests
//! polled concurrently on one connection), so a commit of a dozen rows costs
//! one round trip instead of a dozen.
//!
//! A statement that must change exactly one row checks that itself, in the
//! database (see [`Expect::One`]): a failed check aborts the transaction
//! there, so even a `COMMIT` sent in the same batch cannot commit what came
//! before it, and [`transact`] can send `BEGIN`, the statements and `COMMIT`
//! without waiting in between.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::Object;
use futures::future::join_all;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

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
        if matches!(expect, Expect::One(_)) {
            self.sql = Cow::Owned(format!(
                "WITH changed AS ({} RETURNING 1) SELECT expect_one_row((SELECT count(*) FROM changed))",
                self.sql
            ));
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

/// `BEGIN`, `ops` and `COMMIT` in one round trip: a transaction whose
/// statements do not depend on each other's answers. Nothing is committed
/// unless every statement succeeded and every [`Expect::One`] held: the
/// first failure aborts the transaction in the database, and the `COMMIT`
/// that follows it then rolls back.
pub(crate) async fn transact(client: Object, ops: Vec<Op>) -> Result<Vec<Answer>> {
    let tx = OpenTx::new(client);
    tx.exchange(true, ops, Some("COMMIT")).await
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
        self.exchange(true, ops, None).await
    }

    /// `ops`, then `COMMIT`, in one round trip. A failed statement aborts
    /// the transaction, so the `COMMIT` rolls it back.
    pub async fn commit_with(&self, ops: Vec<Op>) -> Result<Vec<Answer>> {
        self.exchange(false, ops, Some("COMMIT")).await
    }

    /// One statement in the open transaction, its rows once answered: for
    /// a step whose next depends on what this one found.
    pub async fn exchange_one(&self, op: Op) -> Result<Vec<tokio_postgres::Row>> {
        Ok(self
            .exchange(false, vec![op], None)
            .await?
            .into_iter()
            .next()
            .map(Answer::rows)
            .unwrap_or_default())
    }

    pub async fn rollback(&self) -> Result<()> {
        self.exchange(false, Vec::new(), Some("ROLLBACK")).await?;
        Ok(())
    }

    fn client(&self) -> &Object {
        self.client
            .as_ref()
            .expect("the client is taken only on drop")
    }

    async fn exchange(
        &self,
        begin: bool,
        ops: Vec<Op>,
        end: Option<&'static str>,
    ) -> Result<Vec<Answer>> {
        let client = self.client();
        let mut statements = Vec::with_capacity(ops.len());
        for op in &ops {
            statements.push(client.prepare_cached(&op.sql).await?);
        }
        let pg: &tokio_postgres::Client = client;
        // join! polls its futures in order, and each sends its request on
        // its first poll: BEGIN, the statements, then the end leave in this
        // order before any answer is awaited.
        let (begun, answers, ended) = futures::join!(
            async {
                if !begin {
                    return Ok(());
                }
                self.open.store(true, Ordering::Release);
                pg.batch_execute("BEGIN").await
            },
            join_all(
                ops.iter()
                    .zip(&statements)
                    .map(|(op, statement)| send(pg, op, statement)),
            ),
            async {
                match end {
                    Some(end) => pg.batch_execute(end).await,
                    None => Ok(()),
                }
            },
        );
        if end.is_some() && ended.is_ok() {
            self.open.store(false, Ordering::Release);
        }
        begun?;
        let checked = check(answers, ops)?;
        ended?;
        Ok(checked)
    }
}

impl Drop for OpenTx {
    fn drop(&mut self) {
        if !self.open.load(Ordering::Acquire) {
            return;
        }
        if let (Some(client), Ok(runtime)) =
            (self.client.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(async move {
                // A connection that cannot even roll back is broken: the
                // pool discards it when it is checked out next.
                let _ = client.batch_execute("ROLLBACK").await;
            });
        }
    }
}

async fn send<C: tokio_postgres::GenericClient>(
    client: &C,
    op: &Op,
    statement: &tokio_postgres::Statement,
) -> std::result::Result<Answer, tokio_postgres::Error> {
    let params: Vec<&(dyn ToSql + Sync)> = op
        .params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect();
    match op.expect {
        Expect::Ids => client
            .query(statement, &params)
            .await
            .map(|rows| Answer::Ids(rows.iter().map(|r| r.get(0)).collect())),
        Expect::Rows => client.query(statement, &params).await.map(Answer::Rows),
        Expect::Claimed(ref draft) => client
            .query(statement, &params)
            .await
            .map(|rows| Answer::Claimed(rows, draft.clone())),
        Expect::One(_) => client
            .query_one(statement, &params)
            .await
            .map(|_| Answer::Done),
        Expect::Any => client
            .execute(statement, &params)
            .await
            .map(|_| Answer::Done),
    }
}

/// The first failure in statement order, as the error its statement
/// expects when it is a failed row check.
fn check(
    answers: Vec<std::result::Result<Answer, tokio_postgres::Error>>,
    ops: Vec<Op>,
) -> Result<Vec<Answer>> {
    let mut checked = Vec::with_capacity(answers.len());
    for (answer, op) in answers.into_iter().zip(ops) {
        match answer {
            Ok(answer) => checked.push(answer),
            Err(e) if is_row_check(&e) => {
                return Err(match op.expect {
                    Expect::One(error) => error,
                    _ => Error::Db(e),
                })
            }
            Err(e) => return Err(Error::Db(e)),
        }
    }
    Ok(checked)
}

fn is_row_check(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::from_code(ROW_CHECK_FAILED))
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
    }
}
