//! The subcommands other than `run` (which is [`crate::serve`]): each takes its parsed
//! arguments from [`crate::cli`], does its work — mostly by calling a library crate — and
//! returns the process's exit status. One file per command, or per family of commands that
//! share their shape:
//!
//! * [`check`]: `fulcrum check`, a configuration file checked as `run` would read it;
//! * [`import`]: `fulcrum import`, an nginx configuration translated;
//! * [`health`]: `fulcrum health`, a running fulcrum asked whether it serves;
//! * [`agent`]: `fulcrum agent`, the backend-side load reporter;
//! * [`play`]: `fulcrum demo`, `fulcrum sim` and `fulcrum lab run`, a scenario played on
//!   loopback or in virtual time;
//! * [`evidence`]: `fulcrum evidence`, the evidence table from results directories;
//! * [`lab_backend`]: `fulcrum lab backend`, one emulated backend;
//! * [`lab_load`]: `fulcrum lab load`, load against a URL;
//! * [`hash_distribution`]: `fulcrum lab hash-distribution`, seed 000's hash-spread
//!   experiment.

pub mod agent;
pub mod check;
pub mod evidence;
pub mod hash_distribution;
pub mod health;
pub mod import;
pub mod lab_backend;
pub mod lab_load;
pub mod play;

use anyhow::Context as _;

/// The runtime a command's network work runs on: `workers` threads.
fn runtime(workers: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("fulcrum-worker")
        .enable_all()
        .build()
        .context("cannot start the runtime")
}
