-- The person holding a key (`agentenkit keys create --holder`): approvals
-- of a call that needs several people count holders, so one person with
-- two keys is counted once. NULL: the key is its own holder (as before).
-- Nullable and without default: adding it rewrites nothing.
ALTER TABLE api_keys ADD COLUMN holder text;
