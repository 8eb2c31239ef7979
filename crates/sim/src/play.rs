//! A scenario, simulated: every contender at every offered load, each repetition, on the same
//! seeded traffic, into the lab's [`Results`] (so `results.csv`, `results.md` and
//! `report.html` come from the lab's own report code).

use std::time::{Duration, SystemTime};

use lab::run::{Measured, Results};
use lab::scenario::Scenario;

use crate::cluster;
use crate::{Contender, Knobs};

/// What a simulated scenario produced, and what it took.
#[derive(Debug)]
pub struct Played {
    pub results: Results,
    /// Requests simulated, over every run.
    pub requests: u64,
    /// Events processed, over every run.
    pub events: u64,
}

/// One row's contender, with the report delay and fleet size named when they vary.
type Case<'c> = (Option<Duration>, Option<u32>, &'c Contender);

/// The label of `contender` at `load`, report `delay` and with `balancers` instances (one row
/// each in the results).
pub fn label(
    contender: &str,
    load: Option<f64>,
    delay: Option<Duration>,
    balancers: Option<u32>,
) -> String {
    let mut label = contender.to_owned();
    if let Some(l) = load {
        label.push_str(&format!(" λ={l:.2}"));
    }
    if let Some(d) = delay {
        label.push_str(&format!(" delay={}", humantime::format_duration(d)));
    }
    if let Some(n) = balancers {
        label.push_str(&format!(" balancers={n}"));
    }
    label
}

/// Each contender at each fleet size, and at each report delay if it reads load reports (once
/// if it does not); the delay and the size are named only when there are several.
fn cases<'c>(knobs: &Knobs, contenders: &'c [Contender]) -> Vec<Case<'c>> {
    let fleets: Vec<Option<u32>> = if knobs.fleets.len() > 1 {
        knobs.fleets.iter().copied().map(Some).collect()
    } else {
        vec![None]
    };
    fleets
        .into_iter()
        .flat_map(|n| {
            delayed(knobs, contenders)
                .into_iter()
                .map(move |(d, c)| (d, n, c))
        })
        .collect()
}

/// Each contender at each report delay if it reads load reports, once if it does not.
fn delayed<'c>(
    knobs: &Knobs,
    contenders: &'c [Contender],
) -> Vec<(Option<Duration>, &'c Contender)> {
    let delays: Vec<Option<Duration>> = if knobs.report_delays.len() > 1 {
        knobs.report_delays.iter().copied().map(Some).collect()
    } else {
        vec![None]
    };
    delays
        .iter()
        .enumerate()
        .flat_map(|(i, &d)| {
            contenders
                .iter()
                .filter(move |c| i == 0 || c.policy.algorithm.reads_load_reports())
                .map(move |c| {
                    (
                        if c.policy.algorithm.reads_load_reports() {
                            d
                        } else {
                            None
                        },
                        c,
                    )
                })
        })
        .collect()
}

/// How many runs `play` makes: every case at every offered load, each repetition.
pub fn runs(scenario: &Scenario, contenders: &[Contender]) -> u64 {
    let knobs = Knobs::of(scenario);
    let loads = knobs.offered_load.len().max(1);
    (cases(&knobs, contenders).len() * loads) as u64 * u64::from(scenario.repetitions)
}

/// Plays `scenario` with `contenders` (fulcrum's, resolved by the caller). `started` is the
/// date the results carry; `progress` hears a run's label and how many more requests it has
/// sent (from any of the threads the runs spread over).
/// Repetition `r` draws everything from the scenario's seed plus `r`: a seed gives the same
/// results bit for bit.
pub fn play(
    scenario: &Scenario,
    contenders: &[Contender],
    started: SystemTime,
    progress: &(dyn Fn(&str, u64) + Sync),
) -> Result<Played, String> {
    let knobs = Knobs::of(scenario);
    let loads: Vec<Option<f64>> = if knobs.offered_load.is_empty() {
        vec![None]
    } else {
        knobs.offered_load.iter().copied().map(Some).collect()
    };
    let cases = cases(&knobs, contenders);
    let mut labels = Vec::new();
    for &load in &loads {
        for &(delay, fleet, c) in &cases {
            labels.push(label(&c.label, load, delay, fleet));
        }
    }
    // Every run, in the order of the results; they are independent, so they spread over the
    // machine's cores, and each is the same whichever thread plays it.
    let mut jobs = Vec::new();
    for repetition in 0..scenario.repetitions {
        for &load in &loads {
            let traffic = scenario.traffic_at(load)?;
            for &(delay, fleet, c) in &cases {
                jobs.push((repetition, load, delay, fleet, c, traffic.clone()));
            }
        }
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(jobs.len())
        .max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done: Vec<std::sync::Mutex<Option<(Measured, u64, u64)>>> =
        jobs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((repetition, load, delay, fleet, c, traffic)) = jobs.get(i) else {
                        return;
                    };
                    let label = label(&c.label, *load, *delay, *fleet);
                    let knobs = Knobs {
                        report_delay: delay.unwrap_or(knobs.report_delay),
                        balancers: fleet.unwrap_or(knobs.balancers),
                        ..knobs.clone()
                    };
                    let seed = scenario.seed.wrapping_add(u64::from(*repetition));
                    let mut sent = 0;
                    let m = cluster::run(scenario, traffic, c, &knobs, seed, &mut |n| {
                        progress(&label, n - sent);
                        sent = n;
                    });
                    // Rates over the measured requests' share of the traffic (after a warm-up).
                    let measured = match knobs.requests {
                        Some(n) if knobs.warmup > 0 => {
                            let share = n as f64 / (n + knobs.warmup) as f64;
                            lab::scenario::Traffic {
                                duration: traffic.duration.mul_f64(share),
                                ..traffic.clone()
                            }
                        }
                        _ => traffic.clone(),
                    };
                    let mut row = lab::run::row(&m.tally, &m.samples, &measured);
                    row.attempts_per_request =
                        Some(m.attempts.iter().sum::<u64>() as f64 / m.sent.max(1) as f64);
                    let run = Measured {
                        label,
                        repetition: *repetition,
                        tally: m.tally,
                        // The plots show the first repetition; later ones keep their numbers.
                        samples: if *repetition == 0 {
                            m.samples
                        } else {
                            Vec::new()
                        },
                        row,
                        offered_load: *load,
                    };
                    *done[i].lock().unwrap_or_else(|e| e.into_inner()) =
                        Some((run, sent, m.events));
                }
            });
        }
    });
    let mut runs = Vec::with_capacity(done.len());
    let (mut requests, mut events) = (0, 0);
    for slot in done {
        let (run, sent, n) = slot
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .ok_or("a simulated run did not finish")?;
        requests += sent;
        events += n;
        runs.push(run);
    }
    Ok(Played {
        results: Results {
            simulated: true,
            scenario: scenario.clone(),
            traffic: scenario.traffic()?,
            backends: scenario
                .backend_plans()
                .into_iter()
                .map(|p| p.name)
                .collect(),
            labels,
            runs,
            started,
            elapsed: Duration::ZERO,
        },
        requests,
        events,
    })
}
