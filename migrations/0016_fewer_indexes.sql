-- Found by `make bench` (issue 9), bytes per parked thread by relation:
-- three indexes cost a parked thread 131 bytes and served nothing a
-- primary key or another index could not.
--
-- * runs_thread_idx (thread_id, created_at): no query reads runs by thread
--   (a thread's runs are reached through threads.current_run_id and
--   root_run_id), and nothing deletes threads, so no foreign-key check
--   needs it either.
-- * runs_root_idx (root_run_id) held an entry for every root run, whose
--   root_run_id is its own id, which runs_pkey finds already; stopping a
--   thread (the one reader) now asks for `id = root OR (root_run_id = root
--   AND parent_run_id IS NOT NULL)`, served by the primary key and this
--   index narrowed to sub-agent runs.
-- * messages_thread_idx (thread_id, id) beside messages_pkey (id): every
--   read of messages is by thread (a thread's history, a MESSAGE event's
--   row joined on thread and id), so (thread_id, id) becomes the primary
--   key and the id-only one goes.
--
-- On a large deployment run these as CREATE INDEX CONCURRENTLY and
-- ADD CONSTRAINT ... USING INDEX by hand before upgrading: here each
-- statement holds its table exclusively while it builds.
DROP INDEX runs_thread_idx;
DROP INDEX runs_root_idx;
CREATE INDEX runs_root_idx ON runs (root_run_id) WHERE parent_run_id IS NOT NULL;
CREATE UNIQUE INDEX messages_thread_id_key ON messages (thread_id, id);
ALTER TABLE messages DROP CONSTRAINT messages_pkey;
ALTER TABLE messages ADD CONSTRAINT messages_pkey PRIMARY KEY USING INDEX messages_thread_id_key;
DROP INDEX messages_thread_idx;
