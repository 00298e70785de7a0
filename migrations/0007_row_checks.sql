-- A statement that must change exactly one row checks it in the database
-- (crates/store/src/pipeline.rs wraps it as
-- `WITH changed AS (... RETURNING 1) SELECT expect_one_row(count)`), so a
-- failed check aborts the transaction where it runs. A worker's commit can
-- then send BEGIN, its statements and COMMIT in one round trip: the COMMIT
-- of an aborted transaction rolls it back, so nothing after a failed fence
-- or row check is ever committed.
CREATE FUNCTION expect_one_row(changed bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF changed <> 1 THEN
        RAISE EXCEPTION 'expected to change one row, changed %', changed
            USING ERRCODE = 'AK001';
    END IF;
    RETURN changed;
END
$$;
