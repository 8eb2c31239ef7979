//! Mitzenmacher's supermarket model, the theory a simulated run is checked against: `n`
//! servers of one slot, Poisson arrivals at rate `λ·n`, exponential service of mean `S`; each
//! request goes to one server drawn at random (`random`, d = 1: n M/M/1 queues) or to the less
//! loaded of two (`random_two`, d = 2). In equilibrium, as n grows, the mean time in the system
//! is, in units of `S`:
//!
//! * d = 1: `1/(1 − λ)` (M/M/1);
//! * d ≥ 2: `T(d) = Σ_{i≥1} λ^((dⁱ − d)/(d − 1))`, from the fixed point `s_i = λ^((dⁱ − 1)/(d − 1))`
//!   of the fraction of queues with at least i requests (M. Mitzenmacher, "The Power of Two
//!   Choices in Randomized Load Balancing", IEEE TPDS 12(10), 2001, Theorem 3.4 and §3.3).
//!
//! The report adds a theory column to the table of a run that is this model
//! ([`expected_ms`]); `sim::supermarket` re-exports [`mean_time`].

use super::split_label;
use crate::run::Results;
use crate::scenario::Load;

/// The closed form of the mean time in the system, in units of the mean service time.
pub fn mean_time(load: f64, d: u32) -> f64 {
    if d <= 1 {
        return 1.0 / (1.0 - load);
    }
    let d = f64::from(d);
    (1..)
        .map(|i: i32| load.powf((d.powi(i) - d) / (d - 1.0)))
        .take_while(|term| *term > 1e-15)
        .take(64)
        .sum()
}

/// The choices `d` of a contender of the model: 1 for `random`, 2 for `random_two`.
fn choices(algorithm: &str) -> Option<u32> {
    match algorithm {
        "random" => Some(1),
        "random_two" => Some(2),
        _ => None,
    }
}

/// Whether `results` are the supermarket model: simulated, one balancer, open loop with
/// Poisson arrivals, exponential costs, every backend one slot at speed 1 with no
/// antagonist, and no report delay or fleet varied. Returns the mean service time in ms.
fn model(results: &Results) -> Option<f64> {
    let s = &results.scenario;
    let sim = s.sim.as_ref()?;
    let single = sim.balancers.0.iter().all(|&n| n <= 1);
    let servers = s
        .backends
        .iter()
        .all(|b| b.workers == 1 && b.speed == 1.0 && b.antagonist.is_none());
    let poisson = s.traffic.spacing == "poisson" && matches!(results.traffic.load, Load::Open(_));
    if !(results.simulated && single && servers && poisson && sim.outages.is_empty()) {
        return None;
    }
    let mean: f64 = s.traffic.cost.strip_prefix("exp:")?.trim().parse().ok()?;
    (mean > 0.0).then_some(mean)
}

/// The model's mean time in the system in ms for the row `label` (a contender of the model at
/// an offered load below 1), or `None` when the run or the row is not the model.
pub fn expected_ms(results: &Results, label: &str, offered_load: Option<f64>) -> Option<f64> {
    let service = model(results)?;
    let load = offered_load.filter(|l| (0.0..1.0).contains(l))?;
    let (contender, _) = split_label(results, label);
    let spec = results
        .scenario
        .algorithms
        .iter()
        .find(|a| a.name == contender)?;
    let d = choices(spec.algorithm.as_deref().unwrap_or(&spec.name))?;
    Some(mean_time(load, d) * service)
}

/// What the theory column is, under the table.
pub const NOTE: &str = "theory ms: the supermarket model's mean time in the system (M. Mitzenmacher, \"The Power of Two Choices in Randomized Load Balancing\", 2001) times the mean service time: 1/(1 − λ) for one choice (random: M/M/1), Σ_{i≥1} λ^((dⁱ − d)/(d − 1)) for d choices (random_two: d = 2), from the fixed point s_i = λ^((dⁱ − 1)/(d − 1)); compare with mean ms.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closed_form_matches_known_values() {
        // d = 1: M/M/1. d = 2: exponents 0, 2, 6, 14, 30, ...: at λ = 0.5, 1.2657.
        assert!((mean_time(0.5, 1) - 2.0).abs() < 1e-12);
        assert!((mean_time(0.9, 1) - 10.0).abs() < 1e-9);
        let t = mean_time(0.5, 2);
        let sum = 1.0 + 0.25 + 0.5f64.powi(6) + 0.5f64.powi(14) + 0.5f64.powi(30);
        assert!((t - sum).abs() < 1e-9, "{t}");
        assert!(mean_time(0.9, 2) < mean_time(0.9, 1) / 2.0);
    }
}
