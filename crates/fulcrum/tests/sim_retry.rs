//! Issue 29: retries on 503 and the retry budget in the simulator, on the scenario files an
//! operator runs (`fulcrum sim lab/scenarios/retry-*.toml`), with their contenders resolved
//! by fulcrum's own configuration parser.

use std::path::Path;
use std::time::SystemTime;

use lab::report::Line;
use lab::run::Measured;
use lab::scenario::Scenario;

/// The scenario file `name`, played: each contender's run and its line.
fn played(name: &str) -> Vec<(Measured, Line)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../lab/scenarios")
        .join(name);
    let scenario = Scenario::load(&path).expect("the scenario loads");
    let (contenders, skipped) = fulcrum::sim_run::contenders(&scenario).expect("contenders");
    assert!(skipped.is_empty());
    let results = sim::play::play(&scenario, &contenders, SystemTime::UNIX_EPOCH, &|_, _| {})
        .expect("the scenario plays")
        .results;
    let lines = lab::report::lines(&results);
    results.runs.into_iter().zip(lines).collect()
}

/// Successful answers per second that ended within `[from, to)` seconds of the run.
fn goodput(m: &Measured, from: u64, to: u64) -> f64 {
    let width = m.tally.bucket_width().as_secs();
    let ok: u64 = m
        .tally
        .succeeded_by_end()
        .iter()
        .enumerate()
        .filter(|&(k, _)| (from..to).contains(&(k as u64 * width)))
        .map(|(_, &n)| n)
        .sum();
    ok as f64 / (to - from) as f64
}

/// The first second from which every second to the run's end has at least 80% of the offered
/// successes; `None` if there is none before the end.
fn recovered_at(m: &Measured, end: u64) -> Option<u64> {
    (10..end).find(|&t| (t..end).all(|u| goodput(m, u, u + 1) >= 0.8 * OFFERED))
}

/// The run of the contender labelled `label`.
fn run<'a>(runs: &'a [(Measured, Line)], label: &str) -> &'a (Measured, Line) {
    runs.iter()
        .find(|(_, l)| l.label == label)
        .unwrap_or_else(|| panic!("no contender {label:?}"))
}

/// The offered rate of retry-storm.toml.
const OFFERED: f64 = 280.0;

/// Every backend loses 60% of its capacity from 10 s to 20 s, and answers 503 at a 1 s
/// deadline while the work goes on. Relayed 503s: the backlog drains and the goodput is back
/// to the offered 280/s well before the end. Retried without a budget: every 503 costs another
/// backend a whole request's work, the load stays above capacity after the trigger ends and
/// the goodput never recovers (a metastable failure). Within the budget: it recovers.
#[test]
fn retries_without_a_budget_keep_an_overload_going_after_its_cause_ends() {
    let runs = played("retry-storm.toml");
    for (m, line) in &runs {
        eprintln!(
            "{}: successes/s before {:.0}, during {:.0}, 20-40 s {:.0}, 40-60 s {:.0}, 60-90 s {:.0}; recovered at {:?} s; attempts/request {:.2}; failures {} timeouts {}",
            line.label,
            goodput(m, 0, 10),
            goodput(m, 10, 20),
            goodput(m, 20, 40),
            goodput(m, 40, 60),
            goodput(m, 60, 90),
            recovered_at(m, 89),
            line.attempts_per_request.unwrap_or(0.0),
            line.failures,
            line.timeouts,
        );
        assert!(goodput(m, 0, 10) > 0.9 * OFFERED, "{line:?}");
    }
    let (relay, relay_line) = run(&runs, "relay 503 (nginx default)");
    let (storm, storm_line) = run(&runs, "retry 503 without budget");
    let (budget, budget_line) = run(&runs, "retry 503 within budget");
    // Recovered: relayed, and retried within the budget (later: its retries slow the drain).
    assert!(goodput(relay, 60, 90) > 0.9 * OFFERED);
    assert!(goodput(budget, 60, 90) > 0.9 * OFFERED);
    let (relayed, budgeted) = (recovered_at(relay, 89), recovered_at(budget, 89));
    assert!(relayed.is_some() && budgeted.is_some() && relayed < budgeted);
    assert_eq!(recovered_at(storm, 89), None);
    // Not recovered: seventy seconds after the trigger ended, next to nothing succeeds.
    assert!(goodput(storm, 40, 90) < 0.1 * OFFERED);
    // The amplification: several attempts a request without a budget, the budget's share
    // with it (20% of the requests and 3 a second), none when 503s are relayed.
    let attempts = |l: &Line| l.attempts_per_request.unwrap_or(0.0);
    assert!(attempts(storm_line) > 3.0, "{storm_line:?}");
    assert!(
        attempts(budget_line) < 1.2 + 3.0 / OFFERED + 0.01,
        "{budget_line:?}"
    );
    assert_eq!(attempts(relay_line), 1.0);
}

/// One of five backends answers 503 to everything. Round robin: relayed, a fifth of the
/// requests fail; moved on, none, for a quarter more attempts; the budget allows nearly all of
/// them. least_conn sees the broken backend idle and sends it nearly every first attempt:
/// without a budget each request costs two attempts, within the budget most requests fail
/// (the budget caps the amplification, not the damage); passive health (max_fails 1, a listed
/// 503 being a failure) takes the backend out and fixes both; relayed, an unlisted 503 is no
/// failure for passive health and the backend keeps most of the traffic.
#[test]
fn one_backend_answering_503_to_everything() {
    let runs = played("retry-one-bad.toml");
    let mut seen = Vec::new();
    for (_, line) in &runs {
        let attempts = line.attempts_per_request.unwrap_or(0.0);
        // The four healthy backends answer every attempt they get with 200 (they are under
        // capacity): their attempts are the successes.
        let ok = 1.0 - (line.failures + line.timeouts) / line.requests;
        eprintln!(
            "{}: attempts/request {attempts:.3} (healthy {ok:.3}, the broken one {:.3}); failures {:.1}%; p99 {:.1} ms",
            line.label,
            attempts - ok,
            100.0 * line.failures / line.requests,
            line.p99_ms
        );
        assert_eq!(line.timeouts, 0.0, "{line:?}");
        seen.push((line.label.as_str(), attempts, 1.0 - ok));
    }
    let of = |label: &str| {
        let &(_, attempts, failed) = seen.iter().find(|(l, _, _)| *l == label).expect(label);
        (attempts, failed)
    };
    let cap = 1.2 + 3.0 / 200.0 + 0.005;
    let (a, f) = of("round_robin: relay 503");
    assert!(a == 1.0 && (0.18..0.22).contains(&f), "{a} {f}");
    let (a, f) = of("round_robin: retry 503 without budget");
    assert!((1.2..1.3).contains(&a) && f == 0.0, "{a} {f}");
    let (a, f) = of("round_robin: retry 503 within budget");
    assert!(a < cap && f < 0.05, "{a} {f}");
    let (a, f) = of("least_conn: retry 503 without budget");
    assert!(a > 1.9 && f == 0.0, "{a} {f}");
    let (a, f) = of("least_conn: retry 503 within budget");
    assert!(a < cap && f > 0.4, "{a} {f}");
    let (a, f) = of("least_conn: retry 503 within budget and max_fails 1");
    assert!(a < 1.01 && f < 0.005, "{a} {f}");
    let (a, f) = of("least_conn: relay 503 and max_fails 1");
    assert!(a == 1.0 && f > 0.5, "{a} {f}");
}
