-- The call-state rule of 0011, the same CASE, as one function call.
--
-- Why: Postgres keeps a CHECK as a node tree in text, and every statement
-- that writes the table reads that text back (stringToNode), simplifies it
-- and compiles it before its first row (ExecConstraints). `tool_calls_state`
-- was 11 KB of it, and an approval cycle writes `tool_calls` three times:
-- on a 2-core machine at 8 clients, ExecConstraints was 7.5 % of Postgres's
-- CPU (issue 38). A PL/pgSQL function is compiled once per session, and
-- the constraint's tree is now one call with the row's columns.
--
-- `tool_calls_status_check` goes: the CASE's `ELSE false` already refuses
-- any status no state has. The rule is the same, so the rows written under
-- 0011 hold under this one: NOT VALID skips a scan of the table under lock.
-- (A database where `VALIDATE CONSTRAINT tool_calls_state` was run, as 0011
-- suggests, has it NOT VALID again after this; running it again checks
-- the old rows under the function, without blocking writers.)
CREATE FUNCTION tool_call_state_is_possible(
    status text, reason text, answered_at timestamptz, answered_by text,
    result jsonb, payload jsonb, decision jsonb, approvals jsonb, defaulted text[]
) RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN CASE status
        WHEN 'proposed' THEN reason IS NULL AND answered_at IS NULL AND answered_by IS NULL
            AND result IS NULL AND payload IS NULL AND decision IS NULL
            AND approvals IS NULL AND defaulted IS NULL
        WHEN 'pending_approval' THEN reason IS NOT NULL AND answered_at IS NULL
            AND answered_by IS NULL AND result IS NULL AND payload IS NULL
            AND decision IS NULL AND defaulted IS NULL
        WHEN 'executed' THEN (reason IS NULL AND answered_at IS NULL AND decision IS NULL
                AND approvals IS NULL AND result IS NOT NULL)
            OR (reason IS NOT NULL AND answered_at IS NOT NULL)
        WHEN 'rejected' THEN result IS NOT NULL
            AND ((reason IS NULL AND answered_at IS NULL AND decision IS NULL)
                OR (reason IS NOT NULL AND answered_at IS NOT NULL))
        WHEN 'expired' THEN reason IS NOT NULL AND answered_at IS NOT NULL
            AND answered_by IS NULL AND result IS NOT NULL AND decision IS NULL
        WHEN 'failed' THEN reason IS NULL AND answered_at IS NULL AND decision IS NULL
            AND result IS NOT NULL
        WHEN 'cancelled' THEN answered_at IS NULL AND answered_by IS NULL
            AND result IS NULL AND decision IS NULL
        ELSE false
    END;
END
$$;

ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_state;
ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_status_check;
ALTER TABLE tool_calls ADD CONSTRAINT tool_calls_state CHECK (
    tool_call_state_is_possible(status, reason, answered_at, answered_by,
        result, payload, decision, approvals, defaulted)
) NOT VALID;
