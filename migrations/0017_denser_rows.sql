-- Found by `make bench` (issue 9): of the 631 bytes a parked thread's run
-- took, 151 were its row. The rest were the versions its status changes
-- left (queued -> running -> waiting: none HOT, runs_active_idx is on
-- status) and the fifth of every page fillfactor 80 held back for HOT
-- updates. Dropping runs_active_idx made all six updates of a cycle HOT and
-- the bytes did not move (631 -> 631, pages keep their dead versions until
-- a full page is pruned), while fillfactor 100 let pages fill, be pruned
-- and take their rows' next versions again: 631 -> 221 bytes at 1 client,
-- 565 -> 180 at 8. The reserve was for HOT lease extensions, one of a
-- cycle's six updates, and most stay HOT without it (0.83 of 1 per cycle at
-- 1 client, 0.92 at 8).
ALTER TABLE runs SET (fillfactor = 100);

-- No query reads when a journal entry was written (the entries are ordered
-- by position, and their events carry the time), and every entry paid 8
-- bytes and its alignment for it: 762 -> 705 bytes of journal per parked
-- thread. INSERTs of the version before name no created_at (they take the
-- default), so a rolling deploy goes on writing.
ALTER TABLE journal DROP COLUMN created_at;

-- outbox_pkey (id) was read by one statement, the reaper's claim, which now
-- addresses the rows it has just locked by ctid; an outbox row is deleted
-- by its key (outbox_key_idx). 49 bytes per parked thread. The id column
-- stays: logs and the relay name a row by it, and the version before still
-- inserts RETURNING id.
ALTER TABLE outbox DROP CONSTRAINT outbox_pkey;
