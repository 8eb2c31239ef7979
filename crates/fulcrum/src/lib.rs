//! The `fulcrum` binary's library half: configuration loading and the demo, kept here so the
//! integration tests can use them too.
//!
//! # Layout
//!
//! * [`config`]: the TOML configuration, its checks and error messages, turned into
//!   [`proxy::ProxySettings`].
//! * [`demo`]: `fulcrum demo`, an embedded testbed that shows every algorithm at work.

pub mod config;
pub mod demo;
