//! Added for agentenkit (not in upstream tokio-postgres 0.7.18; see
//! `PATCHES.md`): prepared statements sent as one pipeline that ends in a
//! single `Sync`.
//!
//! `Client::query` and friends end every statement with its own `Sync`
//! (rust-postgres issue #1213). Polled together they still share one round
//! trip, but the server answers each `Sync` with `ReadyForQuery` and a
//! flush: one `send` (and, over TLS, one record) per statement, and one
//! wake-up of the connection's reader each. Here the server flushes once.
//!
//! The statements between two `Sync`s are also one *implicit transaction*:
//! without an explicit `BEGIN` they commit together at the `Sync`, and a
//! failure rolls back every one of them; after a failure the server skips
//! the rest up to the `Sync`.

use crate::codec::FrontendMessage;
use crate::connection::RequestMessages;
use crate::query::{encode_bind, extract_row_affected};
use crate::types::ToSql;
use crate::{Client, Error, Row, Statement, slice_iter};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;

/// What one statement of a [`Client::pipeline`] came to.
#[derive(Debug)]
pub enum PipelineResult {
    /// It ran: the rows it returned, and the row count of its command tag.
    Ran {
        /// The rows it returned (none for a statement without `RETURNING`).
        rows: Vec<Row>,
        /// The rows it inserted, updated, deleted or selected.
        affected: u64,
    },
    /// The server refused it. Nothing after it in the pipeline ran.
    Failed(Error),
    /// An earlier statement of the pipeline failed, so this one never ran.
    Skipped,
}

/// Where the session stands once a pipeline's `Sync` is answered
/// (`ReadyForQuery`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionStatus {
    /// Not in a transaction block: the pipeline's implicit transaction (if
    /// any) ended at the `Sync`.
    Idle,
    /// Inside a transaction block (a `BEGIN` not yet ended).
    InTransaction,
    /// Inside a failed transaction block: only its end is accepted.
    Failed,
}

impl Client {
    /// Runs `statements`, each with its parameters, sent together and
    /// followed by one `Sync`: one flush of the server's answers for the
    /// whole pipeline. Without `BEGIN` among them they are one implicit
    /// transaction (see the module's comment). Returns each statement's
    /// answer and where the session stands after the `Sync`.
    ///
    /// The outer `Err` is an error of the connection, of encoding a
    /// parameter (nothing was sent then), or of the implicit transaction's
    /// commit at the `Sync`, which rolls back statements that reported
    /// [`PipelineResult::Ran`].
    pub async fn pipeline(
        &self,
        statements: &[(&Statement, &[&(dyn ToSql + Sync)])],
    ) -> Result<(Vec<PipelineResult>, TransactionStatus), Error> {
        let buf = self.inner().with_buf(|buf| {
            for (statement, params) in statements {
                encode_bind(statement, slice_iter(params), "", buf)?;
                frontend::execute("", 0, buf).map_err(Error::encode)?;
            }
            frontend::sync(buf);
            Ok::<_, Error>(buf.split().freeze())
        })?;
        let mut responses = self
            .inner()
            .send(RequestMessages::Single(FrontendMessage::Raw(buf)))?;
        let mut results = Vec::with_capacity(statements.len());
        let mut failed = false;
        for (statement, _) in statements {
            if failed {
                results.push(PipelineResult::Skipped);
                continue;
            }
            let result = answer(&mut responses, statement).await?;
            failed = matches!(result, PipelineResult::Failed(_));
            results.push(result);
        }
        // A commit that fails at the Sync reports its error before
        // ReadyForQuery.
        let status = match responses.next().await? {
            Message::ReadyForQuery(body) => body.status(),
            _ => return Err(Error::unexpected_message()),
        };
        let status = match status {
            b'I' => TransactionStatus::Idle,
            b'T' => TransactionStatus::InTransaction,
            b'E' => TransactionStatus::Failed,
            _ => return Err(Error::unexpected_message()),
        };
        Ok((results, status))
    }
}

/// One statement's answer: `BindComplete`, its rows, and its command tag;
/// or the server's error for it.
async fn answer(
    responses: &mut crate::client::Responses,
    statement: &Statement,
) -> Result<PipelineResult, Error> {
    let mut bound = false;
    let mut rows = Vec::new();
    loop {
        let message = match responses.next().await {
            Ok(message) => message,
            Err(e) if e.as_db_error().is_some() => return Ok(PipelineResult::Failed(e)),
            Err(e) => return Err(e),
        };
        match message {
            Message::BindComplete if !bound => bound = true,
            Message::DataRow(body) if bound => rows.push(Row::new(statement.clone(), body)?),
            Message::CommandComplete(body) if bound => {
                let affected = extract_row_affected(&body)?;
                return Ok(PipelineResult::Ran { rows, affected });
            }
            Message::EmptyQueryResponse if bound => {
                return Ok(PipelineResult::Ran { rows, affected: 0 });
            }
            _ => return Err(Error::unexpected_message()),
        }
    }
}
