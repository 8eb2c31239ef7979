//! Mitzenmacher's supermarket model, the simulator's check against queueing theory: `n`
//! servers of one slot, Poisson arrivals at rate `λ·n`, exponential service of mean 1 s; each
//! request goes to one server drawn at random (`random`, d = 1: n M/M/1 queues) or to the less
//! loaded of two (`random_two`, d = 2). In equilibrium, as n grows, the mean time in the
//! system is `T(d) = Σ_{i≥1} λ^((dⁱ − d)/(d − 1))` for d ≥ 2, and `1/(1 − λ)` for d = 1
//! (M. Mitzenmacher, "The Power of Two Choices in Randomized Load Balancing", 1996/2001).
//!
//! `lab/scenarios/sim-supermarket.toml` is the model as a scenario: the simulator runs it
//! like any other, with `balance::Pool` choosing by its in-flight counts (one balancer sees
//! every request, as in the model); `docs/simulator.md` compares it with [`theory`].

/// The closed form of the mean time in the system, in units of the mean service time.
pub fn theory(load: f64, d: u32) -> f64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closed_form_matches_known_values() {
        // d = 1: M/M/1. d = 2: exponents 0, 2, 6, 14, 30, ...: at λ = 0.5, 1.2657.
        assert!((theory(0.5, 1) - 2.0).abs() < 1e-12);
        assert!((theory(0.9, 1) - 10.0).abs() < 1e-9);
        let t = theory(0.5, 2);
        let sum = 1.0 + 0.25 + 0.5f64.powi(6) + 0.5f64.powi(14) + 0.5f64.powi(30);
        assert!((t - sum).abs() < 1e-9, "{t}");
        assert!(theory(0.9, 2) < theory(0.9, 1) / 2.0);
    }
}
