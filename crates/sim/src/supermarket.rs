//! Mitzenmacher's supermarket model, the simulator's check against queueing theory: `n`
//! servers of one slot, Poisson arrivals at rate `λ·n`, exponential service of mean 1 s; each
//! request goes to one server drawn at random (`random`, d = 1: n M/M/1 queues) or to the less
//! loaded of two (`random_two`, d = 2). In equilibrium, as n grows, the mean time in the
//! system is `T(d) = Σ_{i≥1} λ^((dⁱ − d)/(d − 1))` for d ≥ 2, and `1/(1 − λ)` for d = 1
//! (M. Mitzenmacher, "The Power of Two Choices in Randomized Load Balancing", 1996/2001).
//!
//! The choice is made by `balance::Pool` — the proxy's own code — with in-flight counts as
//! the queue lengths (one balancer sees every request, as in the model).

use balance::{Algorithm, BackendSpec, Nanos, Options, Outcome, Pool, Ticket};
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use rand_pcg::Pcg64Mcg;

use crate::events::{Events, Time};
use crate::server::Server;

/// One supermarket run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Setup {
    pub servers: usize,
    /// λ: the load per server, below 1.
    pub load: f64,
    /// `Random` (d = 1) or `RandomTwo` (d = 2), or any other algorithm to compare.
    pub algorithm: Algorithm,
    /// Requests measured, after `warmup` requests that are not.
    pub requests: u64,
    pub warmup: u64,
    pub seed: u64,
}

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

enum Event {
    Arrival,
    /// Job `1` ends its service on server `0`.
    Departure(usize, u64),
}

const SECOND: f64 = 1e9;

/// Runs `setup`; the mean time in the system of the measured requests, in seconds.
pub fn run(setup: &Setup) -> f64 {
    let specs: Vec<BackendSpec> = (0..setup.servers).map(|_| BackendSpec::new(1)).collect();
    let mut pool = Pool::new(
        setup.algorithm,
        &Options::default(),
        &specs,
        &[],
        setup.seed,
    );
    let mut rng = Pcg64Mcg::seed_from_u64(setup.seed ^ 0x5eed);
    let gaps = Exp::new(setup.load * setup.servers as f64).expect("a positive rate");
    let work = Exp::new(1.0).expect("a positive rate");
    let mut servers: Vec<Server> = (0..setup.servers).map(|_| Server::new(1, 1.0)).collect();
    // Jobs in the system, in a slab (a job's id is its index; freed places are reused):
    // ticket, arrival time, and whether it is measured.
    let mut jobs: Vec<Option<(Ticket, Time, bool)>> = Vec::new();
    let mut free: Vec<u64> = Vec::new();
    let mut events = Events::default();
    let total = setup.warmup + setup.requests;
    let (mut arrived, mut measured, mut sum) = (0u64, 0u64, 0f64);
    events.push(0, Event::Arrival);
    while let Some((now, event)) = events.pop() {
        match event {
            Event::Arrival => {
                let measured_job = arrived >= setup.warmup;
                arrived += 1;
                if arrived < total {
                    let gap = (gaps.sample(&mut rng) * SECOND) as Time;
                    events.push(now + gap, Event::Arrival);
                }
                let Some(ticket) = pool.pick(None, &[], Nanos(now)) else {
                    continue;
                };
                let k = ticket.backend().index();
                let w = (work.sample(&mut rng) * SECOND) as Time;
                let job = Some((ticket, now, measured_job));
                let id = match free.pop() {
                    Some(id) => {
                        jobs[id as usize] = job;
                        id
                    }
                    None => {
                        jobs.push(job);
                        jobs.len() as u64 - 1
                    }
                };
                if let Some(end) = servers[k].arrive(now, id, w) {
                    events.push(end, Event::Departure(k, id));
                }
            }
            Event::Departure(k, id) => {
                if let Some((ticket, at, counted)) =
                    jobs.get_mut(id as usize).and_then(Option::take)
                {
                    free.push(id);
                    pool.complete(ticket, Outcome::Success, Nanos(now));
                    if counted {
                        measured += 1;
                        sum += (now - at) as f64 / SECOND;
                    }
                }
                if let Some((next, end)) = servers[k].finish(now) {
                    events.push(end, Event::Departure(k, next));
                }
            }
        }
    }
    if measured == 0 {
        0.0
    } else {
        sum / measured as f64
    }
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
