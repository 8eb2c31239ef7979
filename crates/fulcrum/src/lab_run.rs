//! `fulcrum lab run` and the demo: a scenario played on a runtime of its own, stopped cleanly
//! on SIGINT or SIGTERM, its results written and its table printed.

use std::process::ExitCode;

use anyhow::Context as _;

/// Plays `scenario`, writes its results and report into `settings.out`, and prints the table.
/// Blocks the calling thread, which must be the main thread and outside any runtime: the
/// runner's children carry a parent-death signal tied to the thread that started them.
pub fn play(
    scenario: &lab::scenario::Scenario,
    settings: &lab::run::Settings,
) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("fulcrum-lab")
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let out = &settings.out;
    runtime.block_on(async {
        let stop = interrupted()?;
        tokio::select! {
            results = lab::run::run(scenario, settings) => {
                let results = results?;
                lab::report::write(&results, out)?;
                println!("\n{}\n", scenario.name);
                print!("{}", lab::report::table(&results));
                println!(
                    "\nresults: {0}/results.csv, {0}/results.md\nreport:  {0}/report.html",
                    out.display()
                );
                Ok(ExitCode::SUCCESS)
            }
            () = stop => {
                // Dropping the run killed every process it had started.
                eprintln!(
                    "fulcrum: interrupted: every process the run started is stopped; no results were written"
                );
                Ok(ExitCode::from(130))
            }
        }
    })
}

/// Resolves on the first SIGINT or SIGTERM (handlers installed at the call).
fn interrupted() -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing a SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing a SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
