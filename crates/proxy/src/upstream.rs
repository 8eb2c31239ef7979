//! One upstream: its [`balance::Pool`], shared by every worker thread, and how one attempt
//! reaches a backend (each worker keeps its own connections, see [`crate::connections`]).
//!
//! The pool sits behind a mutex that is held only for a pick or a completion (a few hundred
//! nanoseconds, never across an await), so the algorithm sees one global sequence: weighted round
//! robin gives `a a b a c a a` however many threads serve.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use balance::weights::LoadReport;
use balance::{BackendId, Nanos, Outcome, Pool, Ticket};
use tokio::time::Instant;

use crate::connections::Connections;
use crate::settings::{HashKey, UpstreamSettings};

/// What an operator asked of a backend (the admin API's `state`; `down = true` in the
/// configuration starts a backend `Disabled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminState {
    /// In rotation (when healthy).
    Up,
    /// No new requests; those in flight finish. Health checks go on.
    Drain,
    /// No new requests; those in flight finish; its idle connections are closed.
    Disabled,
}

impl AdminState {
    pub fn name(self) -> &'static str {
        match self {
            AdminState::Up => "up",
            AdminState::Drain => "drain",
            AdminState::Disabled => "disabled",
        }
    }
}

impl std::str::FromStr for AdminState {
    type Err = String;

    fn from_str(s: &str) -> Result<AdminState, String> {
        match s {
            "up" => Ok(AdminState::Up),
            "drain" => Ok(AdminState::Drain),
            "disabled" => Ok(AdminState::Disabled),
            _ => Err(format!(
                "{s:?}: a state is \"up\", \"drain\" or \"disabled\""
            )),
        }
    }
}

/// Why an operator's change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    #[error("upstream \"{upstream}\" has no backend {addr}")]
    NoSuchBackend { upstream: String, addr: SocketAddr },
    #[error(
        "upstream \"{upstream}\" sets its weights from load reports ({algorithm}): a weight set by hand would be replaced within a poll interval; set its state instead, or change the algorithm"
    )]
    WeightsFromReports {
        upstream: String,
        algorithm: &'static str,
    },
    #[error("a weight is from 1 to {max}, not {weight}")]
    WeightOutOfRange { weight: u64, max: u32 },
}

/// The most a weight can be set to (as in the configuration).
pub const MAX_WEIGHT: u32 = 1_000_000;

/// A backend's state, for the demo, logs and the admin API.
#[derive(Debug, Clone)]
pub struct BackendSnapshot {
    pub addr: SocketAddr,
    pub backup: bool,
    /// The weight configured (or last set by hand).
    pub static_weight: u32,
    /// The weight the algorithm balances by now (a weight model's or slow start's).
    pub weight: u32,
    pub state: AdminState,
    pub in_flight: u32,
    pub requests: u64,
    pub failures: u64,
    /// Whether it may be chosen now.
    pub available: bool,
    /// Whether active health checks have taken it out.
    pub check_failed: bool,
    /// Whether passive health (`max_fails` within `fail_timeout`) has taken it out.
    pub passive_failed: bool,
    /// Failures counted towards `max_fails`.
    pub fails: u32,
    pub max_fails: u32,
    /// The response-time moving average.
    pub latency: Option<Duration>,
    /// Slow start's progress, 0 to 1 (1 when not ramping).
    pub ramp: f64,
    /// The latest load report and how long ago it came.
    pub report: Option<(LoadReport, Duration)>,
    /// Connections open to the backend, over every worker (busy or idle).
    pub connections_open: usize,
    /// Of those, the idle ones kept for reuse.
    pub connections_idle: usize,
}

#[derive(Debug)]
pub struct Upstream {
    settings: UpstreamSettings,
    /// The name, shared with the workers' counts.
    shared_name: Arc<str>,
    pool: Mutex<Pool>,
    /// Each backend's [`AdminState`] and the weight it was configured or set with, by pool
    /// id; changed only with the pool's lock held.
    admin: Mutex<Vec<(AdminState, u32)>>,
    /// Each backend's latest load report and when it came, by pool id (the control plane's
    /// feedback loop notes them).
    reports: Mutex<Vec<Option<(LoadReport, Instant)>>>,
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
        let admin = primary
            .iter()
            .chain(&backup)
            .map(|b| {
                let state = if b.down {
                    AdminState::Disabled
                } else {
                    AdminState::Up
                };
                (state, b.weight)
            })
            .collect();
        Upstream {
            shared_name: Arc::from(settings.name.as_str()),
            pool: Mutex::new(pool),
            admin: Mutex::new(admin),
            reports: Mutex::new(vec![None; settings.backends.len()]),
            addrs,
            epoch: Instant::now(),
            worker_pools: Mutex::new(Vec::new()),
            settings,
        }
    }

    pub fn name(&self) -> &str {
        &self.settings.name
    }

    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.shared_name
    }

    /// The pool id of the backend at `addr`.
    fn id_of(&self, addr: SocketAddr) -> Result<BackendId, ChangeError> {
        self.addrs
            .iter()
            .position(|&a| a == addr)
            .map(|i| BackendId(i as u32))
            .ok_or_else(|| ChangeError::NoSuchBackend {
                upstream: self.settings.name.clone(),
                addr,
            })
    }

    /// Puts the backend at `addr` up, draining or disabled (the admin API). Returns the state
    /// it had. Taking it out of rotation never touches requests in flight: they finish.
    pub fn set_state(
        &self,
        addr: SocketAddr,
        state: AdminState,
    ) -> Result<AdminState, ChangeError> {
        let id = self.id_of(addr)?;
        let now = self.now();
        let was = {
            let mut pool = self.pool();
            let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
            let was = std::mem::replace(&mut admin[id.index()].0, state);
            pool.set_down(id, state != AdminState::Up, now);
            was
        };
        if state == AdminState::Disabled {
            for pools in self
                .worker_pools
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
            {
                pools[id.index()].close_idle();
            }
        }
        if was != state {
            tracing::info!(upstream = %self.settings.name, backend = %addr, from = was.name(), to = state.name(), "backend state changed by the admin API");
        }
        Ok(was)
    }

    /// Notes the load report backend `id` (pool order) just gave, for the admin API.
    pub fn note_report(&self, id: BackendId, report: LoadReport) {
        let mut reports = self.reports.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = reports.get_mut(id.index()) {
            *slot = Some((report, Instant::now()));
        }
    }

    /// Whether the upstream's weights follow its backends' load reports: a weight model fed
    /// by at least one primary's load source (the control plane's feedback loop).
    pub fn has_weight_model(&self) -> bool {
        let primaries: Vec<&crate::BackendSettings> = self
            .settings
            .backends
            .iter()
            .filter(|b| !b.backup)
            .collect();
        let configured: Vec<u32> = primaries.iter().map(|b| b.weight).collect();
        balance::weights::model::Model::for_algorithm(
            self.settings.algorithm,
            &configured,
            &self.settings.options,
        )
        .is_some()
            && primaries.iter().any(|b| b.load_source.is_some())
    }

    /// Whether something other than the operator sets the weights: a weight model, or a
    /// backend's HAProxy agent-check (which sets a share of the configured weight).
    pub fn weights_from_reports(&self) -> bool {
        self.has_weight_model()
            || self
                .settings
                .backends
                .iter()
                .any(|b| matches!(b.load_source, Some(crate::LoadSource::AgentCheck(_))))
    }

    /// Sets the weight of the backend at `addr` (the admin API): what the algorithm balances
    /// by from now on. Refused for upstreams whose weights come from load reports.
    pub fn set_static_weight(&self, addr: SocketAddr, weight: u64) -> Result<u32, ChangeError> {
        let id = self.id_of(addr)?;
        if self.weights_from_reports() {
            return Err(ChangeError::WeightsFromReports {
                upstream: self.settings.name.clone(),
                algorithm: self.settings.algorithm.name(),
            });
        }
        let weight = u32::try_from(weight)
            .ok()
            .filter(|w| (1..=MAX_WEIGHT).contains(w))
            .ok_or(ChangeError::WeightOutOfRange {
                weight,
                max: MAX_WEIGHT,
            })?;
        let now = self.now();
        let was = {
            let mut pool = self.pool();
            let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
            pool.set_weight(id, weight, now);
            std::mem::replace(&mut admin[id.index()].1, weight)
        };
        if was != weight {
            tracing::info!(upstream = %self.settings.name, backend = %addr, from = was, to = weight, "backend weight changed by the admin API");
        }
        Ok(was)
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
        let admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let reports = self.reports.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.now();
        pool.states()
            .iter()
            .zip(connections)
            .zip(admin.iter())
            .enumerate()
            .map(
                |(i, ((s, (open, idle)), &(state, static_weight)))| BackendSnapshot {
                    addr: self.addrs[i],
                    backup: i >= pool.primaries(),
                    static_weight,
                    weight: s.weight(),
                    state,
                    in_flight: s.in_flight(),
                    requests: s.requests(),
                    failures: s.failures(),
                    available: s.is_eligible(now),
                    check_failed: s.is_check_failed(),
                    passive_failed: s.is_failed(now),
                    fails: s.fails(),
                    max_fails: s.spec().max_fails,
                    latency: s.latency().map(Duration::from),
                    ramp: f64::from(s.ramp()) / f64::from(balance::RAMP_FULL),
                    report: reports
                        .get(i)
                        .copied()
                        .flatten()
                        .map(|(r, at)| (r, at.elapsed())),
                    connections_open: open,
                    connections_idle: idle,
                },
            )
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
