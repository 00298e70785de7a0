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

/// Rows of the first fetch from the portal: few, so a page of large rows
/// holds little past its bound before their sizes are known.
const FIRST_FETCH: usize = 4;

/// The most rows one fetch takes: a page of small rows costs a few round
/// trips.
const MAX_FETCH: usize = 64;

/// How many rows the next fetch takes, after `read` rows of `bytes` in
/// all, with `rows_left` rows and `bytes_left` bytes of the bound to go:
/// twice the last fetch (`last`) while rows are small, never more than the
/// rows of the size seen so far that fit in what is left of the bound (at
/// least one), nor more than the rows still wanted. So a page of 1 MiB
/// rows under a 4 MiB bound holds 5 of them, not 64.
fn next_fetch(
    last: usize,
    read: usize,
    bytes: usize,
    rows_left: usize,
    bytes_left: usize,
) -> usize {
    let grown = last.saturating_mul(2).clamp(1, MAX_FETCH);
    let average = bytes.div_ceil(read.max(1)).max(1);
    let fitting = (bytes_left / average).max(1);
    grown.min(fitting).min(rows_left.max(1))
}

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
    let mut fetch = FIRST_FETCH.min(wanted);
    'fetch: loop {
        let rows = tx.query_portal(&portal, fetch as i32).await?;
        let last = rows.len() < fetch;
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
        fetch = next_fetch(
            fetch,
            items.len(),
            bytes,
            wanted - items.len(),
            bound.bytes - bytes,
        );
    }
    tx.commit().await?;
    Ok(ReadPage { items, more })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn small_rows_are_fetched_more_at_a_time_up_to_the_most() {
        let mut fetch = FIRST_FETCH;
        let mut read = 0;
        let mut sizes = Vec::new();
        for _ in 0..6 {
            read += fetch;
            fetch = next_fetch(fetch, read, read * 100, 10_000, 4 << 20);
            sizes.push(fetch);
        }
        assert_eq!(sizes, [8, 16, 32, 64, 64, 64]);
    }

    #[test]
    fn rows_near_the_bound_are_fetched_one_at_a_time() {
        // 4 rows of 900 KiB under 4 MiB: one more passes the bound.
        let read = 4 * (900 << 10);
        assert_eq!(next_fetch(4, 4, read, 996, (4 << 20) - read), 1);
    }

    proptest! {
        /// The next fetch is at least one row, no more rows than are
        /// wanted, and no more rows of the average size than fit in what
        /// is left (but one).
        #[test]
        fn a_fetch_stays_within_what_is_left(
            last in 1usize..=MAX_FETCH,
            read in 1usize..10_000,
            average in 1usize..(2 << 20),
            rows_left in 1usize..10_000,
            bytes_left in 0usize..(8 << 20),
        ) {
            let bytes = read * average;
            let next = next_fetch(last, read, bytes, rows_left, bytes_left);
            prop_assert!((1..=MAX_FETCH).contains(&next));
            prop_assert!(next <= rows_left);
            prop_assert!(next <= last * 2);
            prop_assert!(next == 1 || next * average <= bytes_left);
        }
    }
}
