//! fulcrum's simulator: the `balance` crate's pools, algorithms, weight models and retry rule —
//! the very code the proxy runs — driven in virtual time by a discrete-event loop, against
//! backends modelled as the lab's emulated ones, from the lab's own scenario files.
//!
//! # Layout
//!
//! * [`events`]: the event queue (virtual nanoseconds; ties in scheduling order).
//! * [`servers`]: a backend's capacity model (slots, processor sharing, antagonist, faults)
//!   and its utilization meter.
//! * [`cluster`]: one run: backends, `balancers` instances each with its own `Pool`, the
//!   traffic, timeouts, retries, load reports.
//! * [`play`]: a scenario's every contender (and load, and repetition), into the lab's
//!   [`lab::run::Results`], written by the lab's report code.
//! * [`supermarket`]: Mitzenmacher's closed form, which the simulator is checked against.
//!
//! Deterministic: no clock, no I/O in the model; every random draw comes from the run's seed,
//! so a seed gives the same results bit for bit.

pub mod cluster;
pub mod events;
pub mod play;
pub mod servers;
pub mod supermarket;

use std::time::Duration;

use balance::Policy;
use lab::scenario::{Outage, Scenario};

/// One contender as the proxy would run it: its label, and the balancing policy fulcrum's
/// configuration parser makes of the configuration the lab would give it (so defaults and
/// checks are the proxy's own, and the pool, the attempt limit, the queue and the load-report
/// feed are built as the proxy builds them, [`balance::Policy`]).
#[derive(Debug, Clone)]
pub struct Contender {
    pub label: String,
    pub policy: Policy,
    /// The scenario's backend (plan index) of each pool index.
    pub plan_of: Vec<usize>,
}

/// The simulator's own knobs (`[sim]`), resolved.
#[derive(Debug, Clone, Default)]
pub struct Knobs {
    /// Balancer instances of this run.
    pub balancers: u32,
    /// Every fleet size to run at (one row each when more than one).
    pub fleets: Vec<u32>,
    pub network_delay: Duration,
    pub report_delay: Duration,
    /// Every report delay to run at (one row each when more than one).
    pub report_delays: Vec<Duration>,
    pub requests: Option<u64>,
    pub warmup: u64,
    pub offered_load: Vec<f64>,
    pub outages: Vec<Outage>,
    /// Probing algorithms: the chance a probe is lost (`[sim] probe_loss`).
    pub probe_loss: f64,
    /// Probing algorithms: a probe's work at the backend (`[sim] probe_cost`).
    pub probe_cost: Duration,
}

/// A probe's work at the backend when `[sim] probe_cost` is not given: an HTTP request
/// answered from memory (a counter and a small table read) costs a server tens of
/// microseconds of CPU; 20 µs, at speed 1.
pub const DEFAULT_PROBE_COST: Duration = Duration::from_micros(20);

impl Knobs {
    /// The knobs of `scenario` (defaults without a `[sim]` section). The scenario was checked
    /// when read, so the values parse.
    pub fn of(scenario: &Scenario) -> Knobs {
        let Some(sim) = &scenario.sim else {
            return Knobs {
                balancers: 1,
                fleets: vec![1],
                report_delays: vec![Duration::ZERO],
                probe_cost: DEFAULT_PROBE_COST,
                ..Knobs::default()
            };
        };
        let duration = |v: Option<&str>| {
            v.and_then(|v| humantime::parse_duration(v).ok())
                .unwrap_or_default()
        };
        let mut report_delays: Vec<Duration> = sim
            .report_delay
            .as_ref()
            .map(|d| d.values().into_iter().map(|v| duration(Some(v))).collect())
            .unwrap_or_default();
        if report_delays.is_empty() {
            report_delays.push(Duration::ZERO);
        }
        Knobs {
            balancers: sim.balancers.0.first().copied().unwrap_or(1).max(1),
            fleets: sim.balancers.0.iter().map(|&n| n.max(1)).collect(),
            network_delay: duration(sim.network_delay.as_deref()),
            report_delay: report_delays[0],
            report_delays,
            requests: sim.requests,
            warmup: sim.warmup,
            offered_load: sim.offered_load.clone(),
            outages: sim.outages.iter().filter_map(|o| o.parse().ok()).collect(),
            probe_loss: sim.probe_loss.unwrap_or(0.0),
            probe_cost: sim
                .probe_cost
                .as_deref()
                .and_then(|v| humantime::parse_duration(v).ok())
                .unwrap_or(DEFAULT_PROBE_COST),
        }
    }
}
