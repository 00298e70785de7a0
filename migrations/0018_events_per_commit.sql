-- Found by `make bench` (issue 9): a parked thread's events were four rows
-- (RUN_STARTED at the start, then MESSAGE, TOOL_CALL and INPUT_REQUIRED in
-- the park's one commit), and a row costs about 80 bytes before its data
-- (header, id, thread, run, time) plus an entry in each of two indexes,
-- while the data of most packed events is a few bytes. The events of one
-- commit now share one row: `data` is the array of their data and `layout`
-- two bytes per event, its type's code (event_type_codes) and its packed
-- bits (agentenkit_core::stored_event). A row of one event is written as
-- before (`layout` null), and so is every row of a store writing `whole` or
-- `unbatched` rows, for processes of the versions before during a rolling
-- upgrade (they read `type` '' of a shared row as an unknown event type).
ALTER TABLE events ADD COLUMN layout bytea;

-- The events of a row take consecutive ids from its own: row ids are 16
-- apart (agentenkit_core::event_row::MAX_EVENTS_PER_ROW), every one above
-- the ids handed out before, and a reader after id N reads rows above N - 16.
ALTER SEQUENCE events_id_seq INCREMENT BY 16;

-- Stored codes: never renumbered (agentenkit_core::EventType::code; a test
-- checks this table against it).
CREATE TABLE event_type_codes (
    code smallint PRIMARY KEY,
    type text NOT NULL UNIQUE
);
INSERT INTO event_type_codes (code, type) VALUES
    (1, 'RUN_STARTED'), (2, 'MESSAGE'), (3, 'TOOL_CALL'), (4, 'TOOL_RESULT'),
    (5, 'INPUT_REQUIRED'), (6, 'INPUT_RESOLVED'), (7, 'ELICITATION'),
    (8, 'RUN_COMPLETED'), (9, 'RUN_FAILED'), (10, 'RUN_CANCELLED');

-- One row per event, whichever way it is stored: what every reader reads.
-- A shared row's `message_id` is that of its one MESSAGE event (packed
-- bit 4), `row_id` the row's own id (for the index: rows above N - 16 hold
-- every event above N). A code without a type reads as type null.
CREATE VIEW event_items AS
SELECT e.id AS row_id,
       e.id + i.n AS id,
       e.thread_id,
       e.run_id,
       CASE WHEN e.layout IS NULL THEN e.type ELSE c.type END AS type,
       CASE WHEN e.layout IS NULL THEN e.data ELSE e.data -> i.n END AS data,
       CASE WHEN e.layout IS NULL THEN e.packed
            ELSE get_byte(e.layout, 2 * i.n + 1)::smallint END AS packed,
       e.message_id,
       e.created_at
FROM events e
CROSS JOIN LATERAL generate_series(0, coalesce(length(e.layout) / 2 - 1, 0)) AS i(n)
LEFT JOIN event_type_codes c
  ON e.layout IS NOT NULL AND c.code = get_byte(e.layout, 2 * i.n);
