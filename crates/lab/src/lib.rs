//! fulcrum's lab: the pieces experiments are made of — emulated backends, an open-loop load
//! generator, scenarios, the runner that plays them, and the reports.
//!
//! # Layout
//!
//! * [`backend`]: an HTTP backend that answers with its name after a request's cost, optionally
//!   with a capacity (cpu slots, io bandwidth, a time-varying antagonist), faults (500s, a stall,
//!   death) and its utilization at `GET /load`; it can be killed to emulate a crash.
//! * [`client`]: a keep-alive HTTP/1.1 client that can bind to a chosen local address, so one
//!   machine can play many clients across 127.0.0.0/8.
//! * [`load`]: the load generator: open loop (a trace sent on schedule, latency from the
//!   intended send time) or closed loop (virtual users, as siege and JMeter); an HDR histogram
//!   summary, a per-request CSV trace, a progress bar.
//! * [`schedule`]: the load generator's trace (patterns, spacing, costs, clients), computed
//!   ahead from a seed.
//! * [`scenario`]: an experiment as a TOML file: backends, traffic, contenders.
//! * [`run`]: `fulcrum lab run`: every contender on the same trace, its processes started and
//!   always stopped.
//! * [`tally`]: a run's requests aggregated as they finish (counts, histograms, time buckets,
//!   per-backend counts), in memory independent of the number of requests: what the reports
//!   read, from the lab's runs and the simulator's alike.
//! * [`report`]: `results.csv`, `results.md` and `report.html` with plots, and over the
//!   repetitions `repetitions.csv` and `wins.csv`.
//! * [`evidence`]: `docs/evidence.md`, the load-aware algorithms' p99 relative to the best on
//!   every scenario, generated from the results directories.
//! * [`stats`]: medians, their bootstrap intervals and paired win counts over repetitions.
//! * [`hash_spread`]: seed 000's hash-spread experiment (`fulcrum lab hash-distribution`).

pub mod backend;
pub mod client;
pub mod evidence;
pub mod hash_spread;
pub mod load;
pub mod report;
pub mod run;
pub mod scenario;
pub mod schedule;
pub mod stats;
pub mod tally;

pub use backend::Backend;
pub use client::{Client, Reply};
