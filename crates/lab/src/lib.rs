//! fulcrum's lab: the pieces experiments are made of. For now emulated backends, a small HTTP
//! client and the load generator; later scenarios, the runner and reports.
//!
//! # Layout
//!
//! * [`backend`]: an HTTP backend that answers with its name, optionally after a delay, and can
//!   be killed (every connection dropped, the port closed) to emulate a crash.
//! * [`client`]: a keep-alive HTTP/1.1 client that can bind to a chosen local address, so one
//!   machine can play many clients across 127.0.0.0/8.
//! * [`load`]: the load generator: open loop (a trace sent on schedule, latency from the
//!   intended send time) or closed loop (virtual users, as siege and JMeter); an HDR histogram
//!   summary, a per-request CSV trace, a progress bar.
//! * [`schedule`]: the load generator's trace (patterns, spacing, costs, clients), computed
//!   ahead from a seed.
//! * [`hash_spread`]: seed 000's hash-spread experiment (`fulcrum lab hash-distribution`).

pub mod backend;
pub mod client;
pub mod hash_spread;
pub mod load;
pub mod schedule;

pub use backend::Backend;
pub use client::{Client, Reply};
