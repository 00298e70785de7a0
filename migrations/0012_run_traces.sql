-- The W3C trace context a run was started under (crates/core/src/trace.rs):
-- an answer or an expiry, handled by a process that did not start the run
-- and carries no header of it, continues the run's trace from here. NULL
-- when the process that started the run exported no traces. Adding a
-- nullable column without a default rewrites nothing.
ALTER TABLE runs ADD COLUMN traceparent text, ADD COLUMN tracestate text;
