-- What a person decided beyond yes or no (README, "Decisions"): the
-- arguments they approved the call with when they edited them, their note,
-- and the argumentsHash of the call they decided on: `{arguments?,
-- message?, argumentsHash}`. Null for calls settled otherwise (a function
-- call, an expiry). Nullable and without default: adding it rewrites nothing.
ALTER TABLE tool_calls ADD COLUMN decision jsonb;
