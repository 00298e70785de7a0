-- A NOTIFY per event made each committing transaction hold the cluster's
-- notify queue lock until its WAL was flushed, so commits could not share a
-- flush. Live readers now poll for new event ids instead (EventWatch).
DROP TRIGGER events_notify ON events;
DROP FUNCTION agentenkit_notify_event();
