-- An assistant message repeated its model entry in the journal (the
-- response's text and tool calls, the arguments a third time). A message
-- written in the same commit as that entry, and equal to what it holds, now
-- stores the entry's position instead of its body
-- (agentenkit_core::stored_journal::message_entry) and is read with it
-- (crates/store/src/in_journal.rs). Rows written before this keep their
-- bodies; user and tool messages always do.
ALTER TABLE messages ALTER COLUMN body DROP NOT NULL;
ALTER TABLE messages ADD COLUMN body_position int;
ALTER TABLE messages ADD CONSTRAINT messages_body_check
    CHECK (body IS NOT NULL OR body_position IS NOT NULL) NOT VALID;
-- Not validated: every existing row has its body (the column was NOT NULL
-- until now), and a VALIDATE here would scan the whole table while this
-- migration's transaction holds it exclusively. New rows are checked.
