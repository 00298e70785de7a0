//! The SQL side of `journal.rs`: a model entry (`model:<n>`, immutable)
//! holds the response, its text and tool calls with their arguments.
//! Written in the same commit as that entry,
//! * a call row it proposed, with the same arguments, stores only the
//!   entry's position (`tool_calls.arguments_position`;
//!   `journal::proposing_entry` decides); a park that changes the
//!   arguments writes them on the row, which then wins;
//! * the assistant message it gave stores only the entry's position
//!   (`messages.body_position`; `journal::message_entry` decides).
//!
//! Every other row stores its own. Each reader selects through these
//! expressions, a primary-key lookup of one journal row. Model entries are
//! stored whole (`journal::pack` packs only persist entries), which the
//! expressions check (`packed = 0`): they would read nothing rather than
//! serve a packed entry as if whole.

/// The arguments of the call row aliased `tc` in the query: its own, or
/// those of the first call with its id in the model entry at
/// `arguments_position` (`journal::proposed_arguments` reads the
/// same). A primary-key lookup of one journal row.
macro_rules! call_arguments_sql {
    () => {
        "COALESCE(tc.arguments,
           (SELECT c.call->'arguments'
            FROM journal j, jsonb_array_elements(j.value->'toolCalls') WITH ORDINALITY AS c(call, n)
            WHERE j.run_id = tc.run_id AND j.position = tc.arguments_position AND j.packed = 0
              AND c.call->>'id' = tc.id
            ORDER BY c.n LIMIT 1))"
    };
}

/// The body of the message row aliased `m` in the query: its own, or the
/// assistant message of the model entry at `body_position`, built key for
/// key as `journal::assistant_message` builds it.
macro_rules! message_body_sql {
    () => {
        "COALESCE(m.body,
           (SELECT jsonb_build_object('role', 'assistant')
                   || CASE WHEN j.value ? 'text'
                           THEN jsonb_build_object('content', j.value->'text') ELSE '{}' END
                   || CASE WHEN j.value ? 'toolCalls'
                           THEN jsonb_build_object('toolCalls', j.value->'toolCalls') ELSE '{}' END
            FROM journal j
            WHERE j.run_id = m.run_id AND j.position = m.body_position AND j.packed = 0))"
    };
}
