-- An outbox row now lives until its message has been handled, not until it
-- was published: the handler that consumes the message deletes the row (by
-- its key) in the transaction it commits anyway, so publishing costs no
-- transaction of its own. `due_at` is when the message should have been
-- handled at the earliest (creation + delay); the reaper re-publishes rows
-- left well past it.
ALTER TABLE outbox ADD COLUMN key text;
ALTER TABLE outbox ADD COLUMN due_at timestamptz;
UPDATE outbox SET
    key = CASE message->>'type'
            WHEN 'segment' THEN 'segment:' || (message->>'runId') || ':' || (message->>'seq')
            ELSE 'expiry:' || (message->>'runId') || ':' || (message->>'toolCallId') END,
    due_at = created_at + delay_ms * interval '1 millisecond';
ALTER TABLE outbox ALTER COLUMN key SET NOT NULL;
ALTER TABLE outbox ALTER COLUMN due_at SET NOT NULL;
CREATE INDEX outbox_key_idx ON outbox (key);
CREATE INDEX outbox_due_idx ON outbox (due_at);
DROP INDEX outbox_created_idx;
