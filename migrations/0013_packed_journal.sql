-- A `persist:toolcall:<callId>` entry repeated the call's id, name and
-- arguments exactly as the model entry just before it holds them; it is
-- now stored without them (`packed` = 1, agentenkit_core::stored_journal)
-- and read back whole, so the journal served and replayed is unchanged.
-- Both entries are immutable. Rows written before this have 0.
ALTER TABLE journal ADD COLUMN packed smallint NOT NULL DEFAULT 0;
