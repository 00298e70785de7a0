//! Modules of the `agentenkit-bench` binary (see `src/bin/bench.rs`).

pub mod cpu;
pub mod cycle;
pub mod expiry;
pub mod fleet;
pub mod hub;
pub mod meter;
pub mod peers;
pub mod report;
pub mod webhook;
pub mod wire;
