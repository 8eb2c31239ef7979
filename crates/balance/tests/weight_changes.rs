//! Issue 30: smooth weighted round robin across weight changes. A change of weights must
//! neither burst (one backend taking many picks in a row because its `current` was on the old
//! scale) nor herd (every `current` reset to 0, so the picks after each change restart nginx's
//! sequence from the lowest index: with weights rewritten every few picks, the low-indexed
//! backends get them all).

use balance::{Algorithm, BackendSpec, Nanos, Options, Outcome, Pool};

fn pool(weights: &[u32]) -> Pool {
    let specs: Vec<BackendSpec> = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| BackendSpec::new(w).named(&format!("10.0.{}.{}:80", i / 250, i % 250 + 1)))
        .collect();
    Pool::new(
        Algorithm::WeightedRoundRobin,
        &Options::default(),
        &specs,
        &[],
        1,
    )
}

/// 100 backends of weight 10; every 20 picks one weight moves by one (a weight model's
/// rewrite): over 100 such rounds every backend gets about its share (20 picks), not the
/// first twenty all of them.
#[test]
fn frequent_small_weight_changes_do_not_herd_onto_the_lowest_indices() {
    let n = 100;
    let mut weights = vec![10u32; n];
    let mut p = pool(&weights);
    let mut counts = vec![0u64; n];
    let mut now = 0;
    for round in 0..100 {
        weights[n - 1] = 10 + (round % 2) as u32;
        p.set_weights(&weights, Nanos(now));
        for _ in 0..20 {
            now += 1_000;
            let t = p.pick(None, &[], Nanos(now)).expect("a backend");
            counts[t.backend().index()] += 1;
            p.complete(t, Outcome::Success, Nanos(now + 500));
        }
    }
    let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    assert!(
        *min >= 10 && *max <= 30,
        "picks per backend from {min} to {max}: {counts:?}"
    );
}

/// Weights rescaled from hundreds to single digits: no backend takes more than its share of a
/// round plus one in a row after the change.
#[test]
fn a_rescale_does_not_burst() {
    let mut p = pool(&[300, 200, 500]);
    let mut now = 0;
    for _ in 0..7 {
        now += 1_000;
        let t = p.pick(None, &[], Nanos(now)).expect("a backend");
        p.complete(t, Outcome::Success, Nanos(now + 500));
    }
    p.set_weights(&[1, 1, 2], Nanos(now));
    let mut run = (usize::MAX, 0);
    let mut longest = 0;
    for _ in 0..40 {
        now += 1_000;
        let t = p.pick(None, &[], Nanos(now)).expect("a backend");
        let b = t.backend().index();
        run = if run.0 == b { (b, run.1 + 1) } else { (b, 1) };
        longest = longest.max(run.1);
        p.complete(t, Outcome::Success, Nanos(now + 500));
    }
    // nginx's sequence for 1, 1, 2 never gives one backend more than 2 in a row.
    assert!(longest <= 3, "{longest} picks in a row after the rescale");
}
