//! The simulator against queueing theory: the supermarket model (`sim-supermarket.toml`, on a
//! smaller instance: 200 servers, 400,000 requests after 200,000 discarded), its mean time in
//! the system within 6% of the closed form — the full-size check (10⁷ requests, within 3% and
//! 5%) is in docs/simulator.md.

mod common;

use common::{contender, play, scenario};
use sim::supermarket::theory;

const SUPERMARKET: &str = r#"
seed = 7
[[backend]]
name = "s"
count = 200
workers = 1
max_queue = 100000000
[traffic]
cost = "exp:1000"
timeout = "1h"
clients = 200
[sim]
requests = 400_000
warmup = 200_000
offered_load = [LOADS]
[[algorithm]]
name = "random"
[[algorithm]]
name = "random_two"
"#;

#[test]
fn the_supermarket_model_meets_its_closed_form() {
    let s = scenario(&SUPERMARKET.replace("LOADS", "0.5, 0.9"));
    let results = play(&s, &[contender(&s, "random"), contender(&s, "random_two")]);
    let lines = lab::report::lines(&results);
    for (load, d, label) in [
        (0.5, 1, "random λ=0.50"),
        (0.5, 2, "random_two λ=0.50"),
        (0.9, 2, "random_two λ=0.90"),
    ] {
        let line = lines.iter().find(|l| l.label == label).expect(label);
        let simulated = line.mean_ms / 1000.0;
        let expected = theory(load, d);
        let error = (simulated - expected).abs() / expected;
        println!(
            "{label}: simulated {simulated:.4} s, theory {expected:.4} s, error {:.2}%",
            error * 100.0
        );
        assert!(
            error < 0.06,
            "{label}: simulated {simulated}, theory {expected}"
        );
        assert_eq!(line.offered_load, Some(load));
    }
    // d = 2 is the power of two choices: far below d = 1 at the same load.
    let mean = |label: &str| lines.iter().find(|l| l.label == label).unwrap().mean_ms;
    assert!(mean("random_two λ=0.90") < mean("random λ=0.90") / 2.0);
}
