//! One upstream: its [`balance::Pool`], shared by every worker thread, and how one attempt
//! reaches a backend (each worker keeps its own connections, see [`crate::connections`]).
//!
//! The pool sits behind a mutex that is held only for a pick or a completion (a few hundred
//! nanoseconds, never across an await), so the algorithm sees one global sequence: weighted round
//! robin gives `a a b a c a a` however many threads serve.
//!
//! The backends, the algorithm and the settings can change while requests are in flight (a
//! reload, the admin API): [`Upstream::reconfigure`] builds a new pool that takes over the old
//! one's live state for the backends that stay, and swaps it in under the same lock. Each
//! attempt remembers the generation of the pool it was picked from and its backend's address,
//! so its ticket completes in the pool in force where that backend still is.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arc_swap::ArcSwap;
use balance::queue::{self, Admission, Waiter as _};
use balance::weights::LoadReport;
use balance::{BackendId, Nanos, Outcome, Pool, Ticket};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};
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
    /// Connections open to the backend, over every worker (busy or idle).
    pub connections_open: usize,
    /// Of those, the idle ones kept for reuse.
    pub connections_idle: usize,
}

/// One backend of the pool in force, in pool order.
#[derive(Debug, Clone)]
struct Member {
    addr: SocketAddr,
    state: AdminState,
    /// The weight configured, or set through the admin API.
    static_weight: u32,
    /// The latest load report and when it came.
    report: Option<(LoadReport, Instant)>,
    /// The generation since which it has been a member without a break: tickets of older
    /// generations are not its pool's to complete.
    since: u64,
}

/// The pool in force and what goes with it, replaced whole when the backends or the algorithm
/// change (a reload, the admin API).
#[derive(Debug)]
struct State {
    generation: u64,
    pool: Pool,
    members: Vec<Member>,
    /// Requests waiting for a backend below its `max_conns`, oldest first (survives a change
    /// of generation: they wait for the upstream, not for one pool).
    waiting: VecDeque<Waiter>,
}

/// A request in the queue: what its pick needs, and where to hand the backend to.
#[derive(Debug)]
struct Waiter {
    affinity: Option<Vec<u8>>,
    tried: Vec<SocketAddr>,
    to: oneshot::Sender<Handed>,
}

/// What a waiting request is handed: a ticket picked for it under the pool lock, or why
/// there will be none.
type Handed = Result<(u64, SocketAddr, Ticket), Unpicked>;

impl queue::Waiter for Waiter {
    fn left(&self) -> bool {
        self.to.is_closed()
    }

    fn affinity(&self) -> Option<&[u8]> {
        self.affinity.as_deref()
    }
}

impl State {
    fn position(&self, addr: SocketAddr) -> Option<BackendId> {
        position(&self.members, addr)
    }
}

fn position(members: &[Member], addr: SocketAddr) -> Option<BackendId> {
    members
        .iter()
        .position(|m| m.addr == addr)
        .map(|i| BackendId(i as u32))
}

/// The pool ids of the backends a request `tried` that are still members.
fn excluded(members: &[Member], tried: &[SocketAddr]) -> Vec<BackendId> {
    tried.iter().filter_map(|&a| position(members, a)).collect()
}

/// What [`Upstream::reconfigure`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconfigured {
    pub added: Vec<SocketAddr>,
    pub removed: Vec<SocketAddr>,
    pub kept: usize,
}

/// Where a reconfiguration's backend states and weights come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// From the new settings (a reload applies the file: `down` and `weight`).
    Settings,
    /// From the running upstream, for backends that stay (a change through the admin API
    /// keeps what the operator set on the others).
    Runtime,
}

#[derive(Debug)]
pub struct Upstream {
    /// The settings in force; replaced with the pool (readers get the one of their moment).
    settings: ArcSwap<UpstreamSettings>,
    /// The name, shared with the workers' counts (an upstream keeps its name for life).
    shared_name: Arc<str>,
    state: Mutex<State>,
    /// Time zero of the `Nanos` handed to the pool.
    epoch: Instant,
    /// Every worker's connections to the backends, for counting and for membership changes.
    worker_pools: Mutex<Vec<Arc<WorkerPools>>>,
    /// The generation in force, and whether the upstream has been retired (a reload removed
    /// it): the control plane restarts its loops on a change and stops them on retirement.
    changes: watch::Sender<(u64, bool)>,
    /// How many requests wait in `State::waiting`, read without the lock (a completion looks
    /// whether anyone waits before it takes the lock again).
    queued: AtomicUsize,
}

/// Why a request got no backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unpicked {
    /// None is healthy and in rotation (or every one was tried already).
    NoBackend,
    /// Every backend left is at its `max_conns` and the queue is full (or off).
    QueueFull,
    /// It waited `queue_timeout` in the queue.
    QueueTimeout,
    /// The client left while its request waited.
    ClientGone,
}

impl Unpicked {
    /// The reason in logs and metrics.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Unpicked::NoBackend => "no_backend",
            Unpicked::QueueFull => "queue_full",
            Unpicked::QueueTimeout => "queue_timeout",
            Unpicked::ClientGone => "client_gone",
        }
    }
}

/// One worker's connections to one upstream's backends, by address: replaced as a whole when
/// the backends change, so the worker reads them without a lock of the upstream's.
#[derive(Debug)]
pub(crate) struct WorkerPools {
    by_addr: ArcSwap<HashMap<SocketAddr, Arc<Connections>>>,
}

impl WorkerPools {
    /// This worker's connections to `addr`, if it is a backend of the upstream.
    pub(crate) fn get(&self, addr: SocketAddr) -> Option<Arc<Connections>> {
        self.by_addr.load().get(&addr).cloned()
    }

    /// Every backend's connections, for the reaper.
    pub(crate) fn all(&self) -> Vec<Arc<Connections>> {
        self.by_addr.load().values().cloned().collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks cannot leave the state half-updated in a way
    // that matters more than stopping the proxy would, so carry on with the data.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The backends of `settings` in pool order (primaries, then backups).
fn pool_order(settings: &UpstreamSettings) -> Vec<&crate::BackendSettings> {
    let (backup, primary): (Vec<_>, Vec<_>) = settings.backends.iter().partition(|b| b.backup);
    primary.into_iter().chain(backup).collect()
}

fn build_pool(settings: &UpstreamSettings) -> Pool {
    let spec = |b: &&crate::BackendSettings| b.spec();
    let primary: Vec<_> = settings.backends.iter().filter(|b| !b.backup).collect();
    let backup: Vec<_> = settings.backends.iter().filter(|b| b.backup).collect();
    Pool::new(
        settings.algorithm,
        &settings.options,
        &primary.iter().map(spec).collect::<Vec<_>>(),
        &backup.iter().map(spec).collect::<Vec<_>>(),
        settings.seed,
    )
}

/// Whether `settings` have a weight model fed by at least one primary's load source.
fn weight_model_fed(settings: &UpstreamSettings) -> bool {
    let primaries: Vec<&crate::BackendSettings> =
        settings.backends.iter().filter(|b| !b.backup).collect();
    let configured: Vec<u32> = primaries.iter().map(|b| b.weight).collect();
    balance::weights::model::Model::for_algorithm(
        settings.algorithm,
        &configured,
        &settings.options,
    )
    .is_some()
        && primaries.iter().any(|b| b.load_source.is_some())
}

/// Whether load reports set the weights of `settings`' pool: a weight model, or a HAProxy
/// agent-check on a backend.
fn reports_set_weights(settings: &UpstreamSettings) -> bool {
    weight_model_fed(settings)
        || settings
            .backends
            .iter()
            .any(|b| matches!(b.load_source, Some(crate::LoadSource::AgentCheck(_))))
}

/// The part of a request head `settings`' algorithm hashes (a header, a cookie, the URI), if
/// any: what the request parser must locate.
pub(crate) fn hashed_request_part(settings: &UpstreamSettings) -> Option<&HashKey> {
    let hashed = settings.algorithm.affinity() == Some(balance::Affinity::Key);
    (hashed && settings.hash_key != HashKey::ClientIp).then_some(&settings.hash_key)
}

fn configured_state(b: &crate::BackendSettings) -> AdminState {
    if b.down {
        AdminState::Disabled
    } else {
        AdminState::Up
    }
}

impl Upstream {
    pub fn new(settings: UpstreamSettings) -> Upstream {
        let pool = build_pool(&settings);
        let members = pool_order(&settings)
            .into_iter()
            .map(|b| Member {
                addr: b.addr,
                state: configured_state(b),
                static_weight: b.weight,
                report: None,
                since: 0,
            })
            .collect();
        Upstream {
            shared_name: Arc::from(settings.name.as_str()),
            settings: ArcSwap::from_pointee(settings),
            state: Mutex::new(State {
                generation: 0,
                pool,
                members,
                waiting: VecDeque::new(),
            }),
            epoch: Instant::now(),
            worker_pools: Mutex::new(Vec::new()),
            changes: watch::channel((0, false)).0,
            queued: AtomicUsize::new(0),
        }
    }

    pub fn name(&self) -> &str {
        &self.shared_name
    }

    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.shared_name
    }

    /// What the upstream runs with now.
    pub fn settings(&self) -> Arc<UpstreamSettings> {
        self.settings.load_full()
    }

    /// The generation in force: it changes whenever the backends or the algorithm do.
    pub fn generation(&self) -> u64 {
        lock(&self.state).generation
    }

    /// Tells of every change of generation, and of the upstream's retirement (`true`).
    pub fn changes(&self) -> watch::Receiver<(u64, bool)> {
        self.changes.subscribe()
    }

    /// The upstream left the configuration: its control loops stop. Requests in flight (and
    /// client connections still bound to it) finish with it.
    pub fn retire(&self) {
        self.changes.send_modify(|c| c.1 = true);
    }

    fn now(&self) -> Nanos {
        Nanos::from(self.epoch.elapsed())
    }

    /// Runs `change` on the pool and the member at `addr`, under the lock picks take.
    fn change_member<T>(
        &self,
        addr: SocketAddr,
        change: impl FnOnce(&mut Pool, BackendId, &mut Member, Nanos) -> T,
    ) -> Result<T, ChangeError> {
        let now = self.now();
        let mut st = lock(&self.state);
        let id = st
            .position(addr)
            .ok_or_else(|| self.no_such_backend(addr))?;
        let State { pool, members, .. } = &mut *st;
        Ok(change(pool, id, &mut members[id.index()], now))
    }

    fn no_such_backend(&self, addr: SocketAddr) -> ChangeError {
        ChangeError::NoSuchBackend {
            upstream: self.name().to_owned(),
            addr,
        }
    }

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

    /// Whether the upstream's weights follow its backends' load reports: a weight model fed
    /// by at least one primary's load source (the control plane's feedback loop).
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
        let was = self.change_member(addr, |pool, id, member, now| {
            pool.set_weight(id, weight, now);
            std::mem::replace(&mut member.static_weight, weight)
        })?;
        if was != weight {
            tracing::info!(upstream = %self.name(), backend = %addr, from = was, to = weight, "backend weight changed by the admin API");
        }
        Ok(was)
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

    /// Replaces the backends, the algorithm and the rest of the settings, without dropping a
    /// request: a new pool is built and takes over, from the old one, the live state of the
    /// backends that stay (same address: requests in flight, health, averages, counts, a weight
    /// model's weights — see [`Pool::carry_over`]); requests in flight on a backend that goes
    /// finish there. `keep` says where the states and weights of staying backends come from.
    /// The name must stay the same (an upstream of another name is another upstream).
    pub fn reconfigure(&self, settings: UpstreamSettings, keep: Keep) -> Reconfigured {
        debug_assert_eq!(settings.name, self.name());
        let now = self.now();
        let mut pool = build_pool(&settings);
        let order: Vec<crate::BackendSettings> =
            pool_order(&settings).into_iter().cloned().collect();
        // Every worker gets connections for the new backends before any pick can choose them.
        let workers: Vec<Arc<WorkerPools>> = lock(&self.worker_pools).clone();
        for w in &workers {
            let mut map = (**w.by_addr.load()).clone();
            for b in &order {
                map.entry(b.addr).or_insert_with(|| {
                    Arc::new(Connections::new(
                        b.addr,
                        settings.keepalive,
                        settings.keepalive_timeout,
                    ))
                });
            }
            w.by_addr.store(Arc::new(map));
        }
        let weights_from_reports = reports_set_weights(&settings);
        let done = {
            let mut st = lock(&self.state);
            let generation = st.generation + 1;
            let same: Vec<Option<BackendId>> = order.iter().map(|b| st.position(b.addr)).collect();
            pool.carry_over(&st.pool, &same, now);
            let mut members = Vec::with_capacity(order.len());
            let mut done = Reconfigured::default();
            for (i, (b, old)) in order.iter().zip(&same).enumerate() {
                let id = BackendId(i as u32);
                let old = old.map(|o| st.members[o.index()].clone());
                let member = match (old, keep) {
                    (Some(m), Keep::Runtime) => m,
                    (Some(m), Keep::Settings) => Member {
                        state: configured_state(b),
                        static_weight: b.weight,
                        ..m
                    },
                    (None, _) => {
                        done.added.push(b.addr);
                        // A backend that joins a running upstream ramps up, if it has a
                        // slow start (Envoy's rule for new hosts).
                        pool.begin_slow_start(id, now);
                        Member {
                            addr: b.addr,
                            state: configured_state(b),
                            static_weight: b.weight,
                            report: None,
                            since: generation,
                        }
                    }
                };
                if member.state != AdminState::Up {
                    pool.set_down(id, true, now);
                }
                members.push(member);
            }
            // The weight in force: a weight model's carries over; otherwise the static one
            // (the file's on a reload, the operator's on a change through the API).
            if !weights_from_reports {
                let statics: Vec<u32> = members.iter().map(|m| m.static_weight).collect();
                pool.set_weights(&statics, now);
            }
            done.removed = st
                .members
                .iter()
                .filter(|m| !order.iter().any(|b| b.addr == m.addr))
                .map(|m| m.addr)
                .collect();
            done.kept = order.len() - done.added.len();
            // The settings and the pool change together, under the lock picks take.
            self.settings.store(Arc::new(settings));
            let waiting = std::mem::take(&mut st.waiting);
            *st = State {
                generation,
                pool,
                members,
                waiting,
            };
            done
        };
        // The workers' connections to backends that left: the idle ones close with the map;
        // those in use finish their request first (the attempt holds its own reference).
        for w in &workers {
            let mut map = (**w.by_addr.load()).clone();
            map.retain(|addr, _| !done.removed.contains(addr));
            w.by_addr.store(Arc::new(map));
        }
        self.changes.send_modify(|c| c.0 = self.generation());
        self.serve_waiting();
        tracing::info!(
            upstream = %self.name(),
            added = ?done.added,
            removed = ?done.removed,
            kept = done.kept,
            "upstream reconfigured"
        );
        done
    }

    /// The backends in pool order (primaries, then backups) in `generation`: entry `i` is the
    /// backend of `BackendId(i)`.
    pub fn backends_in_pool_order(&self) -> (u64, Vec<crate::BackendSettings>) {
        let st = lock(&self.state);
        let settings = self.settings();
        let order = pool_order(&settings).into_iter().cloned().collect();
        (st.generation, order)
    }

    /// Applies the weights of every backend at once, in pool order of `generation` (a weight
    /// model's result): one rebuild under the pool lock, so no pick ever sees half of them.
    /// Ignored if the backends changed since.
    pub fn set_weights(&self, generation: u64, weights: &[u32]) {
        let now = self.now();
        let mut st = lock(&self.state);
        if st.generation == generation {
            st.pool.set_weights(weights, now);
        }
    }

    /// Records an active health check's verdict on backend `id` (pool order of `generation`);
    /// returns whether it changed the backend's state (never, if the backends changed since).
    pub fn set_check_result(&self, generation: u64, id: BackendId, healthy: bool) -> bool {
        let now = self.now();
        let changed = {
            let mut st = lock(&self.state);
            st.generation == generation && st.pool.set_check_result(id, healthy, now)
        };
        if changed {
            self.serve_waiting();
        }
        changed
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

    /// A new worker's own connections to the backends.
    pub(crate) fn worker_connections(&self) -> Arc<WorkerPools> {
        let settings = self.settings();
        let mut workers = lock(&self.worker_pools);
        let st = lock(&self.state);
        let map = st
            .members
            .iter()
            .map(|m| {
                let c = Connections::new(m.addr, settings.keepalive, settings.keepalive_timeout);
                (m.addr, Arc::new(c))
            })
            .collect();
        let pools = Arc::new(WorkerPools {
            by_addr: ArcSwap::from_pointee(map),
        });
        workers.push(Arc::clone(&pools));
        pools
    }

    /// Connections open to `addr` (busy or idle) and idle, summed over the workers.
    fn connection_counts(&self, addr: SocketAddr) -> (usize, usize) {
        let mut count = (0, 0);
        for pools in lock(&self.worker_pools).iter() {
            if let Some(c) = pools.get(addr) {
                let (open, idle) = c.counts();
                count.0 += open;
                count.1 += idle;
            }
        }
        count
    }

    /// A backend for a request, other than those it `tried`. When every backend left is at
    /// its `max_conns`, the request waits in the upstream's queue (if `settings.queue` has
    /// room) up to `settings.queue_timeout`, or until `client` leaves (when `watch_client`):
    /// a backend that frees up is handed, under the pool lock, to the oldest waiting request
    /// that may use it (HAProxy's pending-connection queue), so no newcomer takes it first and
    /// no wake-up is lost.
    pub(crate) async fn pick(
        self: &Arc<Self>,
        settings: &UpstreamSettings,
        affinity: Option<&[u8]>,
        tried: &[SocketAddr],
        client: Option<&TcpStream>,
        watch_client: bool,
    ) -> Result<Attempt, Unpicked> {
        let handed = {
            let now = self.now();
            let mut st = lock(&self.state);
            let exclude = excluded(&st.members, tried);
            st.waiting.retain(|w| !w.left());
            let waiting = st.waiting.len();
            match queue::admit(
                &mut st.pool,
                affinity,
                &exclude,
                now,
                waiting,
                settings.queue,
            ) {
                Admission::Picked(ticket) => {
                    let addr = st.members[ticket.backend().index()].addr;
                    return Ok(self.attempt(st.generation, addr, ticket));
                }
                Admission::NoBackend => return Err(Unpicked::NoBackend),
                Admission::QueueFull => {
                    self.queued.store(waiting, Ordering::Release);
                    return Err(Unpicked::QueueFull);
                }
                Admission::Wait => {}
            }
            let (to, handed) = oneshot::channel();
            st.waiting.push_back(Waiter {
                affinity: affinity.map(<[u8]>::to_vec),
                tried: tried.to_vec(),
                to,
            });
            self.queued.store(st.waiting.len(), Ordering::Release);
            handed
        };
        // The wait's state lives on the heap: it would otherwise make every connection's
        // task larger for a path most requests never take.
        Box::pin(self.wait_in_queue(handed, settings.queue_timeout, client, watch_client)).await
    }

    /// Waits in the queue for a backend to be handed over (see [`Upstream::pick`]).
    async fn wait_in_queue(
        self: &Arc<Self>,
        handed: oneshot::Receiver<Handed>,
        queue_timeout: Duration,
        client: Option<&TcpStream>,
        watch_client: bool,
    ) -> Result<Attempt, Unpicked> {
        let mut wait = Wait {
            handed: Some(handed),
            upstream: self,
        };
        let deadline = crate::io::after(queue_timeout);
        let gone = crate::io::watch(client, watch_client);
        tokio::pin!(gone);
        let outcome = loop {
            let Some(handed) = wait.handed.as_mut() else {
                break Err(Unpicked::NoBackend);
            };
            tokio::select! {
                biased;
                handed = handed => break handed.unwrap_or(Err(Unpicked::NoBackend)),
                () = &mut gone => break Err(Unpicked::ClientGone),
                () = tokio::time::sleep_until(deadline) => break Err(Unpicked::QueueTimeout),
                // A backend may come back without an event (its `fail_timeout` passes): look
                // again now and then.
                () = tokio::time::sleep(RECHECK) => self.serve_waiting(),
            }
        };
        // A backend handed over just as the wait ended is used, not lost.
        let outcome = match (outcome, wait.take()) {
            (_, Some(Ok(parts))) | (Ok(parts), _) => Ok(parts),
            (Err(why), _) => Err(why),
        };
        outcome.map(|(generation, addr, ticket)| self.attempt(generation, addr, ticket))
    }

    fn attempt(self: &Arc<Self>, generation: u64, addr: SocketAddr, ticket: Ticket) -> Attempt {
        Attempt {
            addr,
            generation,
            upstream: Arc::clone(self),
            ticket: Some(ticket),
        }
    }

    /// Requests waiting in the queue now.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Hands backends with room to the waiting requests, oldest first; tells those that no
    /// backend is left for that there will be none. Called when room may have come (a
    /// completion, a change of state, weights or membership) and now and then by the waiters.
    fn serve_waiting(&self) {
        if self.queued.load(Ordering::Acquire) == 0 {
            return;
        }
        let now = self.now();
        let handed = {
            let mut st = lock(&self.state);
            let State {
                pool,
                members,
                generation,
                waiting,
            } = &mut *st;
            let handed = queue::serve(pool, waiting, now, |w, out| {
                out.extend(w.tried.iter().filter_map(|&a| position(members, a)));
            });
            self.queued.store(waiting.len(), Ordering::Release);
            let generation = *generation;
            handed
                .into_iter()
                .map(|(w, h)| {
                    let result = match h {
                        queue::Handed::Ticket(ticket) => {
                            Ok((generation, members[ticket.backend().index()].addr, ticket))
                        }
                        queue::Handed::NoBackend => Err(Unpicked::NoBackend),
                    };
                    (w.to, result)
                })
                .collect::<Vec<_>>()
        };
        for (to, result) in handed {
            // A waiter that left in between: its ticket comes back and is cancelled.
            if let Err(Ok((generation, addr, ticket))) = to.send(result) {
                self.complete(generation, addr, ticket, Outcome::Cancelled);
            }
        }
    }

    fn complete(&self, generation: u64, addr: SocketAddr, ticket: Ticket, outcome: Outcome) {
        self.complete_measured(generation, addr, ticket, outcome, None);
    }

    /// Completes `ticket`; `latency`: what to record instead of the time since the pick.
    fn complete_measured(
        &self,
        generation: u64,
        addr: SocketAddr,
        ticket: Ticket,
        outcome: Outcome,
        latency: Option<Duration>,
    ) {
        let now = self.now();
        let disabled = {
            let mut st = lock(&self.state);
            // A ticket of an older pool completes in this one where its backend still is (its
            // request was carried over); if its backend left since, with the pool it came from.
            let ticket = if generation == st.generation {
                Some(ticket)
            } else {
                st.position(addr)
                    .filter(|id| st.members[id.index()].since <= generation)
                    .map(|id| ticket.moved_to(id))
            };
            ticket.and_then(|ticket| {
                let id = ticket.backend();
                match latency {
                    Some(latency) => {
                        st.pool
                            .complete_measured(ticket, outcome, latency.into(), now)
                    }
                    None => st.pool.complete(ticket, outcome, now),
                }
                let state = st.pool.state(id);
                (outcome == Outcome::Failure && state.fails() == state.spec().max_fails)
                    .then(|| (state.fails(), state.spec().fail_timeout))
            })
        };
        self.serve_waiting();
        // Logged once the lock is released: a slow log sink must not hold up every worker.
        if let Some((fails, fail_timeout)) = disabled {
            tracing::warn!(
                upstream = %self.name(),
                backend = %addr,
                fails,
                fail_timeout = ?Duration::from(fail_timeout),
                "backend temporarily disabled"
            );
        }
    }

    /// The state of every backend, in pool order.
    pub fn snapshot(&self) -> Vec<BackendSnapshot> {
        let addrs: Vec<SocketAddr> = lock(&self.state).members.iter().map(|m| m.addr).collect();
        let connections: Vec<(usize, usize)> =
            addrs.iter().map(|&a| self.connection_counts(a)).collect();
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
                    connections_open: open,
                    connections_idle: idle,
                }
            })
            .collect()
    }
}

/// One attempt of a request on one backend. Completes its ticket exactly once: explicitly, or
/// as cancelled when dropped (the client went away).
#[derive(Debug)]
pub(crate) struct Attempt {
    pub(crate) addr: SocketAddr,
    generation: u64,
    upstream: Arc<Upstream>,
    ticket: Option<Ticket>,
}

impl Attempt {
    pub(crate) fn complete(&mut self, outcome: Outcome) {
        if let Some(ticket) = self.ticket.take() {
            self.upstream
                .complete(self.generation, self.addr, ticket, outcome);
        }
    }

    /// Completes with `latency` as the backend's time, not the time since the pick (see
    /// [`balance::Pool::complete_measured`]).
    pub(crate) fn complete_measured(&mut self, outcome: Outcome, latency: Duration) {
        if let Some(ticket) = self.ticket.take() {
            self.upstream.complete_measured(
                self.generation,
                self.addr,
                ticket,
                outcome,
                Some(latency),
            );
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        self.complete(Outcome::Cancelled);
    }
}

/// How often a waiting request has the queue looked at again, for room that came without an
/// event (a failed backend's `fail_timeout` passing).
const RECHECK: Duration = Duration::from_secs(1);

/// A waiting request's end of the queue. However the wait ends (answered, timed out, the client
/// gone, the task dropped), a backend handed over and not taken is given back.
struct Wait<'a> {
    handed: Option<oneshot::Receiver<Handed>>,
    upstream: &'a Upstream,
}

impl Wait<'_> {
    /// Closes the queue's end; what was handed over before, if anything.
    fn take(&mut self) -> Option<Handed> {
        let mut handed = self.handed.take()?;
        handed.close();
        handed.try_recv().ok()
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if let Some(Ok((generation, addr, ticket))) = self.take() {
            self.upstream
                .complete(generation, addr, ticket, Outcome::Cancelled);
        }
        // A request that stopped waiting (timed out, its client gone) leaves the queue now,
        // so the queue's length counts only those still waiting.
        if self.upstream.queued() > 0 {
            let mut st = lock(&self.upstream.state);
            st.waiting.retain(|w| !w.to.is_closed());
            self.upstream
                .queued
                .store(st.waiting.len(), Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BackendSettings;
    use balance::Algorithm;

    /// An upstream of backends at 10.0.0.1.. with `max_conns` 1, and a queue.
    fn full_upstream(backends: usize, queue: usize, timeout: Duration) -> Arc<Upstream> {
        let backends = (1..=backends)
            .map(|i| BackendSettings {
                max_conns: 1,
                ..BackendSettings::new(format!("10.0.0.{i}:80").parse().unwrap())
            })
            .collect();
        let mut s = UpstreamSettings::new("q", Algorithm::RoundRobin, backends);
        s.queue = queue;
        s.queue_timeout = timeout;
        Arc::new(Upstream::new(s))
    }

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, i], 80))
    }

    /// A client connection for `pick` to watch (it is not watched here).
    async fn client() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        (c, l.accept().await.unwrap().0)
    }

    /// Starts a pick that will wait, and waits until it is in the queue.
    async fn queue_one(
        u: &Arc<Upstream>,
        tried: Vec<SocketAddr>,
    ) -> tokio::task::JoinHandle<Result<Attempt, Unpicked>> {
        let before = u.queued();
        let u2 = Arc::clone(u);
        let task = tokio::spawn(async move {
            let (c, _s) = client().await;
            let settings = u2.settings();
            u2.pick(&settings, None, &tried, Some(&c), false).await
        });
        while u.queued() == before {
            tokio::task::yield_now().await;
        }
        task
    }

    async fn pick_now(u: &Arc<Upstream>) -> Result<Attempt, Unpicked> {
        let (c, _s) = client().await;
        u.pick(&u.settings(), None, &[], Some(&c), false).await
    }

    #[tokio::test]
    async fn waiting_requests_get_a_freed_backend_in_their_order_and_newcomers_queue_behind() {
        let u = full_upstream(1, 5, Duration::from_secs(30));
        let mut busy = pick_now(&u).await.unwrap();
        let first = queue_one(&u, vec![]).await;
        let second = queue_one(&u, vec![]).await;
        assert_eq!(u.queued(), 2);
        busy.complete(Outcome::Success);
        let mut first = first.await.unwrap().expect("the oldest is served");
        assert_eq!((first.addr, u.queued()), (addr(1), 1));
        // A newcomer does not take the room the second waits for.
        let newcomer = queue_one(&u, vec![]).await;
        first.complete(Outcome::Success);
        let second = second.await.unwrap().expect("then the second");
        assert_eq!(u.queued(), 1);
        drop(second);
        assert!(newcomer.await.unwrap().is_ok(), "then the newcomer");
        assert_eq!(u.queued(), 0);
    }

    #[tokio::test]
    async fn room_a_waiter_cannot_use_goes_to_the_next_that_can() {
        let u = full_upstream(2, 5, Duration::from_secs(30));
        let mut a = pick_now(&u).await.unwrap();
        let b = pick_now(&u).await.unwrap();
        assert_eq!((a.addr, b.addr), (addr(1), addr(2)));
        // A retry that already tried backend 1 waits first; a fresh request after it.
        let retry = queue_one(&u, vec![addr(1)]).await;
        let fresh = queue_one(&u, vec![]).await;
        a.complete(Outcome::Success);
        let fresh = fresh
            .await
            .unwrap()
            .expect("backend 1 goes to the one that may use it");
        assert_eq!((fresh.addr, u.queued()), (addr(1), 1));
        drop(b);
        assert_eq!(retry.await.unwrap().unwrap().addr, addr(2));
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once_and_a_wait_ends_at_queue_timeout() {
        let u = full_upstream(1, 1, Duration::from_millis(200));
        let _busy = pick_now(&u).await.unwrap();
        let waiting = queue_one(&u, vec![]).await;
        assert_eq!(pick_now(&u).await.err(), Some(Unpicked::QueueFull));
        assert_eq!(waiting.await.unwrap().err(), Some(Unpicked::QueueTimeout));
        assert_eq!(u.queued(), 0, "the timed-out request left the queue");
    }

    #[tokio::test]
    async fn a_waiter_that_leaves_gives_its_place_up_and_no_ticket_is_lost() {
        let u = full_upstream(1, 5, Duration::from_secs(30));
        let mut busy = pick_now(&u).await.unwrap();
        let leaving = queue_one(&u, vec![]).await;
        leaving.abort();
        let _ = leaving.await;
        assert_eq!(u.queued(), 0);
        busy.complete(Outcome::Success);
        assert_eq!(
            u.snapshot()[0].in_flight,
            0,
            "nothing handed to the one that left"
        );
        assert!(pick_now(&u).await.is_ok());
    }

    #[tokio::test]
    async fn waiters_learn_at_once_when_no_backend_is_left() {
        let u = full_upstream(1, 5, Duration::from_secs(30));
        let _busy = pick_now(&u).await.unwrap();
        let waiting = queue_one(&u, vec![]).await;
        u.set_state(addr(1), AdminState::Disabled).unwrap();
        assert_eq!(waiting.await.unwrap().err(), Some(Unpicked::NoBackend));
    }
}
