-- Event ids are assigned at insert, not at commit: a stream that moved its
-- cursor past id 101 could miss id 100 committed a moment later. Each event
-- records its transaction, so a stream holds back events newer than a
-- transaction still in progress (for at most a second; see
-- Store::stream_events).
ALTER TABLE events ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
