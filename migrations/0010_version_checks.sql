-- When the reaper last found an old agent version still referenced by a
-- run (README, "Deploying changes"): it looks again a day later at the
-- soonest, so the scan of the runs that check needs is rare.
ALTER TABLE agent_versions ADD COLUMN checked_at timestamptz;
