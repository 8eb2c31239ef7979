//! Over many random weight vectors, the share of requests each backend receives converges to its
//! weight's share, for every algorithm that honours weights (and to an equal share for the two
//! that do not: `round_robin` and `latency`, at equal latencies).
//!
//! Each algorithm is driven the way its weights show:
//! * requests that complete before the next one (static, least-connection and weight-model
//!   algorithms: idle backends tie, and ties go by smooth WRR; hash algorithms, with a new
//!   random client per request);
//! * a fixed number of requests held in flight, the oldest completing as a new one arrives
//!   (`fair`, `random_two`, `least_time`, `p2c_ewma`: they balance what is in flight, so their
//!   weights show only under load; `least_time` and `p2c_ewma` also favour the heavier backend
//!   when all are idle, by design).
//!
//! The tolerance per backend is the larger of a statistical bound (4.5 standard deviations of
//! a share measured over the picks made) and a bias the algorithm's own structure allows: 12% of
//! the share in general, 35% on the ketama ring (160 points per weight unit leave each backend's
//! arc a few percent off; the ring is nginx's and stays as it is).

use std::collections::VecDeque;

use balance::{Affinity, Algorithm, BackendSpec, Nanos, Options, Outcome, Pool, Ticket};
use proptest::prelude::*;
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64Mcg;

const PICKS: usize = 20_000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Drive {
    OneAtATime,
    HeldLoad,
}

fn drive(algorithm: Algorithm) -> Drive {
    match algorithm {
        Algorithm::Fair | Algorithm::RandomTwo | Algorithm::LeastTime | Algorithm::P2cEwma => {
            Drive::HeldLoad
        }
        // Nobody answers its probes here: it picks by its fallback, random_two.
        Algorithm::Prequal => Drive::HeldLoad,
        _ => Drive::OneAtATime,
    }
}

/// How far off its weight a backend's share may be, besides chance.
fn bias(algorithm: Algorithm, options: &Options) -> f64 {
    match algorithm {
        Algorithm::BoundedLoad => 0.35,
        Algorithm::Hash if options.consistent => 0.35,
        _ => 0.12,
    }
}

fn options_for(consistent: bool) -> Options {
    Options {
        consistent,
        ..Options::default()
    }
}

/// A random client key in the form `algorithm` hashes.
fn key(algorithm: Algorithm, rng: &mut Pcg64Mcg, buf: &mut Vec<u8>) -> bool {
    buf.clear();
    let ip: [u8; 4] = rng.random();
    match algorithm.affinity() {
        Some(Affinity::AddressOctets) => buf.extend_from_slice(&ip),
        Some(Affinity::Key) => {
            buf.extend_from_slice(format!("{}.{}.{}.{}", ip[0], ip[1], ip[2], ip[3]).as_bytes())
        }
        None => return false,
    }
    true
}

/// Picks per backend over `PICKS` requests.
fn shares(algorithm: Algorithm, options: &Options, weights: &[u32], seed: u64) -> Vec<u64> {
    let specs: Vec<BackendSpec> = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| BackendSpec::new(w).named(&format!("10.1.{}.{}:80", i / 250, i % 250 + 1)))
        .collect();
    let mut pool = Pool::new(algorithm, options, &specs, &[], seed);
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    let mut buf = Vec::new();
    let mut counts = vec![0u64; weights.len()];
    let mut now = 0u64;
    let mut pick = |pool: &mut Pool, now: u64| -> Ticket {
        let hashed = key(algorithm, &mut rng, &mut buf);
        pool.pick(hashed.then_some(&buf[..]), &[], Nanos(now))
            .expect("every backend is up")
    };
    match drive(algorithm) {
        Drive::OneAtATime => {
            for _ in 0..PICKS {
                now += 1_000_000;
                let t = pick(&mut pool, now);
                counts[t.backend().index()] += 1;
                pool.complete(t, Outcome::Success, Nanos(now + 500_000));
            }
        }
        Drive::HeldLoad => {
            // Eight requests per unit of weight in flight; each lives the same time, so a
            // backend's share of picks is its share of what is in flight.
            let held = 8 * weights.iter().sum::<u32>() as usize;
            let mut in_flight: VecDeque<Ticket> = VecDeque::new();
            for k in 0..held + PICKS {
                now += 1_000_000;
                if in_flight.len() == held {
                    let t = in_flight.pop_front().expect("held");
                    pool.complete(t, Outcome::Success, Nanos(now));
                }
                let t = pick(&mut pool, now);
                if k >= held {
                    counts[t.backend().index()] += 1;
                }
                in_flight.push_back(t);
            }
            for t in in_flight {
                pool.complete(t, Outcome::Success, Nanos(now));
            }
        }
    }
    counts
}

fn check(
    algorithm: Algorithm,
    options: &Options,
    weights: &[u32],
    seed: u64,
) -> Result<(), String> {
    let counts = shares(algorithm, options, weights, seed);
    let total: u64 = counts.iter().sum();
    let weight_sum: u32 = weights.iter().sum();
    for (i, (&c, &w)) in counts.iter().zip(weights).enumerate() {
        let want = if algorithm.uses_weights() {
            f64::from(w) / f64::from(weight_sum)
        } else {
            1.0 / weights.len() as f64
        };
        let got = c as f64 / total as f64;
        let chance = 4.5 * (want * (1.0 - want) / total as f64).sqrt();
        let allowed = chance.max(bias(algorithm, options) * want);
        if (got - want).abs() > allowed {
            return Err(format!(
                "{algorithm} (consistent={}): backend {i} got {got:.4}, its weight's share is \
                 {want:.4} (±{allowed:.4}); weights {weights:?}, counts {counts:?}",
                options.consistent
            ));
        }
    }
    Ok(())
}

proptest! {
    // A fixed seed: the bounds are statistical (4.5 sigma over some 2,400 comparisons), so a
    // random seed would fail a run now and then with nothing wrong.
    #![proptest_config(ProptestConfig {
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x7368_6172_6573),
        ..ProptestConfig::with_cases(24)
    })]

    #[test]
    fn shares_converge_to_weights(
        weights in prop::collection::vec(1u32..7, 2..7),
        seed in any::<u64>(),
    ) {
        for &algorithm in Algorithm::ALL {
            let options = options_for(false);
            if let Err(e) = check(algorithm, &options, &weights, seed) {
                prop_assert!(false, "{}", e);
            }
        }
        let consistent = options_for(true);
        if let Err(e) = check(Algorithm::Hash, &consistent, &weights, seed) {
            prop_assert!(false, "{}", e);
        }
    }
}
