-- The agentenkit schema. Tables are unqualified: a deployment (or a test)
-- chooses its schema through search_path. How a later change to it is made
-- is in README.md, "Changing the schema".

CREATE TABLE threads (
    id             uuid PRIMARY KEY,
    owner          text NOT NULL,
    agent          text NOT NULL,
    metadata       jsonb NOT NULL DEFAULT '{}'::jsonb,
    current_run_id uuid,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX threads_owner_idx ON threads (owner);

CREATE TABLE runs (
    id                  uuid PRIMARY KEY,
    thread_id           uuid NOT NULL REFERENCES threads (id),
    -- A root run's root_run_id is its own id.
    root_run_id         uuid NOT NULL,
    parent_run_id       uuid REFERENCES runs (id),
    parent_tool_call_id text,
    name                text NOT NULL,
    depth               int NOT NULL DEFAULT 0,
    status              text NOT NULL CHECK (status IN ('queued', 'running', 'waiting', 'completed', 'failed', 'cancelled')),
    -- The segment this run accepts next; a delivery with another seq is stale.
    segment_seq         bigint NOT NULL DEFAULT 1,
    -- The lease: a worker holds the run while lease_expires_at is in the
    -- future; every write it makes is fenced by lease_token.
    lease_owner         uuid,
    lease_token         bigint NOT NULL DEFAULT 0,
    lease_expires_at    timestamptz,
    -- Failed attempts of the current step (model errors, unavailable tools),
    -- and takeovers (a worker died holding the lease), counted apart so that
    -- workers killed under a step are not mistaken for a step that fails.
    -- Progress (a new journal entry) resets both.
    attempts            int NOT NULL DEFAULT 0,
    takeovers           int NOT NULL DEFAULT 0,
    output              text,
    error               text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz
);
-- The reaper scans the runs in flight, a small set. Keyed on the status
-- alone, not on updated_at, so a lease extension (every commit) stays HOT.
CREATE INDEX runs_active_idx ON runs (status) WHERE status IN ('queued', 'running');
-- Stopping a thread finds its sub-agent runs (a root run is found by id).
CREATE INDEX runs_root_idx ON runs (root_run_id) WHERE parent_run_id IS NOT NULL;
-- Resuming a parent counts its active children.
CREATE INDEX runs_parent_idx ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

-- The append-only tables below carry no foreign keys: each insert checked
-- its run and thread with a KEY SHARE lock written into the parent row
-- (a dozen per cycle), and sibling sub-agents deadlocked on their parent
-- through them. Every writer writes them in the transaction that fences
-- the run's lease (or, for an answer, locks the run), so the run and its
-- thread exist; rows are never deleted.

-- `body` is null when the message is the assistant message of the model
-- entry at `body_position` in its run's journal, written in the same commit
-- (crates/store/src/format/).
CREATE TABLE messages (
    id            bigserial,
    thread_id     uuid NOT NULL,
    run_id        uuid NOT NULL,
    body          jsonb,
    body_position int,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, id),
    CHECK (body IS NOT NULL OR body_position IS NOT NULL)
);

-- `arguments` is null when they are those the model entry at
-- `arguments_position` proposed the call with (crates/store/src/format/).
-- `park_request` keeps a self-parking tool's request the moment the tool
-- returns it, before its park commits, so a retried step knows the call
-- parked without calling the tool again.
CREATE TABLE tool_calls (
    run_id             uuid NOT NULL,
    id                 text NOT NULL,
    thread_id          uuid NOT NULL,
    name               text NOT NULL,
    arguments          jsonb,
    arguments_position int,
    kind               text NOT NULL CHECK (kind IN ('function', 'approval', 'park', 'ask', 'delegate')),
    tool_type          text NOT NULL CHECK (tool_type IN ('function', 'action')),
    status             text NOT NULL CHECK (status IN ('proposed', 'pending_approval', 'executed', 'rejected', 'expired', 'cancelled', 'failed')),
    reason             text,
    expires_at         timestamptz,
    park_request       jsonb,
    payload            jsonb,
    result             jsonb,
    defaulted          text[],
    answered_at        timestamptz,
    answered_by        text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, id),
    CHECK (arguments IS NOT NULL OR arguments_position IS NOT NULL)
);
CREATE INDEX tool_calls_open_idx ON tool_calls (thread_id) WHERE status = 'pending_approval';
CREATE INDEX tool_calls_expiry_idx ON tool_calls (expires_at) WHERE status = 'pending_approval';
-- respond finds a call by thread.
CREATE INDEX tool_calls_thread_call_idx ON tool_calls (thread_id, id);

-- `data` leaves out what other rows hold; `packed` says what
-- (crates/store/src/format/event.rs), and `message_id` names the message a
-- MESSAGE event carries. Ids are handed out in commit order per thread
-- under the thread's event lock (INSERT_EVENT_SQL), so a reader after id N
-- never misses one.
CREATE TABLE events (
    id         bigserial PRIMARY KEY,
    thread_id  uuid NOT NULL,
    run_id     uuid,
    type       text NOT NULL,
    data       jsonb NOT NULL,
    packed     smallint NOT NULL DEFAULT 0,
    message_id bigint,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_thread_idx ON events (thread_id, id);

-- `value` leaves out what an earlier model entry holds; `packed` says what
-- (crates/store/src/format/journal.rs).
CREATE TABLE journal (
    run_id   uuid NOT NULL,
    position int NOT NULL,
    name     text NOT NULL,
    value    jsonb NOT NULL,
    packed   smallint NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, position)
);

-- The rows as written, for readers (writers write the tables): a call
-- row's arguments and an assistant message's body may be left to the model
-- entry of the same commit that holds them (crates/store/src/format/). A
-- column put back here is computed only where a query reads it, by a
-- primary-key lookup of one journal row; model entries are stored whole
-- (`packed = 0`), and a packed one would read as nothing rather than be
-- served as if whole.

-- `arguments_whole`: the row's own arguments, or those of the first call
-- with its id in the model entry at `arguments_position`
-- (format::journal::proposed_arguments reads the same).
CREATE VIEW tool_calls_whole AS
SELECT tc.*,
       COALESCE(tc.arguments,
         (SELECT c.call->'arguments'
          FROM journal j, jsonb_array_elements(j.value->'toolCalls') WITH ORDINALITY AS c(call, n)
          WHERE j.run_id = tc.run_id AND j.position = tc.arguments_position AND j.packed = 0
            AND c.call->>'id' = tc.id
          ORDER BY c.n LIMIT 1)) AS arguments_whole
FROM tool_calls tc;

-- `body_whole`: the row's own body, or the assistant message of the model
-- entry at `body_position`, built key for key as
-- format::journal::assistant_message builds it.
CREATE VIEW messages_whole AS
SELECT m.*,
       COALESCE(m.body,
         (SELECT jsonb_build_object('role', 'assistant')
                 || CASE WHEN j.value ? 'text'
                         THEN jsonb_build_object('content', j.value->'text') ELSE '{}' END
                 || CASE WHEN j.value ? 'toolCalls'
                         THEN jsonb_build_object('toolCalls', j.value->'toolCalls') ELSE '{}' END
          FROM journal j
          WHERE j.run_id = m.run_id AND j.position = m.body_position AND j.packed = 0)) AS body_whole
FROM messages m;

-- Messages that must follow a commit, written in the commit. The committer
-- publishes them right after; the handler that consumes one deletes its row
-- by key in the transaction it commits anyway; the reaper re-publishes rows
-- left well past `due_at` (creation + delay). The key names the message
-- whole (QueueMessage::from_outbox_key) and is only looked up by equality,
-- which a hash index serves with an entry a fraction of the key's size.
-- No primary key: the reaper's claim addresses the rows it locked by ctid.
CREATE TABLE outbox (
    id            bigserial,
    key           text NOT NULL,
    delay_ms      bigint NOT NULL DEFAULT 0,
    due_at        timestamptz NOT NULL,
    claimed_until timestamptz
);
CREATE INDEX outbox_key_idx ON outbox USING hash (key);
CREATE INDEX outbox_due_idx ON outbox (due_at);

-- A statement that must change exactly one row checks it in the database
-- (crates/store/src/pipeline.rs wraps it as
-- `WITH changed AS (... RETURNING 1) SELECT expect_one_row(count)`), so a
-- failed check aborts the transaction where it runs. A worker's commit can
-- then send BEGIN, its statements and COMMIT in one round trip: the COMMIT
-- of an aborted transaction rolls it back.
CREATE FUNCTION expect_one_row(changed bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF changed <> 1 THEN
        RAISE EXCEPTION 'expected to change one row, changed %', changed
            USING ERRCODE = 'AK001';
    END IF;
    RETURN changed;
END
$$;
