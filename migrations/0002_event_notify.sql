-- Every new event wakes the API processes streaming its thread (LISTEN
-- agentenkit_events). A trigger rather than a statement in each writer:
-- no extra round trip, and no writer can forget it. Notifications are
-- delivered at commit, so a listener never sees an uncommitted event.
CREATE FUNCTION agentenkit_notify_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('agentenkit_events', NEW.thread_id::text);
    RETURN NULL;
END;
$$;

CREATE TRIGGER events_notify AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION agentenkit_notify_event();
