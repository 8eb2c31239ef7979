//! The backend's side of Prequal (NSDI 2024, §3): `GET /probe` answers its requests in flight
//! (RIF) and the latency it estimates for a request arriving at that RIF, from its own
//! completions ([`RifLatency`], the same estimator `fulcrum agent --probe-target` keeps).
//!
//! * **RIF** counts every counted request from the moment it is served until its work ends:
//!   waiting for a slot, in service, or still working after a `--deadline` answer (its work
//!   goes on, so it still loads the server). A request the fault draw fails at once is not in
//!   flight.
//! * **Latency**: each request that completes its work is recorded with the RIF it found on
//!   arrival (the others before it) and the time from arrival to done (queueing included).
//! * **Cheap**: a probe reads one atomic and takes one short lock (never held across an
//!   await); its own wall time is summed, so a run can state what probing cost the backend
//!   ([`super::Backend::probe_cost`]).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use balance::Nanos;
use balance::RifLatency;
use tokio::time::Instant;

/// A backend's requests in flight and its latency estimator.
#[derive(Debug)]
pub(crate) struct Probes {
    /// Time zero of the `Nanos` handed to the estimator.
    epoch: Instant,
    in_flight: AtomicU32,
    latency: Mutex<RifLatency>,
    /// Probes answered, and the wall time spent answering them (ns).
    answered: AtomicU64,
    spent_ns: AtomicU64,
}

/// One request in flight: leaves the count when dropped (done, refused or cancelled); a done
/// request is recorded first with [`InFlight::done`].
#[derive(Debug)]
pub(crate) struct InFlight {
    probes: Arc<Probes>,
    /// The RIF the request found on arrival.
    rif: u32,
    arrived: Instant,
}

impl Probes {
    pub(crate) fn new() -> Probes {
        Probes {
            epoch: Instant::now(),
            in_flight: AtomicU32::new(0),
            latency: Mutex::new(RifLatency::new()),
            answered: AtomicU64::new(0),
            spent_ns: AtomicU64::new(0),
        }
    }

    fn now(&self) -> Nanos {
        Nanos::from(self.epoch.elapsed())
    }

    /// A request arrives: it is in flight until the guard drops.
    pub(crate) fn arrive(self: &Arc<Self>) -> InFlight {
        let rif = self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight {
            probes: Arc::clone(self),
            rif,
            arrived: Instant::now(),
        }
    }

    /// Requests in flight now.
    pub(crate) fn rif(&self) -> u32 {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// The `GET /probe` body now.
    pub(crate) fn answer(&self) -> Vec<u8> {
        let started = std::time::Instant::now();
        let rif = self.rif();
        let now = self.now();
        let estimate = lock(&self.latency).estimate(rif, now);
        let body = agent::probe::probe_json(rif, Duration::from(estimate));
        let spent = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.answered.fetch_add(1, Ordering::Relaxed);
        self.spent_ns.fetch_add(spent, Ordering::Relaxed);
        body
    }

    /// Probes answered so far and the wall time spent answering them.
    pub(crate) fn cost(&self) -> (u64, Duration) {
        (
            self.answered.load(Ordering::Relaxed),
            Duration::from_nanos(self.spent_ns.load(Ordering::Relaxed)),
        )
    }
}

impl InFlight {
    /// The request's work is done: its latency is recorded at the RIF it found.
    pub(crate) fn done(self) {
        let latency = Nanos::from(self.arrived.elapsed());
        let now = self.probes.now();
        lock(&self.probes.latency).record(self.rif, latency, now);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.probes.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
