-- Agent versions (README, "Deploying changes"): each agent's resolved
-- definition, under the SHA-256 of its canonical JSON, recorded by every
-- process that loads an agent file. A run records the version it started
-- on and continues on it, whatever a later deploy says.
CREATE TABLE agent_versions (
    hash text PRIMARY KEY,
    agent text NOT NULL,
    definition jsonb NOT NULL,
    first_seen timestamptz NOT NULL DEFAULT now()
);

-- Nullable and without default: adding it rewrites nothing. NULL: a run
-- from before versions, or of an agent built in code (served by whatever
-- the worker has).
ALTER TABLE runs ADD COLUMN agent_version text;
