-- Fair shares (docs/budgets.md, "Fair shares"): a run started under a cap
-- (`max_concurrent_runs_per_owner`, an agent's `max_concurrent_runs`)
-- names its slot keys, and waits here, `held_since` set, while its owner
-- or its agent's key has its cap of runs running. Running: queued or
-- running and not held; a run waiting for a person holds no slot.
--
-- Nullable, no defaults: adding them rewrites nothing, and a run started
-- under no cap (every run of a deployment that sets none) has them NULL.
ALTER TABLE runs ADD COLUMN slot_owner text,
                 ADD COLUMN slot_owner_cap int,
                 ADD COLUMN slot_key text,
                 ADD COLUMN slot_key_cap int,
                 ADD COLUMN held_since timestamptz;

-- What a cap counts: the running runs of an owner, of a key. Small sets
-- (at most the cap each, plus runs started under an older, higher cap).
CREATE INDEX runs_slot_owner_running_idx ON runs (slot_owner)
    WHERE slot_owner IS NOT NULL AND held_since IS NULL AND status IN ('queued', 'running');
CREATE INDEX runs_slot_key_running_idx ON runs (slot_key)
    WHERE slot_key IS NOT NULL AND held_since IS NULL AND status IN ('queued', 'running');
-- The held runs of an owner, oldest first: what a slot set free admits.
CREATE INDEX runs_held_idx ON runs (slot_owner, held_since, id)
    WHERE held_since IS NOT NULL AND status = 'queued';

-- Whether run `run` may run now under its caps. Takes the owner's slot
-- lock (held to the end of the transaction): every admission and every
-- promotion of one owner's runs is decided under it, so two starts cannot
-- both take the last slot, and a run ending cannot miss a run held at the
-- same moment (whichever commits second sees the other). The counts are
-- read after the lock is taken: a VOLATILE function's queries each see
-- the transactions committed before they start.
CREATE FUNCTION run_slot_is_free(run uuid, owner text, owner_cap int, key text, key_cap int)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1702260341, hashtext(owner));
    IF owner_cap IS NOT NULL AND (
        SELECT count(*) FROM runs r
        WHERE r.slot_owner = owner AND r.held_since IS NULL
          AND r.status IN ('queued', 'running') AND r.id <> run) >= owner_cap THEN
        RETURN false;
    END IF;
    IF key_cap IS NOT NULL AND (
        SELECT count(*) FROM runs r
        WHERE r.slot_key = key AND r.held_since IS NULL
          AND r.status IN ('queued', 'running') AND r.id <> run) >= key_cap THEN
        RETURN false;
    END IF;
    RETURN true;
END $$;

-- Admits the oldest held runs of `owner` that fit under their caps now
-- (at most `up_to`), writing each one's segment to the outbox; returns
-- the outbox rows `(id, key)` to publish.
--
-- It looks at up to 1,000 held runs, oldest first, so that a key at its
-- cap with a long backlog (one user of a `fair_key` with hundreds of
-- runs) does not hide a younger run of another key that fits: a key found
-- full is skipped from then on without counting again. It stops early
-- once the owner is full for the run at the head (runs held under another
-- owner cap, from before the file changed, wait for the head's).
--
-- Nothing here waits on a row lock while holding the slot lock: a held
-- run another transaction has locked (stopping it, steering it) is
-- skipped, and admitted by the next run that stops or by the reaper.
CREATE FUNCTION admit_held_runs(owner text, up_to int)
RETURNS TABLE (id bigint, key text) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    held record;
    admitted int := 0;
    running bigint;
    full_keys text[] := '{}';
BEGIN
    PERFORM pg_advisory_xact_lock(1702260341, hashtext(owner));
    -- Under the lock only this transaction adds to the count; runs that
    -- stop meanwhile are seen by the next admission.
    SELECT count(*) INTO running FROM runs r
    WHERE r.slot_owner = owner AND r.held_since IS NULL AND r.status IN ('queued', 'running');
    FOR held IN
        SELECT r.id, r.segment_seq, r.slot_owner_cap, r.slot_key, r.slot_key_cap
        FROM runs r
        WHERE r.slot_owner = owner AND r.held_since IS NOT NULL AND r.status = 'queued'
        ORDER BY r.held_since, r.id
        LIMIT 1000
    LOOP
        EXIT WHEN admitted >= up_to;
        EXIT WHEN held.slot_owner_cap IS NOT NULL AND running >= held.slot_owner_cap;
        CONTINUE WHEN held.slot_key = ANY (full_keys);
        IF held.slot_key_cap IS NOT NULL AND (
            SELECT count(*) FROM runs r
            WHERE r.slot_key = held.slot_key AND r.held_since IS NULL
              AND r.status IN ('queued', 'running')) >= held.slot_key_cap THEN
            full_keys := full_keys || held.slot_key;
            CONTINUE;
        END IF;
        PERFORM 1 FROM runs r
        WHERE r.id = held.id AND r.held_since IS NOT NULL AND r.status = 'queued'
        FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        UPDATE runs SET held_since = NULL, updated_at = now() WHERE runs.id = held.id;
        RETURN QUERY
            INSERT INTO outbox (delay_ms, key, due_at)
            VALUES (0, 'segment:' || held.id::text || ':' || held.segment_seq, now())
            RETURNING outbox.id, outbox.key;
        admitted := admitted + 1;
        running := running + 1;
    END LOOP;
END $$;
