//! Reads of a list bounded as they are made: by rows and by the bytes of
//! what comes out, a few rows at a time through a portal, so a page of
//! large rows stops being read (and decoded) once it is large enough,
//! rather than being cut after a thousand rows were.

use deadpool_postgres::Object;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::Result;

/// How much one read of a list may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadBound {
    /// At most this many items.
    pub rows: i64,
    /// Reading stops once the items read come to this many bytes of JSON:
    /// the item that passes it is the last one read (so the reader can
    /// tell it stopped early and cut it).
    pub bytes: usize,
}

impl ReadBound {
    pub fn new(rows: i64, bytes: usize) -> Self {
        Self { rows, bytes }
    }
}

/// What one bounded read found: the items, and whether it stopped at its
/// bound (more may follow) rather than at the end of the rows.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadPage<T> {
    pub items: Vec<T>,
    pub more: bool,
}

/// Rows fetched from the portal at a time: small, so a page of large rows
/// reads few past its bound; large enough that a page of small rows takes
/// a few round trips.
const FETCH_ROWS: i32 = 64;

/// The items of `sql` (its rows in order, `item` making each with its size
/// in bytes), read until `bound` is met. `sql` must not have a `LIMIT` of
/// its own that is smaller than wanted; the bound's rows are applied here.
pub(crate) async fn read_bounded<T>(
    client: &mut Object,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    bound: ReadBound,
    item: impl Fn(&Row) -> Result<(T, usize)>,
) -> Result<ReadPage<T>> {
    let wanted = usize::try_from(bound.rows.max(0)).unwrap_or(usize::MAX);
    let mut items = Vec::new();
    if wanted == 0 {
        return Ok(ReadPage { items, more: true });
    }
    let mut bytes = 0usize;
    let mut more = false;
    // A portal lives in a transaction; this one only reads.
    let tx = client.build_transaction().read_only(true).start().await?;
    let stmt = tx.prepare_cached(sql).await?;
    let portal = tx.bind(&stmt, params).await?;
    'fetch: loop {
        let rows = tx.query_portal(&portal, FETCH_ROWS).await?;
        let last = rows.len() < FETCH_ROWS as usize;
        for row in &rows {
            let (value, size) = item(row)?;
            items.push(value);
            bytes = bytes.saturating_add(size);
            if items.len() >= wanted || bytes >= bound.bytes {
                more = true;
                break 'fetch;
            }
        }
        if last {
            break;
        }
    }
    tx.commit().await?;
    Ok(ReadPage { items, more })
}
