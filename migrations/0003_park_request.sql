-- A self-parking tool's request (reason, payload, ttl) is kept on its row
-- the moment the tool returns it, before the step's park commits: a retried
-- or replayed step then knows the call parked without calling the tool's
-- first half again, so the decision comes from durable state.
ALTER TABLE tool_calls ADD COLUMN park_request jsonb;
