//! Properties every algorithm keeps, checked over random pools with proptest and a fake clock
//! (no tokio, no real time: the simulator drives the same code the same way).

use balance::{Algorithm, BackendId, BackendSpec, Nanos, Options, Outcome, Pool};
use proptest::prelude::*;

fn specs(weights: &[u32], down: &[bool]) -> Vec<BackendSpec> {
    weights
        .iter()
        .zip(down)
        .enumerate()
        .map(|(i, (&w, &d))| BackendSpec {
            down: d,
            ..BackendSpec::new(w).named(&format!("10.0.{}.{}:80", i / 200, i % 200 + 1))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A pick is never ineligible or excluded, comes from the backups only when no primary can
    /// serve, and is `None` only when no backend at all can serve.
    #[test]
    fn never_ineligible_never_excluded(
        alg in prop::sample::select(Algorithm::ALL),
        weights in prop::collection::vec(1u32..10, 1..12),
        down_bits in any::<u64>(),
        exclude_bits in any::<u64>(),
        backups in 0usize..3,
        key in prop::collection::vec(any::<u8>(), 4),
        held in 0usize..20,
        seed in any::<u64>(),
    ) {
        let n = weights.len();
        let down: Vec<bool> = (0..n + backups).map(|i| down_bits >> i & 1 == 1).collect();
        let primary = specs(&weights, &down[..n]);
        let backup = specs(&vec![1; backups], &down[n..]);
        let mut pool = Pool::new(alg, &Options::default(), &primary, &backup, seed);
        let now = Nanos(1_000_000);
        // Some requests in flight, so load-aware algorithms see uneven load.
        let mut tickets = Vec::new();
        for _ in 0..held {
            if let Some(t) = pool.pick(Some(&key), &[], now) {
                tickets.push(t);
            }
        }
        let exclude: Vec<BackendId> = (0..(n + backups) as u32)
            .filter(|i| exclude_bits >> i & 1 == 1)
            .map(BackendId)
            .collect();
        let usable = |i: usize| !down[i] && !exclude.contains(&BackendId(i as u32));
        let primary_usable = (0..n).any(usable);
        let any_usable = (0..n + backups).any(usable);
        match pool.pick(Some(&key), &exclude, now) {
            Some(t) => {
                let i = t.backend().index();
                prop_assert!(usable(i), "{alg}: picked {i}, down={down:?} exclude={exclude:?}");
                prop_assert!(i < n || !primary_usable, "{alg}: a backup while a primary could serve");
                pool.complete(t, Outcome::Success, now);
            }
            None => prop_assert!(!any_usable, "{alg}: nothing picked though a backend could serve"),
        }
        for t in tickets {
            pool.complete(t, Outcome::Success, now);
        }
        for s in pool.states() {
            prop_assert_eq!(s.in_flight(), 0);
        }
    }

    /// Smooth WRR gives each backend exactly its weight's share of every full round.
    #[test]
    fn weighted_round_robin_shares_are_exact(
        weights in prop::collection::vec(1u32..20, 1..10),
        rounds in 1u32..5,
    ) {
        let primary = specs(&weights, &vec![false; weights.len()]);
        let mut pool = Pool::new(Algorithm::WeightedRoundRobin, &Options::default(), &primary, &[], 0);
        let total: u32 = weights.iter().sum();
        let mut counts = vec![0u32; weights.len()];
        for k in 0..total * rounds {
            let t = pool.pick(None, &[], Nanos(u64::from(k))).unwrap();
            counts[t.backend().index()] += 1;
            pool.complete(t, Outcome::Success, Nanos(u64::from(k)));
        }
        let expected: Vec<u32> = weights.iter().map(|w| w * rounds).collect();
        prop_assert_eq!(counts, expected);
    }

    /// Weighted random converges to the weights.
    #[test]
    fn random_shares_converge_to_weights(
        weights in prop::collection::vec(1u32..10, 2..6),
        seed in any::<u64>(),
    ) {
        let primary = specs(&weights, &vec![false; weights.len()]);
        let mut pool = Pool::new(Algorithm::Random, &Options::default(), &primary, &[], seed);
        let draws = 40_000u32;
        let mut counts = vec![0u32; weights.len()];
        for _ in 0..draws {
            let t = pool.pick(None, &[], Nanos(1)).unwrap();
            counts[t.backend().index()] += 1;
            pool.complete(t, Outcome::Success, Nanos(1));
        }
        let total: u32 = weights.iter().sum();
        for (c, w) in counts.iter().zip(&weights) {
            let share = f64::from(*c) / f64::from(draws);
            let want = f64::from(*w) / f64::from(total);
            prop_assert!((share - want).abs() < 0.02, "share {share:.3} vs weight share {want:.3}");
        }
    }
}

/// Thousands of picks and completions on a fake clock: least_conn with backends of different
/// speeds sends more to the fast one, passive health takes a failing backend out and brings it
/// back after fail_timeout, all without tokio or real time.
#[test]
fn virtual_time_replay() {
    let ms = |m: u64| Nanos(m * 1_000_000);
    let primary = specs(&[1, 1, 1], &[false; 3]);
    let mut pool = Pool::new(Algorithm::LeastConn, &Options::default(), &primary, &[], 0);
    // Service time per backend: 1 ms, 5 ms, and backend 2 fails between 1 s and 2 s.
    let service = [1u64, 5, 1];
    let mut in_flight: Vec<(Nanos, balance::Ticket)> = Vec::new();
    let mut served = [0u32; 3];
    let mut failed_while_out = 0;
    for step in 0..4_000u64 {
        let now = Nanos(step * 1_000_000); // one arrival per ms
        in_flight.sort_by_key(|(done, _)| *done);
        while in_flight.first().is_some_and(|(done, _)| *done <= now) {
            let (done, t) = in_flight.remove(0);
            let i = t.backend().index();
            let failing = i == 2 && done >= ms(1_000) && done < ms(2_000);
            let outcome = if failing {
                Outcome::Failure
            } else {
                Outcome::Success
            };
            pool.complete(t, outcome, done);
        }
        let t = pool
            .pick(None, &[], now)
            .expect("some backend is always up");
        let i = t.backend().index();
        served[i] += 1;
        if i == 2 && now >= ms(1_100) && now < ms(2_000) {
            failed_while_out += 1;
        }
        in_flight.push((Nanos(now.0 + service[i] * 1_000_000), t));
    }
    assert!(
        served[0] > served[1],
        "the fast backend serves more: {served:?}"
    );
    // While failing, backend 2 is out for fail_timeout (10 s) after its failure, so after the
    // first failures it gets nothing at all.
    assert_eq!(failed_while_out, 0, "{served:?}");
}

/// The longest run of one backend in `picks` consecutive picks, per backend.
fn longest_runs(pool: &mut Pool, n: usize, picks: u32, t0: u64) -> Vec<u32> {
    let mut longest = vec![0u32; n];
    let mut run = (usize::MAX, 0u32);
    for k in 0..picks {
        let now = Nanos(t0 + u64::from(k));
        let t = pool.pick(None, &[], now).unwrap();
        let i = t.backend().index();
        run = if run.0 == i { (i, run.1 + 1) } else { (i, 1) };
        longest[i] = longest[i].max(run.1);
        pool.complete(t, Outcome::Success, now);
    }
    longest
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Changing the weights never causes a burst: after `set_weights`, no backend takes more
    /// picks in a row than smooth WRR gives it from scratch with the new weights, plus the one
    /// pick it may have taken just before the change. (A weight model moving from a scale of
    /// hundreds back to 1, 1, 2 once gave one backend 11 to 60 picks in a row.)
    #[test]
    fn a_weight_change_causes_no_burst(
        alg in prop::sample::select(&[
            Algorithm::WeightedRoundRobin,
            Algorithm::DynamicWrr,
            Algorithm::CapacityWeighted,
            Algorithm::LeastConn,
        ][..]),
        before in prop::collection::vec(1u32..1000, 2..6),
        after_seed in prop::collection::vec(1u32..10, 6),
        picks_before in 0u32..2000,
    ) {
        let n = before.len();
        let after = &after_seed[..n];
        let primary = specs(&before, &vec![false; n]);
        let mut pool = Pool::new(alg, &Options::default(), &primary, &[], 0);
        longest_runs(&mut pool, n, picks_before, 0);
        pool.set_weights(after, Nanos(1_000_000));
        let total: u32 = after.iter().sum();
        let got = longest_runs(&mut pool, n, 3 * total, 2_000_000);
        let mut fresh = Pool::new(alg, &Options::default(), &specs(after, &vec![false; n]), &[], 0);
        let allowed = longest_runs(&mut fresh, n, 3 * total, 0);
        for i in 0..n {
            prop_assert!(
                got[i] <= allowed[i] + 1,
                "backend {} took {} picks in a row after {:?} → {:?} (from scratch: {})",
                i, got[i], before, after, allowed[i]
            );
        }
    }
}

/// The case the review found: dynamic_wrr's model at 299, 156, 3 snapping back to the
/// configured 1, 1, 2. Smooth WRR from scratch gives 1, 1, 2 as `c a b c`, so with the pick
/// before the change no backend may take more than 2 in a row.
#[test]
fn a_model_scale_snapping_back_causes_no_burst() {
    for picks_before in 0..458 {
        let primary = specs(&[1, 1, 2], &[false; 3]);
        let mut pool = Pool::new(Algorithm::DynamicWrr, &Options::default(), &primary, &[], 0);
        pool.set_weights(&[299, 156, 3], Nanos(0));
        longest_runs(&mut pool, 3, picks_before, 1);
        pool.set_weights(&[1, 1, 2], Nanos(10_000));
        let runs = longest_runs(&mut pool, 3, 40, 20_000);
        assert!(
            runs.iter().all(|&r| r <= 2),
            "after {picks_before} picks at 299, 156, 3: runs {runs:?}"
        );
    }
}
