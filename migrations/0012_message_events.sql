-- A MESSAGE event written with its message (one statement: see
-- crates/store/src/message_with_event.rs) names that row instead of
-- repeating its body; `packed` bit 4 says so. Null for every other event.
ALTER TABLE events ADD COLUMN message_id bigint;
