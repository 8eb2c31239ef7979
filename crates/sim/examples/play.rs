//! Plays a scenario file through the simulator alone (no proxy, no report): simulated
//! requests per second and a digest of `results.csv`, for quick A/B runs of the engine while
//! building only this crate. Contenders are built from each `[[algorithm]]` name with the
//! configuration parser's defaults (as the tests do), so for scenarios with options the
//! figures can differ from `fulcrum sim`'s; `fulcrum sim` remains the reference.
//!
//! `cargo run --release -p sim --example play -- lab/scenarios/sim-speed.toml`

use std::time::{Duration, Instant, SystemTime};

use balance::{Algorithm, BackendSpec, Options, Policy};
use lab::scenario::Scenario;
use sim::Contender;

fn main() -> Result<(), String> {
    let path = std::env::args().nth(1).ok_or("usage: play SCENARIO.toml")?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let scenario = Scenario::parse(&text, "play").map_err(|e| format!("{path}: {e}"))?;
    let plans = scenario.backend_plans();
    let contenders = scenario
        .algorithms
        .iter()
        .filter_map(|a| {
            let algorithm = a
                .algorithm
                .as_deref()
                .unwrap_or(&a.name)
                .parse::<Algorithm>()
                .ok()?;
            Some(Contender {
                label: a.name.clone(),
                policy: Policy {
                    algorithm,
                    options: Options::default(),
                    primaries: plans
                        .iter()
                        .map(|p| BackendSpec::new(p.spec.weight).named(&p.name))
                        .collect(),
                    backups: Vec::new(),
                    retries: None,
                    next_upstream: balance::NextUpstream::DEFAULT,
                    retry_budget: None,
                    queue: 0,
                    queue_timeout: Duration::from_secs(60),
                    poll_interval: Duration::from_secs(1),
                    stale_after: 3,
                },
                plan_of: (0..plans.len()).collect(),
            })
        })
        .collect::<Vec<_>>();
    let clock = Instant::now();
    let played = sim::play::play(&scenario, &contenders, SystemTime::UNIX_EPOCH, &|_, _| {})?;
    let secs = clock.elapsed().as_secs_f64();
    let csv = lab::report::csv(&played.results);
    // FNV-1a: enough to tell two results apart at a glance.
    let digest = csv.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    println!(
        "{} requests, {} events in {secs:.3} s: {:.3} M requests/s; results.csv digest {digest:016x}",
        played.requests,
        played.events,
        played.requests as f64 / secs / 1e6
    );
    Ok(())
}
