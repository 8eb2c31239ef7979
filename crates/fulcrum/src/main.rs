//! `fulcrum`: the command line. See `fulcrum --help`.
//!
//! The binary is thin: it parses the arguments, runs the command asked for, and turns its
//! result into the exit status. The work is in the library half of this crate (`lib.rs`:
//! configuration, the demo, lab and simulator runs, the health check) and in the other crates
//! (the proxy, the control plane, the admin listener, the agent, the lab).
//!
//! # Layout
//!
//! * [`cli`]: the grammar — every subcommand, its arguments and their help (clap).
//! * [`serve`]: `fulcrum run`, the proxy's lifecycle: start, signals, reloads, upgrades,
//!   shutdown.
//! * [`commands`]: every other subcommand — `check`, `health`, `agent`, `demo`, `sim` and the
//!   lab's.
//! * [`logs`]: where every command's logs go (stderr, through a writer thread).
//! * [`shutdown`]: SIGTERM, SIGINT or SIGQUIT, the stop of every long-running command.

mod cli;
mod commands;
mod logs;
mod serve;
mod shutdown;

use std::process::ExitCode;

use clap::Parser as _;

use cli::lab::LabCommand;
use cli::{Cli, Command};

/// The target of the binary's own log lines: `fulcrum`, whichever module writes them, as when
/// the binary was one file — so `RUST_LOG` directives and log searches written for it keep
/// working. (The library's modules log under their paths, `fulcrum::lab_run` and so on.)
const LOG: &str = "fulcrum";

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => serve::run(&args),
        Command::Check(args) => match args.path() {
            Some(path) => commands::check::run(path),
            None => Err(anyhow::anyhow!(
                "name the configuration file: fulcrum check --config FILE"
            )),
        },
        Command::Health(args) => commands::health::run(&args),
        Command::Demo(args) => commands::play::demo(&args.out),
        Command::Agent(args) => commands::agent::run(args),
        Command::Sim(args) => commands::play::sim(&args),
        Command::Evidence(args) => commands::evidence::run(&args),
        Command::Import(args) => commands::import::run(&args.file, args.out.as_deref()),
        Command::Lab { command } => match command {
            LabCommand::Backend(args) => commands::lab_backend::run(args),
            LabCommand::Load(args) => commands::lab_load::run(args),
            LabCommand::Run(args) => commands::play::lab_run(&args),
            LabCommand::HashDistribution(args) => {
                commands::hash_distribution::run(&args);
                Ok(ExitCode::SUCCESS)
            }
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fulcrum: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
