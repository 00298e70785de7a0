-- A self-parking tool's request (reason, payload, ttl) is kept on its row
-- the moment the tool returns it, before the step's park commits: a retried
-- or replayed step then knows the call parked without calling the tool's
-- first half again, so the decision comes from durable state.
ALTER TABLE tool_calls ADD COLUMN park_request jsonb;

-- Found by `make bench`: resuming a parent counts its active children, and
-- respond finds a call by thread; both scanned without these.
CREATE INDEX runs_parent_idx ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX tool_calls_thread_call_idx ON tool_calls (thread_id, id);
