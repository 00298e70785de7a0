//! Statements of one transaction sent together: every request goes out
//! before the first answer is awaited (tokio-postgres pipelines requests
//! polled concurrently on one connection), so a commit of a dozen rows costs
//! one round trip instead of a dozen, and the checks on their row counts are
//! made once the answers are in, before the caller commits.

use deadpool_postgres::Transaction;
use futures::future::join_all;
use tokio_postgres::types::ToSql;

use crate::{Error, Result};

/// A statement's parameter, owned: the statement is built before it is sent.
pub(crate) type Param = Box<dyn ToSql + Sync + Send>;

/// What a statement's answer must be.
#[derive(Debug)]
pub(crate) enum Expect {
    /// Any row count.
    Any,
    /// Exactly one row changed; otherwise this error.
    One(Error),
    /// The rows it returns (`RETURNING`), first column as `i64`.
    Ids,
}

/// One statement of a pipelined batch.
pub(crate) struct Op {
    pub sql: &'static str,
    pub params: Vec<Param>,
    pub expect: Expect,
}

impl Op {
    pub fn new(sql: &'static str, params: Vec<Param>) -> Self {
        Self {
            sql,
            params,
            expect: Expect::Any,
        }
    }

    pub fn expect(mut self, expect: Expect) -> Self {
        self.expect = expect;
        self
    }
}

/// The answer to one statement.
#[derive(Debug)]
pub(crate) enum Answer {
    Count(u64),
    Ids(Vec<i64>),
}

/// Sends `ops` in order in one round trip (statements are prepared first:
/// from the connection's cache after the first time) and checks each answer
/// against what it expects. The first failure is returned; the statements
/// after a failed one fail too (the transaction is aborted), and the caller
/// drops the transaction, which rolls it back.
pub(crate) async fn run(tx: &Transaction<'_>, ops: Vec<Op>) -> Result<Vec<Answer>> {
    let mut statements = Vec::with_capacity(ops.len());
    for op in &ops {
        statements.push(tx.prepare_cached(op.sql).await?);
    }
    // join_all polls the futures in order, and each sends its request on
    // its first poll: the requests leave in the order of `ops`.
    let answers = join_all(
        ops.iter()
            .zip(&statements)
            .map(|(op, statement)| async move {
                let params: Vec<&(dyn ToSql + Sync)> = op
                    .params
                    .iter()
                    .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                    .collect();
                match op.expect {
                    Expect::Ids => tx
                        .query(statement, &params)
                        .await
                        .map(|rows| Answer::Ids(rows.iter().map(|r| r.get(0)).collect())),
                    _ => tx.execute(statement, &params).await.map(Answer::Count),
                }
            }),
    )
    .await;
    let mut checked = Vec::with_capacity(answers.len());
    for (answer, op) in answers.into_iter().zip(ops) {
        let answer = answer?;
        match (op.expect, &answer) {
            (Expect::One(error), Answer::Count(n)) if *n != 1 => return Err(error),
            _ => checked.push(answer),
        }
    }
    Ok(checked)
}
