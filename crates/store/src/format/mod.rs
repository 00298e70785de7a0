//! How rows are stored: what a row leaves out because another row written
//! in the same commit holds it, and how a reader puts it back. Readers see
//! exactly what was written (the property tests of each module check the
//! pair is lossless); only the bytes on disk differ.
//!
//! * [`event`]: an event's data without its run id, a parked call's
//!   arguments and fields, a message, or its run's name and depth, each
//!   held by a row it refers to (`events.packed` says which).
//! * [`journal`]: a `persist:toolcall:<id>` entry without the call's id,
//!   name and arguments, which its model entry holds (`journal.packed`);
//!   and which call rows and assistant messages of a commit read their
//!   arguments or body from one of its model entries
//!   (`tool_calls.arguments_position`, `messages.body_position`).
//!
//! Encoding is per commit, in [`encode`]: `StoredJournal` packs its
//! journal entries and says where its call rows and messages find what
//! they hold, `known_rows` what each event may leave to the rows of the
//! commit, and `MessageWithEvent` which message its `MESSAGE` event names
//! instead of repeating it; each event then goes through `event::pack`. Decoding is `event::unpack` and `journal::unpack`, and,
//! in SQL, the views `tool_calls_whole` and `messages_whole`
//! (`migrations/0001_schema.sql`), which every reader of those rows reads.

pub(crate) mod encode;
pub(crate) mod event;
pub(crate) mod journal;
