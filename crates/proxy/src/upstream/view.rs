//! What the admin API and the control plane read of an upstream (every backend's state,
//! the counts a weight model needs) and the operator's changes to one backend (its state, its
//! weight).

use std::net::SocketAddr;
use std::time::Duration;

use balance::BackendId;
use balance::weights::LoadReport;
use tokio::time::Instant;

use super::Upstream;
use super::state::{AdminState, lock};
use crate::settings::UpstreamSettings;

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
    /// The upstream's ring would outgrow [`UpstreamSettings::MAX_RING_WEIGHT`]: the message
    /// of [`UpstreamSettings::check_ring_weight`].
    #[error("{0}")]
    RingTooHeavy(String),
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
    /// Its `max_conns` (0: no limit).
    pub max_conns: u32,
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
    /// Its load source's failed polls, and whether its report is stale now.
    pub polls: super::LoadPolls,
    /// Connections open to the backend, over every worker (busy or idle).
    pub connections_open: usize,
    /// Of those, the idle ones kept for reuse.
    pub connections_idle: usize,
    /// `prequal`'s probes of it so far.
    pub probes: super::ProbeCounts,
    /// The DNS name it was found by (`[upstream.discovery]`, or a backend written with a host
    /// name); `None`: written in the configuration or added through the admin API.
    pub source: Option<String>,
}

/// Whether `settings` have a weight model (their algorithm reads load reports) fed by at
/// least one primary's load reports (an agent-check sets weights, it feeds no model).
fn weight_model_fed(settings: &UpstreamSettings) -> bool {
    settings.algorithm.reads_load_reports()
        && settings.backends.iter().any(|b| {
            !b.backup
                && b.load_source
                    .is_some_and(crate::LoadSource::gives_load_reports)
        })
}

/// Whether load reports set the weights of `settings`' pool: a weight model, or a HAProxy
/// agent-check on a backend.
pub(super) fn reports_set_weights(settings: &UpstreamSettings) -> bool {
    weight_model_fed(settings)
        || settings
            .backends
            .iter()
            .any(|b| matches!(b.load_source, Some(crate::LoadSource::AgentCheck(_))))
}

impl Upstream {
    /// Puts the backend at `addr` up, draining or disabled (the admin API). Returns the state
    /// it had. Taking it out of rotation never touches requests in flight: they finish.
    pub fn set_state(
        &self,
        addr: SocketAddr,
        state: AdminState,
    ) -> Result<AdminState, ChangeError> {
        let was = self.change_member(addr, |pool, id, member, now| {
            pool.set_down(id, state != AdminState::Up, now);
            std::mem::replace(&mut member.state, state)
        })?;
        if state == AdminState::Disabled {
            for pools in lock(&self.worker_pools).iter() {
                if let Some(c) = pools.get(addr) {
                    c.close_idle();
                }
            }
        }
        self.serve_waiting();
        if was != state {
            tracing::info!(upstream = %self.name(), backend = %addr, from = was.name(), to = state.name(), "backend state changed by the admin API");
        }
        Ok(was)
    }

    /// Notes the load report backend `id` (pool order in `generation`) just gave, for the
    /// admin API.
    pub fn note_report(&self, generation: u64, id: BackendId, report: LoadReport) {
        let mut st = lock(&self.state);
        if st.generation != generation {
            return;
        }
        if let Some(m) = st.members.get_mut(id.index()) {
            m.report = Some((report, Instant::now()));
        }
    }

    /// Notes a poll of backend `id`'s load source (pool order of `generation`): whether it
    /// failed, and the report's staleness when it changed (`None`: as it was).
    pub fn note_poll(&self, generation: u64, id: BackendId, failed: bool, stale: Option<bool>) {
        let mut st = lock(&self.state);
        if st.generation != generation {
            return;
        }
        if let Some(m) = st.members.get_mut(id.index()) {
            m.polls.failed += u64::from(failed);
            if let Some(stale) = stale {
                m.polls.stale = stale;
            }
        }
    }

    /// Whether the upstream's weights follow its backends' load reports: a weight model fed
    /// by at least one primary's load reports (the control plane's feedback loop).
    pub fn has_weight_model(&self) -> bool {
        weight_model_fed(&self.settings())
    }

    /// Whether something other than the operator sets the weights: a weight model, or a
    /// backend's HAProxy agent-check (which sets a share of the configured weight).
    pub fn weights_from_reports(&self) -> bool {
        reports_set_weights(&self.settings())
    }

    /// Sets the weight of the backend at `addr` (the admin API): what the algorithm balances
    /// by from now on. Refused for upstreams whose weights come from load reports.
    pub fn set_static_weight(&self, addr: SocketAddr, weight: u64) -> Result<u32, ChangeError> {
        if self.weights_from_reports() {
            return Err(ChangeError::WeightsFromReports {
                upstream: self.name().to_owned(),
                algorithm: self.settings().algorithm.name(),
            });
        }
        let weight = u32::try_from(weight)
            .ok()
            .filter(|w| (1..=MAX_WEIGHT).contains(w))
            .ok_or(ChangeError::WeightOutOfRange {
                weight,
                max: MAX_WEIGHT,
            })?;
        if lock(&self.state).position(addr).is_none() {
            return Err(self.no_such_backend(addr));
        }
        self.fits_ring(addr, weight)?;
        let was = self.change_member(addr, |pool, id, member, now| {
            pool.set_weight(id, weight, now);
            std::mem::replace(&mut member.static_weight, weight)
        })?;
        if was != weight {
            tracing::info!(upstream = %self.name(), backend = %addr, from = was, to = weight, "backend weight changed by the admin API");
        }
        Ok(was)
    }

    /// Whether this upstream's ring (if it has one) takes backend `addr` at `weight` (a
    /// backend not there yet joining with it) beside the others' weights in force: a weight
    /// past [`UpstreamSettings::MAX_RING_WEIGHT`] in all would stall the ring's rebuild for
    /// seconds and every request waiting on it.
    pub fn fits_ring(&self, addr: SocketAddr, weight: u32) -> Result<(), ChangeError> {
        let settings = self.settings();
        if settings.ring().is_none() {
            return Ok(());
        }
        let others: u64 = lock(&self.state)
            .members
            .iter()
            .filter(|m| m.addr != addr)
            .map(|m| u64::from(m.static_weight))
            .sum();
        settings
            .check_ring_weight(others + u64::from(weight))
            .map_err(ChangeError::RingTooHeavy)
    }

    /// The settings in force with what the operator set at runtime written in (weights; a
    /// backend drained or disabled is `down`): the base of a change through the admin API.
    pub fn runtime_settings(&self) -> UpstreamSettings {
        let mut settings = (*self.settings()).clone();
        let st = lock(&self.state);
        for b in &mut settings.backends {
            if let Some(m) = st.members.iter().find(|m| m.addr == b.addr) {
                b.weight = m.static_weight;
                b.down = m.state != AdminState::Up;
            }
        }
        settings
    }

    /// Replaces the operator's pins (see [`crate::settings::Pin`]): what backends that join
    /// from now on, and those the next reload keeps, take. The backends in the pool now are
    /// left as they are.
    pub fn set_pins(&self, pins: std::collections::HashMap<SocketAddr, crate::settings::Pin>) {
        // Under the lock a reconfiguration holds while it swaps the settings in.
        let _st = lock(&self.state);
        let mut settings = (*self.settings()).clone();
        settings.pins = pins;
        self.settings.store(std::sync::Arc::new(settings));
    }

    /// The weights in force, in pool order.
    pub fn weights(&self) -> Vec<u32> {
        lock(&self.state)
            .pool
            .states()
            .iter()
            .map(|s| s.weight())
            .collect()
    }

    /// Every backend's requests and failures so far, in pool order of `generation` (`None`
    /// when the backends changed since): what a weight model's failure term reads each round,
    /// without the rest of a [`BackendSnapshot`] (connections counted over every worker).
    pub fn counts(&self, generation: u64) -> Option<Vec<(u64, u64)>> {
        let st = lock(&self.state);
        (st.generation == generation).then(|| {
            st.pool
                .states()
                .iter()
                .map(|s| (s.requests(), s.failures()))
                .collect()
        })
    }

    /// The state of every backend, in pool order.
    pub fn snapshot(&self) -> Vec<BackendSnapshot> {
        let addrs: Vec<SocketAddr> = lock(&self.state).members.iter().map(|m| m.addr).collect();
        let connections: Vec<(usize, usize)> =
            addrs.iter().map(|&a| self.connection_counts(a)).collect();
        let settings = self.settings();
        let source = |addr: SocketAddr| {
            settings
                .backends
                .iter()
                .find(|b| b.addr == addr)
                .and_then(|b| b.discovered.as_ref())
                .map(|q| q.name.clone())
        };
        let st = lock(&self.state);
        let now = self.now();
        st.pool
            .states()
            .iter()
            .zip(&st.members)
            .enumerate()
            .map(|(i, (s, m))| {
                let (open, idle) = addrs
                    .iter()
                    .position(|&a| a == m.addr)
                    .map_or((0, 0), |j| connections[j]);
                BackendSnapshot {
                    addr: m.addr,
                    backup: i >= st.pool.primaries(),
                    static_weight: m.static_weight,
                    weight: s.weight(),
                    state: m.state,
                    in_flight: s.in_flight(),
                    max_conns: s.spec().max_conns,
                    requests: s.requests(),
                    failures: s.failures(),
                    available: s.is_eligible(now),
                    check_failed: s.is_check_failed(),
                    passive_failed: s.is_failed(now),
                    fails: s.fails(),
                    max_fails: s.spec().max_fails,
                    latency: s.latency().map(Duration::from),
                    ramp: f64::from(s.ramp()) / f64::from(balance::RAMP_FULL),
                    report: m.report.map(|(r, at)| (r, at.elapsed())),
                    polls: m.polls,
                    connections_open: open,
                    connections_idle: idle,
                    probes: m.probes,
                    source: source(m.addr),
                }
            })
            .collect()
    }
}
