//! `fulcrum demo`, `fulcrum lab run` and `fulcrum sim`: a scenario played — on loopback with
//! real processes, or in the simulator's virtual time — and its results and report written.
//! The playing is the library's ([`fulcrum::demo`], [`fulcrum::lab_run`],
//! [`fulcrum::sim_run`]); here, only the scenario file read (its contenders replaced when
//! `--algorithms` says), the logs set up, and `provenance.toml` written into the results
//! directory, so that `fulcrum evidence` can name the command that made them.

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
    let scenario = prepare(
        "lab",
        &args.scenario,
        &args.algorithms,
        args.repetitions,
        &args.out,
    )?;
    fulcrum::lab_run::play(&scenario, &args.out, !args.quiet)
}

/// `fulcrum sim`: the scenario simulated, then the results and the report in `--out`.
pub fn sim(args: &SimArgs) -> anyhow::Result<ExitCode> {
    let scenario = prepare(
        "sim",
        &args.scenario,
        &args.algorithms,
        args.repetitions,
        &args.out,
    )?;
    fulcrum::sim_run::play(&scenario, &args.out, !args.quiet)
}

/// The scenario in `file`, its contenders replaced by `algorithms` if any and its
/// repetitions by `repetitions`; and its provenance written into `out` (created) for
/// `fulcrum evidence`.
fn prepare(
    tool: &str,
    file: &Path,
    algorithms: &[String],
    repetitions: Option<u32>,
    out: &Path,
) -> anyhow::Result<Scenario> {
    let mut scenario = Scenario::load(file).map_err(anyhow::Error::msg)?;
    if !algorithms.is_empty() {
        lab::evidence::override_algorithms(&mut scenario, algorithms)
            .map_err(anyhow::Error::msg)?;
    }
    if let Some(n) = repetitions {
        scenario.repetitions = n;
    }
    // The names as run (`load-aware` spelled out), so the provenance stays exact.
    let algorithms: Vec<String> = if algorithms.is_empty() {
        Vec::new()
    } else {
        scenario.algorithms.iter().map(|a| a.name.clone()).collect()
    };
    std::fs::create_dir_all(out)
        .map_err(|e| anyhow::anyhow!("cannot create the directory {}: {e}", out.display()))?;
    lab::evidence::Provenance::of(tool, file, &scenario, &algorithms, repetitions)
        .write(out)
        .map_err(anyhow::Error::msg)?;
    Ok(scenario)
}
