//! `fulcrum sim SCENARIO --out DIR`: a scenario played by the simulator, with the lab's outputs.
//!
//! Each fulcrum contender is resolved exactly as the lab would start it: the lab writes the
//! configuration it would give `fulcrum run` (with stand-in addresses), and fulcrum's own
//! configuration parser reads it, so the simulator gets the proxy's defaults and checks
//! (`max_fails`, `fail_timeout`, `retries`, `poll_interval`, options). Contenders that run
//! nginx or HAProxy cannot be simulated (their code is not ours) and are listed as skipped.

use std::io::IsTerminal as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Instant, SystemTime};

use anyhow::{Context as _, anyhow};
use lab::scenario::{Balancer, Scenario};

use crate::config;

/// A stand-in address for backend `k` (the configuration needs one; nothing listens there).
fn stand_in(k: usize) -> SocketAddr {
    let k = k as u32;
    let ip = Ipv4Addr::new(127, 1 + (k >> 16) as u8, (k >> 8) as u8, k as u8);
    SocketAddr::new(IpAddr::V4(ip), 80)
}

/// The contenders fulcrum runs, resolved; and the labels of those skipped.
pub fn contenders(scenario: &Scenario) -> anyhow::Result<(Vec<sim::Contender>, Vec<String>)> {
    let plans = scenario.backend_plans();
    let traffic = scenario.traffic().map_err(anyhow::Error::msg)?;
    let addrs: Vec<SocketAddr> = (0..plans.len()).map(stand_in).collect();
    let index: std::collections::HashMap<SocketAddr, usize> =
        addrs.iter().enumerate().map(|(k, a)| (*a, k)).collect();
    let (mut out, mut skipped) = (Vec::new(), Vec::new());
    for spec in &scenario.algorithms {
        let Balancer::Fulcrum(algorithm) = spec.balancer().map_err(anyhow::Error::msg)? else {
            skipped.push(spec.name.clone());
            continue;
        };
        let text = lab::run::fulcrum_config(
            algorithm,
            &spec.options,
            scenario,
            &plans,
            &addrs,
            SocketAddr::from(([127, 0, 0, 1], 8080)),
            traffic.timeout,
        )?;
        let path = Path::new("(the configuration of contender)");
        let config = config::parse(path, &text).map_err(|e| {
            anyhow!(
                "algorithm {:?}: fulcrum refuses its configuration:\n{e}",
                spec.name
            )
        })?;
        let upstream = config
            .proxy
            .upstreams
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("algorithm {:?}: no upstream", spec.name))?;
        let (backups, primaries): (Vec<_>, Vec<_>) =
            upstream.backends.iter().partition(|b| b.backup);
        let plan_of = primaries
            .iter()
            .chain(&backups)
            .map(|b| index.get(&b.addr).copied())
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| anyhow!("algorithm {:?}: a backend went missing", spec.name))?;
        out.push(sim::Contender {
            label: spec.name.clone(),
            policy: upstream.policy(),
            plan_of,
        });
    }
    if out.is_empty() {
        return Err(anyhow!(
            "the scenario {:?} has no fulcrum contender to simulate (nginx and HAProxy run only in the lab)",
            scenario.name
        ));
    }
    Ok((out, skipped))
}

/// Simulates `scenario`, writes its results and report into `out`, and prints the table.
pub fn play(scenario: &Scenario, out: &Path, progress: bool) -> anyhow::Result<ExitCode> {
    let (contenders, skipped) = contenders(scenario)?;
    std::fs::create_dir_all(out)
        .with_context(|| format!("cannot create the directory {}", out.display()))?;
    for stale in lab::report::FILES {
        let _ = std::fs::remove_file(out.join(stale));
    }
    for label in &skipped {
        eprintln!("fulcrum: note: {label:?} runs nginx or HAProxy: the simulator skips it");
    }
    // One bar over every run (they spread over the cores): requests simulated.
    let runs = sim::play::runs(scenario, &contenders);
    let total = expected_requests(scenario).map(|n| n * runs);
    let bar = (progress && std::io::stderr().is_terminal()).then(|| {
        let (bar, template) = match total {
            Some(total) => (
                indicatif::ProgressBar::new(total),
                "simulating {prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} requests",
            ),
            None => (
                indicatif::ProgressBar::new_spinner(),
                "simulating {prefix} [{elapsed_precise}] {spinner} {pos} requests",
            ),
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(template)
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_prefix(format!("{runs} runs"));
        bar
    });
    let clock = Instant::now();
    let played = sim::play::play(scenario, &contenders, SystemTime::now(), &|_, n| {
        if let Some(bar) = &bar {
            bar.inc(n);
        }
    })
    .map_err(anyhow::Error::msg)?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let elapsed = clock.elapsed();
    let mut results = played.results;
    results.elapsed = elapsed;
    lab::report::write(&results, out)?;
    println!("\n{} (simulated)\n", scenario.name);
    print!("{}", lab::report::table(&results));
    let verdict = lab::report::verdict(&results);
    if !verdict.is_empty() {
        println!("\nVerdict. {verdict}");
    }
    let secs = elapsed.as_secs_f64().max(1e-9);
    println!(
        "\n{} requests and {} events simulated in {:.2} s: {:.2} M requests/s",
        played.requests,
        played.events,
        secs,
        played.requests as f64 / secs / 1e6
    );
    println!(
        "results: {0}/results.csv, {0}/results.md\nreport:  {0}/report.html",
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Requests per run, when the scenario says (for the progress bar).
fn expected_requests(scenario: &Scenario) -> Option<u64> {
    let sim = scenario.sim.as_ref()?;
    sim.requests.map(|r| r + sim.warmup)
}
