-- Found by `make bench` (issue 9): what a cycle's commits cost besides
-- their own rows.
--
-- 1. The append-only tables no longer carry foreign keys. Each insert into
--    them checked its run and thread with a KEY SHARE row lock (an index
--    probe, and a lock written into the parent row's header, WAL-logged),
--    a dozen per cycle; and a second update of a run row in one transaction
--    re-checked the run's own keys, which is how sibling sub-agents
--    deadlocked on their parent. Every writer of these rows writes them in
--    the transaction that fences the run's lease (or, for an answer, locks
--    the run), so the run and its thread exist when they are written; rows
--    are never deleted.
ALTER TABLE journal DROP CONSTRAINT IF EXISTS journal_run_id_fkey;
ALTER TABLE messages DROP CONSTRAINT IF EXISTS messages_run_id_fkey;
ALTER TABLE messages DROP CONSTRAINT IF EXISTS messages_thread_id_fkey;
ALTER TABLE events DROP CONSTRAINT IF EXISTS events_thread_id_fkey;
ALTER TABLE usage DROP CONSTRAINT IF EXISTS usage_run_id_fkey;
ALTER TABLE tool_calls DROP CONSTRAINT IF EXISTS tool_calls_run_id_fkey;
ALTER TABLE tool_calls DROP CONSTRAINT IF EXISTS tool_calls_thread_id_fkey;

-- 2. Extending a lease (every commit) changed `updated_at`, the key of the
--    reaper's index, so no update of a run was HOT and each rewrote every
--    index of `runs`. The reaper's index is now keyed on the status alone
--    (it scans the runs in flight, a small set, and sorts them); with room
--    left on each page, a lease extension updates the row in place.
DROP INDEX IF EXISTS runs_active_idx;
CREATE INDEX runs_active_idx ON runs (status) WHERE status IN ('queued', 'running');
ALTER TABLE runs SET (fillfactor = 80);
