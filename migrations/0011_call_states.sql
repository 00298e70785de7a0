-- A call's row holds only what its state has (crates/core/src/call.rs): the
-- indexed `status` says the state, and the columns of other states' data
-- stay empty. Every write of a call is one event of that module, written by
-- crates/store/src/calls.rs; this is the database's half of the same rule,
-- so no path can store a combination no state has (an expired call nobody
-- answered, a waiting one with a result, a proposed one with votes).
--
-- executed and rejected each have two shapes: settled without a wait (ran,
-- or refused because a person denied the same call before: no reason, no
-- answer) or decided by a person (the wait's reason and when it was
-- answered; an approved call's result comes once its tool ran).
--
-- NOT VALID: rows written before this version are not read again here (a
-- large table would be scanned under lock); every write from now on is
-- checked. `ALTER TABLE tool_calls VALIDATE CONSTRAINT tool_calls_state`
-- checks the old rows too, without blocking writers.
ALTER TABLE tool_calls ADD CONSTRAINT tool_calls_state CHECK (
    CASE status
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
    END
) NOT VALID;
