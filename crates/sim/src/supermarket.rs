//! Mitzenmacher's supermarket model, the simulator's check against queueing theory: `n`
//! servers of one slot, Poisson arrivals at rate `λ·n`, exponential service of mean 1 s; each
//! request goes to one server drawn at random (`random`, d = 1: n M/M/1 queues) or to the less
//! loaded of two (`random_two`, d = 2). In equilibrium, as n grows, the mean time in the
//! system is `T(d) = Σ_{i≥1} λ^((dⁱ − d)/(d − 1))` for d ≥ 2, and `1/(1 − λ)` for d = 1
//! (M. Mitzenmacher, "The Power of Two Choices in Randomized Load Balancing", 1996/2001).
//!
//! `lab/scenarios/sim-supermarket.toml` is the model as a scenario: the simulator runs it
//! like any other, with `balance::Pool` choosing by its in-flight counts (one balancer sees
//! every request, as in the model). The closed form lives with the report, which writes it
//! as the table's theory column for such a run ([`lab::report::theory`]); `docs/simulator.md`
//! compares the full-size run with it.

/// The closed form of the mean time in the system, in units of the mean service time.
pub use lab::report::theory::mean_time as theory;
