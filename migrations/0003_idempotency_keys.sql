-- Idempotency keys of batch decisions (`POST /agent/decisions` with an
-- `Idempotency-Key` header; README, "Deciding many at once"). One row per
-- owner and key: the canonical hash of the request it was first used with,
-- who holds it now (`claimed_at`, while `status` is null), the response once
-- the request completed, and — written in the same transaction as each
-- delivered answer — the result of every item that settled something, so a
-- retry after a crash answers those items as the first attempt did.
CREATE TABLE idempotency_keys (
    owner text NOT NULL,
    key text NOT NULL,
    request_hash text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    claimed_at timestamptz NOT NULL DEFAULT now(),
    status smallint,
    response jsonb,
    items jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (owner, key)
);

-- The reaper deletes keys past their retention, oldest first.
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
