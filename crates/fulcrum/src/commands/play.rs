//! `fulcrum demo`, `fulcrum lab run` and `fulcrum sim`: a scenario played — on loopback with
//! real processes, or in the simulator's virtual time — and its results and report written.
//! The playing is the library's ([`fulcrum::demo`], [`fulcrum::lab_run`],
//! [`fulcrum::sim_run`]); here, only the scenario file read and the logs set up.

use std::path::Path;
use std::process::ExitCode;

use fulcrum::demo;
use lab::scenario::Scenario;

use crate::cli::SimArgs;
use crate::cli::lab::RunArgs;
use crate::logs;

/// `fulcrum demo`: the built-in comparison, its results in `out`.
pub fn demo(out: &Path) -> anyhow::Result<ExitCode> {
    let _logs = logs::init("warn");
    demo::run(out)
}

/// `fulcrum lab run`: the scenario's runs, then the results and the report in `--out`.
pub fn lab_run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let _logs = logs::init("warn");
    let scenario = Scenario::load(&args.scenario).map_err(anyhow::Error::msg)?;
    fulcrum::lab_run::play(&scenario, &args.out, !args.quiet)
}

/// `fulcrum sim`: the scenario simulated, then the results and the report in `--out`.
pub fn sim(args: &SimArgs) -> anyhow::Result<ExitCode> {
    Scenario::load(&args.scenario)
        .map_err(anyhow::Error::msg)
        .and_then(|s| fulcrum::sim_run::play(&s, &args.out, !args.quiet))
}
