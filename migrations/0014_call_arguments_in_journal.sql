-- A call row repeated the arguments its model entry in the journal holds
-- (`toolCalls`, the first call with the row's id). A call proposed in the
-- same commit as that entry, with the same arguments, now stores the
-- entry's position instead (agentenkit_core::stored_journal::proposing_entry)
-- and is read with them (crates/store/src/in_journal.rs). Journal entries
-- are immutable; a park that changes the arguments writes them on the row,
-- which then wins. Rows written before this keep their arguments.
ALTER TABLE tool_calls ALTER COLUMN arguments DROP NOT NULL;
ALTER TABLE tool_calls ADD COLUMN arguments_position int;
ALTER TABLE tool_calls ADD CONSTRAINT tool_calls_arguments_check
    CHECK (arguments IS NOT NULL OR arguments_position IS NOT NULL) NOT VALID;
-- Not validated: every existing row has its arguments (the column was NOT NULL
-- until now), and a VALIDATE here would scan the whole table while this
-- migration's transaction holds it exclusively. New rows are checked.
