//! Integration tests: real Postgres and RabbitMQ, one schema and one set of
//! queue names per test, so they run in parallel.

mod approvals;
mod bad_input;
mod batch;
mod bounds;
mod broker_away;
mod crash;
mod decisions;
mod deploy;
mod disruptive;
mod elicitation;
mod event_rows;
mod expiry;
mod golden;
mod http_tool;
mod inbox;
mod intake;
mod jobs;
mod keys;
mod limits;
mod migrations;
mod multi_party;
mod notify;
mod openapi;
mod ops;
mod parked;
mod poison;
mod providers;
mod reads;
mod reaper;
mod repeated_denials;
mod stream;
mod subagents;
mod tls;
mod turn;
mod ui;
