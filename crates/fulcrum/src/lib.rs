//! The `fulcrum` binary's library half: configuration loading and the demo, kept here so the
//! integration tests can use them too.
//!
//! # Layout
//!
//! * [`config`]: the TOML configuration, its checks and error messages, turned into
//!   [`proxy::ProxySettings`].
//! * [`demo`]: `fulcrum demo`, a short lab comparison of five algorithms.
//! * [`lab_run`]: `fulcrum lab run` (and the demo): a scenario played, stopped cleanly when
//!   interrupted, its results written.

pub mod config;
pub mod demo;
pub mod lab_run;
