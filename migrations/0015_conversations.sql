-- Conversations with a busy thread (docs/conversations.md).
--
-- `followed`: a message waits in `queued_turns` for this run (a root run)
-- to end. The commit that ends it returns the flag, and whoever committed
-- starts the next queued turn; the reaper starts any a crash left queued.
-- `steered`: messages sent with `onActive: "steer"` wait in `queued_turns`
-- for this run's next model call. Every commit of the run's worker returns
-- the flag (the fence's statement), and the lease's statement too, so a
-- worker learns of them without asking.
-- `cut`: the run's tree was cut away by an edit or a rollback: its
-- messages leave the conversation models see and that lists return (its
-- journal and events stay). Constant defaults: adding them rewrites
-- nothing.
ALTER TABLE runs ADD COLUMN followed boolean NOT NULL DEFAULT false,
                 ADD COLUMN steered boolean NOT NULL DEFAULT false,
                 ADD COLUMN cut boolean NOT NULL DEFAULT false;

-- Messages sent with `onActive: "enqueue"` while a run was active, in the
-- order the API accepted them (`position`, taken under the thread's lock).
-- `run_id` is the run each will start, named in the 202 that accepted it.
-- A steering message names the run it joins (`steers`); the run's worker
-- takes it out in the commit that journals it, and one left when that run
-- ends starts a turn of its own, in its place in the queue.
CREATE TABLE queued_turns (
    position    bigserial PRIMARY KEY,
    thread_id   uuid NOT NULL REFERENCES threads (id),
    run_id      uuid NOT NULL UNIQUE,
    steers      uuid,
    content     text NOT NULL,
    traceparent text,
    tracestate  text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX queued_turns_thread_idx ON queued_turns (thread_id, position);
CREATE INDEX queued_turns_steers_idx ON queued_turns (steers, position) WHERE steers IS NOT NULL;
