-- Found by `make bench` (issue 9): a parked approval's
-- `persist:toolcall:<callId>` journal entry, stored packed, was a row of
-- about 110 bytes and a primary-key entry for a value of two fields, the
-- call's kind and tool type, which its call row inserted in the same
-- commit holds too and never changes once parked (only the park of a
-- proposed call sets them). Such an entry is now not written to `journal`:
-- the call row names its position, and every reader reads the view
-- `journal_entries`, which puts the entry back as it was stored (packed:
-- `agentenkit_core::stored_journal` restores the call's id, name and
-- arguments from its model entry). Stores writing `unbatched` or `whole`
-- rows, for the versions before during a rolling upgrade, still write it.
ALTER TABLE tool_calls ADD COLUMN persist_position integer;

CREATE VIEW journal_entries AS
SELECT run_id, position, name, value, packed FROM journal
UNION ALL
SELECT run_id, persist_position, 'persist:toolcall:' || id,
       jsonb_build_object('kind', kind, 'toolType', tool_type), 1::smallint
FROM tool_calls
WHERE persist_position IS NOT NULL;
