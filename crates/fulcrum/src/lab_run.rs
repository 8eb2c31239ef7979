//! `fulcrum lab run` and the demo: a scenario played on a runtime of its own, stopped cleanly
//! on SIGINT or SIGTERM, its results written, its table and its verdict printed (the verdict's
//! words are `results.md`'s, [`lab::report::verdict`]).

use std::process::ExitCode;

use anyhow::Context as _;

/// Plays `scenario`, writes its results and report into `out`, and prints the table and the
/// verdict. Blocks
/// the calling thread, which must be the main thread and outside any runtime: the runner's
/// children carry a parent-death signal tied to the thread that started them.
pub fn play(
    scenario: &lab::scenario::Scenario,
    out: &std::path::Path,
    progress: bool,
) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(out)
        .with_context(|| format!("cannot create the directory {}", out.display()))?;
    let settings = &lab::run::Settings {
        exe: std::env::current_exe().context("cannot find fulcrum's own executable")?,
        out: out.to_owned(),
        progress,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("fulcrum-lab")
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(async {
        let stop = interrupted()?;
        tokio::select! {
            results = lab::run::run(scenario, settings) => {
                let results = results?;
                lab::report::write(&results, out)?;
                println!("\n{}\n", scenario.name);
                print!("{}", lab::report::table(&results));
                let verdict = lab::report::verdict(&results);
                if !verdict.is_empty() {
                    println!("\nVerdict. {verdict}");
                }
                println!(
                    "\nresults: {0}/results.csv, {0}/results.md\nreport:  {0}/report.html",
                    out.display()
                );
                Ok(ExitCode::SUCCESS)
            }
            signal = stop => {
                // Dropping the run killed every process it had started.
                eprintln!(
                    "fulcrum: interrupted ({}): every process the run started is stopped; no results were written",
                    signal.0
                );
                Ok(ExitCode::from(128 + signal.1))
            }
        }
    })
}

/// Resolves on the first SIGINT or SIGTERM (handlers installed at the call), with its name and
/// number.
fn interrupted() -> anyhow::Result<impl Future<Output = (&'static str, u8)>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing a SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing a SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => ("SIGTERM", 15),
            _ = int.recv() => ("SIGINT", 2),
        }
    })
}
