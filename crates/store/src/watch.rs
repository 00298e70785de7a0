//! Wake-ups for live readers, by polling the `events` table.
//!
//! A NOTIFY per event made every committing transaction take the cluster's
//! notify lock until its WAL was flushed, so no two commits could share a
//! flush. Readers now ask instead: an [`EventWatch`] remembers the highest
//! event id it has seen and, cheaply through the primary key, which threads
//! gained events past it.
//!
//! Ids are handed out at insert and become visible at commit, so a lower id
//! can appear after a higher one. An id skipped over is a *gap*: the watch
//! asks for it again until every transaction that was running when the gap
//! was seen has ended (the snapshot's `xmin` has passed the `xmax` seen
//! then) and at least [`GAP_MIN_AGE`] has gone by. A gap that never fills
//! (a rolled-back insert) is then dropped.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agentenkit_core::ThreadId;
use uuid::Uuid;

use crate::{Result, Store};

/// Rows below the highest one at start that the first poll looks at again:
/// an insert in flight when the watch starts may commit below the maximum.
const START_LOOKBACK: i64 = 256;
/// At most this many new events are read per poll; the rest come next poll.
const POLL_LIMIT: i64 = 10_000;
/// A gap is asked for at least this long (covers an id handed out just
/// before its transaction took an xid).
const GAP_MIN_AGE: Duration = Duration::from_secs(1);
/// Past this many open gaps the oldest are dropped; a reader that misses a
/// wake-up still re-reads on its own timer.
const MAX_GAPS: usize = 10_000;

/// Which threads gained events since the last poll. See the module docs.
#[derive(Debug)]
pub struct EventWatch {
    /// Every id at or below this has been seen or is a gap.
    floor: i64,
    gaps: BTreeMap<i64, Gap>,
}

#[derive(Debug, Clone, Copy)]
struct Gap {
    /// The snapshot's `xmax` when the gap was first seen.
    xmax: i64,
    seen_at: Instant,
}

/// One poll's answer, before it is applied to the watch.
#[derive(Debug, Default)]
struct Polled {
    xmin: i64,
    xmax: i64,
    /// `(id, thread)` of every row read, new or filling a gap.
    rows: Vec<(i64, ThreadId)>,
}

impl Store {
    /// Starts watching for new events from now (and a short look back).
    pub async fn event_watch(&self) -> Result<EventWatch> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT coalesce(max(id), 0) FROM events", &[])
            .await?;
        let max: i64 = row.get(0);
        Ok(EventWatch {
            floor: (max - START_LOOKBACK).max(0),
            gaps: BTreeMap::new(),
        })
    }

    /// The threads that gained events since the last poll, each once. A
    /// thread may be reported again later (a spurious wake-up is harmless:
    /// the reader re-reads and finds nothing new).
    pub async fn poll_events(&self, watch: &mut EventWatch) -> Result<Vec<ThreadId>> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT 0::bigint, NULL::uuid,
                        pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint
                 FROM pg_current_snapshot() s
                 UNION ALL
                 (SELECT id, thread_id, NULL, NULL FROM events
                  WHERE id > $1 ORDER BY id LIMIT $3)
                 UNION ALL
                 SELECT id, thread_id, NULL, NULL FROM events WHERE id = ANY($2)",
            )
            .await?;
        let gaps: Vec<i64> = watch.gaps.keys().copied().collect();
        let rows = client
            .query(&stmt, &[&watch.floor, &gaps, &POLL_LIMIT])
            .await?;
        let mut polled = Polled::default();
        for row in &rows {
            match row.get::<_, Option<Uuid>>(1) {
                None => {
                    polled.xmin = row.get(2);
                    polled.xmax = row.get(3);
                }
                Some(thread) => polled.rows.push((row.get(0), ThreadId(thread))),
            }
        }
        Ok(watch.apply(polled, Instant::now()))
    }
}

impl EventWatch {
    fn apply(&mut self, polled: Polled, now: Instant) -> Vec<ThreadId> {
        let mut woken: Vec<ThreadId> = Vec::new();
        let mut new_ids: Vec<i64> = Vec::new();
        for (id, thread) in polled.rows {
            if id > self.floor {
                new_ids.push(id);
            } else {
                self.gaps.remove(&id);
            }
            if !woken.contains(&thread) {
                woken.push(thread);
            }
        }
        new_ids.sort_unstable();
        let mut expected = self.floor + 1;
        for id in &new_ids {
            // A jump wider than the cap keeps only its top (see MAX_GAPS).
            let lowest = expected.max(id - MAX_GAPS as i64);
            for missing in lowest..*id {
                self.gaps.insert(
                    missing,
                    Gap {
                        xmax: polled.xmax,
                        seen_at: now,
                    },
                );
            }
            expected = id + 1;
        }
        if let Some(last) = new_ids.last() {
            self.floor = *last;
        }
        // Every transaction running when the gap was seen has ended, and the
        // gap is old enough: the id will never show up.
        self.gaps.retain(|_, gap| {
            polled.xmin < gap.xmax || now.duration_since(gap.seen_at) < GAP_MIN_AGE
        });
        while self.gaps.len() > MAX_GAPS {
            self.gaps.pop_first();
        }
        woken
    }

    /// Ids skipped over and still asked for.
    pub fn open_gaps(&self) -> usize {
        self.gaps.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(n: u128) -> ThreadId {
        ThreadId(Uuid::from_u128(n))
    }

    fn watch(floor: i64) -> EventWatch {
        EventWatch {
            floor,
            gaps: BTreeMap::new(),
        }
    }

    #[test]
    fn new_rows_wake_their_threads_once_and_move_the_floor() {
        let mut w = watch(10);
        let now = Instant::now();
        let woken = w.apply(
            Polled {
                xmin: 5,
                xmax: 9,
                rows: vec![(11, thread(1)), (12, thread(2)), (13, thread(1))],
            },
            now,
        );
        assert_eq!(woken, vec![thread(1), thread(2)]);
        assert_eq!(w.floor, 13);
        assert_eq!(w.open_gaps(), 0);
    }

    #[test]
    fn a_skipped_id_is_asked_for_until_it_commits() {
        let mut w = watch(10);
        let now = Instant::now();
        w.apply(
            Polled {
                xmin: 5,
                xmax: 9,
                rows: vec![(13, thread(1))],
            },
            now,
        );
        assert_eq!(w.gaps.keys().copied().collect::<Vec<_>>(), vec![11, 12]);
        // Id 11 commits late: it wakes its thread and leaves the gaps.
        let woken = w.apply(
            Polled {
                xmin: 6,
                xmax: 9,
                rows: vec![(11, thread(7))],
            },
            now,
        );
        assert_eq!(woken, vec![thread(7)]);
        assert_eq!(w.gaps.keys().copied().collect::<Vec<_>>(), vec![12]);
        assert_eq!(w.floor, 13);
    }

    #[test]
    fn a_gap_is_dropped_only_once_its_transactions_ended_and_it_is_old() {
        let mut w = watch(0);
        let start = Instant::now();
        w.apply(
            Polled {
                xmin: 5,
                xmax: 9,
                rows: vec![(2, thread(1))],
            },
            start,
        );
        assert_eq!(w.open_gaps(), 1);
        // Old enough, but a transaction running then (xid 8) may still be.
        let later = start + GAP_MIN_AGE * 2;
        w.apply(
            Polled {
                xmin: 8,
                xmax: 12,
                rows: vec![],
            },
            later,
        );
        assert_eq!(w.open_gaps(), 1);
        // All of them ended, but not long enough ago.
        let mut fresh = watch(0);
        fresh.apply(
            Polled {
                xmin: 5,
                xmax: 9,
                rows: vec![(2, thread(1))],
            },
            start,
        );
        fresh.apply(
            Polled {
                xmin: 9,
                xmax: 12,
                rows: vec![],
            },
            start,
        );
        assert_eq!(fresh.open_gaps(), 1);
        // Both: gone.
        w.apply(
            Polled {
                xmin: 9,
                xmax: 12,
                rows: vec![],
            },
            later,
        );
        assert_eq!(w.open_gaps(), 0);
    }

    #[test]
    fn open_gaps_are_capped() {
        let mut w = watch(0);
        w.apply(
            Polled {
                xmin: 1,
                xmax: 2,
                rows: vec![(MAX_GAPS as i64 + 100, thread(1))],
            },
            Instant::now(),
        );
        assert_eq!(w.open_gaps(), MAX_GAPS);
        // The oldest (lowest) were dropped.
        assert_eq!(w.gaps.keys().next(), Some(&100));
    }
}
