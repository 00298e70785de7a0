-- Deliveries of notifications to a deployment's webhook targets (README,
-- "Notifications"). One row per delivery and target: a delivery is an
-- event (`delivery_id` is its id) or a reminder (`remind:<run>:<call>`).
-- A row is claimed by pushing `next_at` past the attempt's timeout, so two
-- workers handed the same message never send at once; a failed attempt
-- sets `next_at` to its retry; after the last one the row is dead and
-- stays, with what the target last answered, for an operator to read.
CREATE TABLE notification_deliveries (
    delivery_id  text NOT NULL,
    target       text NOT NULL,
    attempts     int NOT NULL DEFAULT 0,
    next_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at timestamptz,
    dead_at      timestamptz,
    last_status  int,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (delivery_id, target)
);
-- The reaper deletes settled rows past their retention.
CREATE INDEX notification_deliveries_created_idx ON notification_deliveries (created_at);
