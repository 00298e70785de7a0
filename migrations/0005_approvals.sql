-- The approvals given so far to a call that needs several people
-- (`approvals = { required, from }` of its tool; README, "Approvals from
-- several people"): `[{principal, answeredBy, answeredAt, message?}]`.
-- Null for every other call. Nullable and without default: adding it
-- rewrites nothing.
ALTER TABLE tool_calls ADD COLUMN approvals jsonb;

-- The view's `tc.*` was expanded when it was made: made again, it has the
-- columns added since (`decision`, `approvals`).
DROP VIEW tool_calls_whole;
CREATE VIEW tool_calls_whole AS
SELECT tc.*,
       COALESCE(tc.arguments,
         (SELECT c.call->'arguments'
          FROM journal j, jsonb_array_elements(j.value->'toolCalls') WITH ORDINALITY AS c(call, n)
          WHERE j.run_id = tc.run_id AND j.position = tc.arguments_position AND j.packed = 0
            AND c.call->>'id' = tc.id
          ORDER BY c.n LIMIT 1)) AS arguments_whole
FROM tool_calls tc;
