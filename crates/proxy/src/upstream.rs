//! One upstream: its [`balance::Pool`], shared by every worker thread, and how one attempt
//! reaches a backend (each worker keeps its own connections, see [`crate::connections`]).
//!
//! The pool sits behind a mutex that is held only for a pick or a completion (a few hundred
//! nanoseconds, never across an await), so the algorithm sees one global sequence: weighted round
//! robin gives `a a b a c a a` however many threads serve.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use balance::{BackendId, Nanos, Outcome, Pool, Ticket};
use tokio::time::Instant;

use crate::connections::Connections;
use crate::settings::{HashKey, UpstreamSettings};

/// A backend's state, for the demo, logs and (later) the admin API.
#[derive(Debug, Clone)]
pub struct BackendSnapshot {
    pub addr: SocketAddr,
    pub backup: bool,
    pub weight: u32,
    pub in_flight: u32,
    pub requests: u64,
    pub failures: u64,
    pub available: bool,
    /// Whether active health checks have taken it out.
    pub check_failed: bool,
    /// Connections open to the backend, over every worker (busy or idle).
    pub connections_open: usize,
    /// Of those, the idle ones kept for reuse.
    pub connections_idle: usize,
}

#[derive(Debug)]
pub struct Upstream {
    settings: UpstreamSettings,
    pool: Mutex<Pool>,
    /// Backend addresses by pool id: primaries, then backups (the pool's order, not the
    /// configuration's).
    addrs: Vec<SocketAddr>,
    /// Time zero of the `Nanos` handed to the pool.
    epoch: Instant,
    /// Every worker's connections to the backends (by pool id), for counting.
    worker_pools: Mutex<Vec<Arc<[Connections]>>>,
}

impl Upstream {
    pub fn new(settings: UpstreamSettings) -> Upstream {
        let (backup, primary): (Vec<_>, Vec<_>) = settings.backends.iter().partition(|b| b.backup);
        let specs = |list: &[&crate::BackendSettings]| list.iter().map(|b| b.spec()).collect();
        let primary_specs: Vec<_> = specs(&primary);
        let backup_specs: Vec<_> = specs(&backup);
        let pool = Pool::new(
            settings.algorithm,
            &settings.options,
            &primary_specs,
            &backup_specs,
            settings.seed,
        );
        let addrs = primary.iter().chain(&backup).map(|b| b.addr).collect();
        Upstream {
            pool: Mutex::new(pool),
            addrs,
            epoch: Instant::now(),
            worker_pools: Mutex::new(Vec::new()),
            settings,
        }
    }

    pub fn name(&self) -> &str {
        &self.settings.name
    }

    /// The part of a request head the algorithm hashes (a header, a cookie, the URI), if any:
    /// what the request parser must locate.
    pub(crate) fn hashed_request_part(&self) -> Option<&HashKey> {
        let hashed = self.settings.algorithm.affinity() == Some(balance::Affinity::Key);
        (hashed && self.settings.hash_key != HashKey::ClientIp).then_some(&self.settings.hash_key)
    }

    /// What the upstream was configured with.
    pub fn settings(&self) -> &UpstreamSettings {
        &self.settings
    }

    /// The configured backends in pool order (primaries, then backups): entry `i` is the
    /// backend of `BackendId(i)`.
    pub fn backends_in_pool_order(&self) -> Vec<&crate::BackendSettings> {
        let (backup, primary): (Vec<_>, Vec<_>) =
            self.settings.backends.iter().partition(|b| b.backup);
        primary.into_iter().chain(backup).collect()
    }

    /// Applies the weights of every backend at once, in pool order (a weight model's result):
    /// one rebuild under the pool lock, so no pick ever sees half of them.
    pub fn set_weights(&self, weights: &[u32]) {
        let now = self.now();
        self.pool().set_weights(weights, now);
    }

    /// Records an active health check's verdict on backend `id` (pool order); returns whether
    /// it changed the backend's state.
    pub fn set_check_result(&self, id: BackendId, healthy: bool) -> bool {
        let now = self.now();
        self.pool().set_check_result(id, healthy, now)
    }

    /// The weights in force, in pool order.
    pub fn weights(&self) -> Vec<u32> {
        self.pool().states().iter().map(|s| s.weight()).collect()
    }

    /// A new worker's own connections to each backend, by pool id.
    pub(crate) fn worker_connections(&self) -> Arc<[Connections]> {
        let pools: Arc<[Connections]> = self
            .addrs
            .iter()
            .map(|&addr| {
                Connections::new(
                    addr,
                    self.settings.keepalive,
                    self.settings.keepalive_timeout,
                )
            })
            .collect();
        self.worker_pools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::clone(&pools));
        pools
    }

    /// Connections open to each backend (busy or idle) and idle, summed over the workers.
    fn connection_counts(&self) -> Vec<(usize, usize)> {
        let mut counts = vec![(0, 0); self.addrs.len()];
        for pools in self
            .worker_pools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            for (count, pool) in counts.iter_mut().zip(pools.iter()) {
                let (open, idle) = pool.counts();
                count.0 += open;
                count.1 += idle;
            }
        }
        counts
    }

    fn now(&self) -> Nanos {
        Nanos::from(self.epoch.elapsed())
    }

    fn pool(&self) -> MutexGuard<'_, Pool> {
        // A panic while holding the lock cannot leave the pool half-updated in a way that
        // matters more than stopping the proxy would, so carry on with the data.
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Attempts allowed for one request: the first and the retries.
    pub(crate) fn max_attempts(&self) -> usize {
        match self.settings.retries {
            Some(r) => r as usize + 1,
            None => self.addrs.len(),
        }
    }

    pub(crate) fn backend_addr(&self, id: BackendId) -> SocketAddr {
        self.addrs[id.index()]
    }

    pub(crate) fn pick(
        self: &Arc<Self>,
        affinity: Option<&[u8]>,
        tried: &[BackendId],
    ) -> Option<Attempt> {
        let now = self.now();
        let ticket = self.pool().pick(affinity, tried, now)?;
        Some(Attempt {
            backend: ticket.backend(),
            upstream: Arc::clone(self),
            ticket: Some(ticket),
        })
    }

    fn complete(&self, ticket: Ticket, outcome: Outcome) {
        let id = ticket.backend();
        let now = self.now();
        let disabled = {
            let mut pool = self.pool();
            pool.complete(ticket, outcome, now);
            let state = pool.state(id);
            (outcome == Outcome::Failure && state.fails() == state.spec().max_fails)
                .then(|| (state.fails(), state.spec().fail_timeout))
        };
        // Logged once the lock is released: a slow log sink must not hold up every worker.
        if let Some((fails, fail_timeout)) = disabled {
            tracing::warn!(
                upstream = %self.settings.name,
                backend = %self.backend_addr(id),
                fails,
                fail_timeout = ?Duration::from(fail_timeout),
                "backend temporarily disabled"
            );
        }
    }

    /// The state of every backend, in pool order.
    pub fn snapshot(&self) -> Vec<BackendSnapshot> {
        let connections = self.connection_counts();
        let pool = self.pool();
        let now = self.now();
        pool.states()
            .iter()
            .zip(connections)
            .enumerate()
            .map(|(i, (s, (open, idle)))| BackendSnapshot {
                addr: self.addrs[i],
                backup: i >= pool.primaries(),
                weight: s.weight(),
                in_flight: s.in_flight(),
                requests: s.requests(),
                failures: s.failures(),
                available: s.is_eligible(now),
                check_failed: s.is_check_failed(),
                connections_open: open,
                connections_idle: idle,
            })
            .collect()
    }
}

/// One attempt of a request on one backend. Completes its ticket exactly once: explicitly, or
/// as cancelled when dropped (the client went away).
#[derive(Debug)]
pub(crate) struct Attempt {
    pub(crate) backend: BackendId,
    upstream: Arc<Upstream>,
    ticket: Option<Ticket>,
}

impl Attempt {
    pub(crate) fn complete(&mut self, outcome: Outcome) {
        if let Some(ticket) = self.ticket.take() {
            self.upstream.complete(ticket, outcome);
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        self.complete(Outcome::Cancelled);
    }
}
