//! The `fulcrum` binary's library half: configuration loading and the demo, kept here so the
//! integration tests can use them too.
//!
//! # Layout
//!
//! * [`cluster`]: runtime state shared by a fleet through etcd (`[cluster]`).
//! * [`config`]: the TOML configuration, its checks and error messages, turned into
//!   [`proxy::ProxySettings`].
//! * [`demo`]: `fulcrum demo`, a short lab comparison of five algorithms.
//! * [`import`]: `fulcrum import`, an nginx configuration translated into this one
//!   (docs/import.md).
//! * [`lab_run`]: `fulcrum lab run` (and the demo): a scenario played, stopped cleanly when
//!   interrupted, its results written.
//! * [`sim_run`]: `fulcrum sim`: a scenario simulated, its contenders resolved by the
//!   configuration parser, the lab's outputs written.
//! * [`state`]: the admin API's changes kept as overrides of the file, across reloads and
//!   restarts (`state_file`), and shared with a fleet.

pub mod cluster;
pub mod config;
pub mod demo;
pub mod health;
pub mod import;
pub mod lab_run;
pub mod sim_run;
pub mod state;
