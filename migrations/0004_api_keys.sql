-- API keys with scopes, made and revoked with `agentenkit keys` (README,
-- "Keys and scopes"). The key itself is never stored: only the SHA-256 of
-- it (a key is 244 random bits, so a fast hash is enough), looked up on
-- every request. A revoked key keeps its row, for the journal's `keyId`.
CREATE TABLE api_keys (
    id uuid PRIMARY KEY,
    owner text NOT NULL,
    name text NOT NULL,
    secret_sha256 bytea NOT NULL UNIQUE,
    scopes text[] NOT NULL,
    -- The approver groups the key's holder belongs to (multi-party
    -- approvals: `approvals = { required, from }` of a tool).
    groups text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
