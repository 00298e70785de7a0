-- The expiry index holds only the open requests that expire. Keyed on
-- `expires_at` alone, it once held every open request, so a statement
-- reading the open requests of one thread or run could scan it whole (and
-- so read every open request of the database): on tables analyzed while
-- empty the planner costs every index alike. A request without an expiry
-- is not in it now, and only a statement that asks for an expiry
-- (`expires_at <= now()` says it is not null) can use it. Building it reads
-- the table once, under a lock that holds writes to `tool_calls` back.
DROP INDEX tool_calls_expiry_idx;
CREATE INDEX tool_calls_expiry_idx ON tool_calls (expires_at)
    WHERE status = 'pending_approval' AND expires_at IS NOT NULL;
