-- Found by `make bench` (issue 9): events were the largest table per parked
-- thread (2,302 of 6,390 bytes), because an event's data repeated what its
-- row and its tool call already hold: the run id beside `run_id`, and a
-- parked approval's arguments in both TOOL_CALL and INPUT_REQUIRED beside
-- the call row's. `packed` says what the stored data leaves out
-- (agentenkit_core::stored_event: 1 = runId, 2 = arguments, read from
-- tool_calls (run_id, data->>'toolCallId')); readers put it back, so the
-- data served is what was written. Rows written before this have 0.
ALTER TABLE events ADD COLUMN packed smallint NOT NULL DEFAULT 0;

-- The stream no longer guesses visibility from transaction ids (event ids
-- are handed out in commit order under the thread's event lock since
-- INSERT_EVENT_SQL), so nothing reads `xid`.
ALTER TABLE events DROP COLUMN xid;
