//! Where a call row's arguments are. A call proposed in the same commit as
//! the model entry that proposed it, with the same arguments, stores only
//! that entry's journal position (`arguments_position`, migration 0014;
//! `agentenkit_core::stored_journal::proposing_entry` decides); every other
//! row stores them. Journal entries never change, and a park that changes
//! a call's arguments writes them on the row, which then wins.

/// The arguments of the call row aliased `tc` in the query: its own, or
/// those of the first call with its id in the model entry at
/// `arguments_position` (`stored_journal::proposed_arguments` reads the
/// same). A primary-key lookup of one journal row.
macro_rules! call_arguments_sql {
    () => {
        "COALESCE(tc.arguments,
           (SELECT c.call->'arguments'
            FROM journal j, jsonb_array_elements(j.value->'toolCalls') WITH ORDINALITY AS c(call, n)
            WHERE j.run_id = tc.run_id AND j.position = tc.arguments_position
              AND c.call->>'id' = tc.id
            ORDER BY c.n LIMIT 1))"
    };
}
