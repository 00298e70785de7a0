-- Provider limits (docs/budgets.md, "Provider limits"): a model's
-- `requests_per_minute` and `tokens_per_minute` hold across the fleet.
-- Each call a worker is about to make reserves a row here first; the rows
-- of the last 61 seconds (a second more than the provider's minute, for
-- the time between a reservation and its request) are what the limits
-- count. A call's row gets the tokens its provider reported once its step
-- commits (an estimate until then).
-- Steps of a run deferred in a row without progress (a provider asking to
-- wait, or a limit): a run past `MAX_DEFERRALS` fails instead of waiting
-- for ever. A new journal entry resets it, as it resets `attempts`.
ALTER TABLE runs ADD COLUMN deferrals int NOT NULL DEFAULT 0;

CREATE TABLE provider_calls (
    id        bigserial PRIMARY KEY,
    limit_key text NOT NULL,
    at        timestamptz NOT NULL DEFAULT now(),
    tokens    bigint NOT NULL DEFAULT 0
);
CREATE INDEX provider_calls_key_at_idx ON provider_calls (limit_key, at);

-- Reserves a call of `key` estimated at `tokens`, under `per_minute`
-- calls and `tokens_per_minute` tokens (either NULL: not limited): a row
-- `(reservation, 0)` when it may go now, else `(NULL, wait_ms)`, how long
-- until the calls that leave the window first make room. One call larger
-- than the whole token limit still goes once the window is empty.
-- Under a lock of the key (to the end of the caller's transaction): two
-- workers cannot both take the last place.
CREATE FUNCTION reserve_provider_call(key text, per_minute int, tokens_per_minute bigint, tokens bigint)
RETURNS TABLE (reservation bigint, wait_ms bigint) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    calls bigint;
    spent bigint;
    frees_at timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(1702260342, hashtext(key));
    DELETE FROM provider_calls p
    WHERE p.limit_key = key AND p.at <= clock_timestamp() - interval '61 seconds';
    SELECT count(*), coalesce(sum(p.tokens), 0) INTO calls, spent
    FROM provider_calls p WHERE p.limit_key = key;
    IF per_minute IS NOT NULL AND calls >= per_minute THEN
        SELECT p.at INTO frees_at FROM provider_calls p WHERE p.limit_key = key
        ORDER BY p.at, p.id OFFSET calls - per_minute LIMIT 1;
    ELSIF tokens_per_minute IS NOT NULL AND spent > 0 AND spent + tokens > tokens_per_minute THEN
        -- One statement: a usage recorded meanwhile (step commits do not
        -- take the lock) changes its total and its running sums together.
        SELECT w.at INTO frees_at FROM (
            SELECT p.at, p.id, sum(p.tokens) OVER (ORDER BY p.at, p.id) AS freed,
                   sum(p.tokens) OVER () AS total
            FROM provider_calls p WHERE p.limit_key = key) w
        WHERE w.total - w.freed + tokens <= tokens_per_minute OR w.freed = w.total
        ORDER BY w.at, w.id LIMIT 1;
    END IF;
    IF frees_at IS NOT NULL THEN
        RETURN QUERY SELECT NULL::bigint, greatest(1, ceil(extract(epoch FROM
            frees_at + interval '61 seconds' - clock_timestamp()) * 1000))::bigint;
        RETURN;
    END IF;
    RETURN QUERY
        INSERT INTO provider_calls (limit_key, at, tokens) VALUES (key, clock_timestamp(), tokens)
        RETURNING provider_calls.id, 0::bigint;
END $$;
