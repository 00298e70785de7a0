-- Found by `make bench` (issue 9): an outbox row stored its message twice,
-- as `message` (jsonb) and as `key`, which names the message whole
-- (QueueMessage::from_outbox_key), and the key's btree index cost more per
-- parked thread (188 bytes) than the row's heap did beside it. Rows are
-- now written with the key alone; `message` stays for rows written before
-- (and by processes of the previous version during a rolling deploy), and
-- readers take it when it is there. The key is only ever looked up by
-- equality (the consumer's delete), which a hash index serves with an
-- entry a fraction of the key's size.
ALTER TABLE outbox ALTER COLUMN message DROP NOT NULL;
DROP INDEX outbox_key_idx;
CREATE INDEX outbox_key_idx ON outbox USING hash (key);
