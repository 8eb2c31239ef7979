//! `fulcrum demo`: a short, real comparison on one machine.
//!
//! It plays `lab/scenarios/demo.toml` (built in): three unequal emulated backends, one of them
//! losing most of its capacity to background load half of the time, and a sine wave of
//! traffic replayed through round_robin, least_conn, latency, p2c_ewma and dwlc, each behind
//! fresh backends and a fresh fulcrum. It prints the results table, the verdict (which
//! contender won on p99 and on mean, by how much, [`lab::report::verdict`]) and where the HTML
//! report with the plots is.

use std::path::Path;
use std::process::ExitCode;

/// The demo's scenario.
pub const SCENARIO: &str = include_str!("../../../lab/scenarios/demo.toml");

/// Runs the demo, its results and report into `out`. Call it on the main thread, outside a
/// runtime (the runner's children are tied to the thread that starts them).
pub fn run(out: &Path) -> anyhow::Result<ExitCode> {
    let scenario = lab::scenario::Scenario::parse(SCENARIO, "demo").map_err(anyhow::Error::msg)?;
    println!(
        "fulcrum demo: {}\n\n{} contenders, each behind fresh backends on loopback, on the same trace ({} s each)\n",
        scenario.description,
        scenario.algorithms.len(),
        scenario
            .traffic()
            .map_err(anyhow::Error::msg)?
            .duration
            .as_secs()
    );
    crate::lab_run::play(&scenario, out, true)
}
