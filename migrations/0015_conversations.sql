-- Conversations with a busy thread (docs/conversations.md).
--
-- `followed`: a message waits in `queued_turns` for this run (a root run)
-- to end. The commit that ends it returns the flag, and whoever committed
-- starts the next queued turn; the reaper starts any a crash left queued.
-- `cut`: the run's tree was cut away by an edit or a rollback: its
-- messages leave the conversation models see and that lists return (its
-- journal and events stay). Constant defaults: adding them rewrites
-- nothing.
ALTER TABLE runs ADD COLUMN followed boolean NOT NULL DEFAULT false,
                 ADD COLUMN cut boolean NOT NULL DEFAULT false;

-- Messages sent with `onActive: "enqueue"` while a run was active, in the
-- order the API accepted them (`position`, taken under the thread's lock).
-- `run_id` is the run each will start, named in the 202 that accepted it.
CREATE TABLE queued_turns (
    position    bigserial PRIMARY KEY,
    thread_id   uuid NOT NULL REFERENCES threads (id),
    run_id      uuid NOT NULL UNIQUE,
    content     text NOT NULL,
    traceparent text,
    tracestate  text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX queued_turns_thread_idx ON queued_turns (thread_id, position);
