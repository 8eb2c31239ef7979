//! The simulator against queueing theory: the supermarket model's mean time in the system, on
//! a small instance (200 servers, 400,000 requests after 100,000 discarded), within 6% of the
//! closed form — the full-size check (10⁷ requests, within 3%) is for the docs.

use balance::Algorithm;
use sim::supermarket::{Setup, run, theory};

fn check(algorithm: Algorithm, d: u32, load: f64) {
    let setup = Setup {
        servers: 200,
        load,
        algorithm,
        requests: 400_000,
        warmup: 100_000,
        seed: 7,
    };
    let simulated = run(&setup);
    let expected = theory(load, d);
    let error = (simulated - expected).abs() / expected;
    println!(
        "{algorithm:?} λ = {load}: simulated {simulated:.4}, theory {expected:.4}, error {:.2}%",
        error * 100.0
    );
    assert!(
        error < 0.06,
        "{algorithm:?} at λ = {load}: simulated {simulated}, theory {expected}"
    );
}

#[test]
fn random_is_m_m_1() {
    check(Algorithm::Random, 1, 0.5);
    check(Algorithm::Random, 1, 0.7);
}

#[test]
fn random_two_is_the_power_of_two_choices() {
    check(Algorithm::RandomTwo, 2, 0.5);
    check(Algorithm::RandomTwo, 2, 0.9);
}

#[test]
fn the_same_seed_gives_the_same_result() {
    let setup = Setup {
        servers: 50,
        load: 0.8,
        algorithm: Algorithm::RandomTwo,
        requests: 20_000,
        warmup: 1_000,
        seed: 3,
    };
    assert_eq!(run(&setup).to_bits(), run(&setup).to_bits());
    assert_ne!(
        run(&setup).to_bits(),
        run(&Setup { seed: 4, ..setup }).to_bits()
    );
}
