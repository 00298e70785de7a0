-- agentenkit schema, version 1. Tables are unqualified: a deployment (or a
-- test) chooses its schema through search_path.

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
    attempts            int NOT NULL DEFAULT 0,
    output              text,
    error               text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz
);
CREATE INDEX runs_thread_idx ON runs (thread_id, created_at);
CREATE INDEX runs_root_idx ON runs (root_run_id);
-- The reaper looks only at runs that should be moving.
CREATE INDEX runs_active_idx ON runs (updated_at) WHERE status IN ('queued', 'running');

CREATE TABLE messages (
    id         bigserial PRIMARY KEY,
    thread_id  uuid NOT NULL REFERENCES threads (id),
    run_id     uuid NOT NULL REFERENCES runs (id),
    body       jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX messages_thread_idx ON messages (thread_id, id);

CREATE TABLE tool_calls (
    run_id      uuid NOT NULL REFERENCES runs (id),
    id          text NOT NULL,
    thread_id   uuid NOT NULL REFERENCES threads (id),
    name        text NOT NULL,
    arguments   jsonb NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('function', 'approval', 'park', 'ask', 'delegate')),
    tool_type   text NOT NULL CHECK (tool_type IN ('function', 'action')),
    status      text NOT NULL CHECK (status IN ('proposed', 'pending_approval', 'executed', 'rejected', 'expired', 'cancelled', 'failed')),
    reason      text,
    expires_at  timestamptz,
    payload     jsonb,
    result      jsonb,
    defaulted   text[],
    answered_at timestamptz,
    answered_by text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, id)
);
CREATE INDEX tool_calls_open_idx ON tool_calls (thread_id) WHERE status = 'pending_approval';
CREATE INDEX tool_calls_expiry_idx ON tool_calls (expires_at) WHERE status = 'pending_approval';

CREATE TABLE events (
    id         bigserial PRIMARY KEY,
    thread_id  uuid NOT NULL REFERENCES threads (id),
    run_id     uuid,
    type       text NOT NULL,
    data       jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_thread_idx ON events (thread_id, id);

CREATE TABLE journal (
    run_id     uuid NOT NULL REFERENCES runs (id),
    position   int NOT NULL,
    name       text NOT NULL,
    value      jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, position)
);

CREATE TABLE usage (
    run_id        uuid NOT NULL REFERENCES runs (id),
    model_call    int NOT NULL,
    input_tokens  bigint NOT NULL,
    output_tokens bigint NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, model_call)
);

-- Messages that must follow a commit. Written in the commit; published and
-- deleted right after by the committing process, or later by the reaper.
CREATE TABLE outbox (
    id            bigserial PRIMARY KEY,
    message       jsonb NOT NULL,
    delay_ms      bigint NOT NULL DEFAULT 0,
    claimed_until timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_created_idx ON outbox (created_at);
