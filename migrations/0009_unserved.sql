-- When workers first handed a run back because none of them could serve
-- its agent version (README, "Deploying changes"); NULL once a worker
-- commits a step of it. A run unserved for longer than the workers'
-- AGENTENKIT_UNSERVED_TIMEOUT fails, naming the version and why.
-- Nullable and without default: adding it rewrites nothing.
ALTER TABLE runs ADD COLUMN unserved_since timestamptz;
