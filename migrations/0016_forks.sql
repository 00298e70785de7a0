-- Forks of a thread (docs/conversations.md, "Forking a thread"): the thread
-- a fork was made from and the message it was made at, named in the
-- fork's view. No foreign key: a fork outlives nothing it names, and the
-- thread it came from may be erased on its own. Nullable, no default:
-- adding them rewrites nothing.
ALTER TABLE threads ADD COLUMN forked_from uuid,
                    ADD COLUMN forked_at_message bigint;
