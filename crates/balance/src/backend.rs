//! Backends as the balancing core sees them: an id, a configuration, live statistics, and the
//! read-only [`Backends`] view handed to algorithms.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A backend's index in the current membership of one tier of a [`Pool`](crate::Pool).
///
/// Ids are dense (`0..len`) so that algorithms can keep per-backend state in plain vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackendId(pub u32);

impl BackendId {
    /// The id as a vector index.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A point in time, in nanoseconds. The proxy counts from its start on a monotonic clock; the
/// simulator counts virtual time. The core only ever compares and subtracts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(pub u64);

impl Nanos {
    pub const ZERO: Nanos = Nanos(0);

    /// `self - earlier`, or zero if `earlier` is later (clocks handed in are monotonic, but a
    /// caller may pass a stale `now`).
    #[inline]
    pub fn since(self, earlier: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(earlier.0))
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl From<Duration> for Nanos {
    fn from(d: Duration) -> Nanos {
        Nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

impl From<Nanos> for Duration {
    fn from(n: Nanos) -> Duration {
        Duration::from_nanos(n.0)
    }
}

/// How a backend is configured, as far as balancing is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendSpec {
    /// The backend's name as configured (`"10.0.0.1:8080"`). Ring algorithms (`hash consistent`,
    /// `maglev`, `bounded_load`) place a backend by its name, so the same name lands in the same
    /// places in every fulcrum (and, for `hash consistent`, in nginx). Give each backend its own.
    pub name: Arc<str>,
    /// Relative share of requests, at least 1 (nginx `weight=`).
    pub weight: u32,
    /// Marked down by the operator: never chosen (nginx `down`).
    pub down: bool,
    /// Failed attempts within `fail_timeout` that take the backend out of rotation for
    /// `fail_timeout`; 0 disables passive health (nginx `max_fails`, default 1).
    pub max_fails: u32,
    /// Both the window in which failures are counted and how long a failed backend stays out
    /// (nginx `fail_timeout`, default 10 s).
    pub fail_timeout: Nanos,
    /// This backend's slow start, overriding the pool's (`slow_start` on a backend).
    pub slow_start: Option<Nanos>,
    /// Requests in flight on this backend at most; 0 is no limit (nginx `max_conns`). A full
    /// backend is passed over as a failed one is, without counting against its health.
    pub max_conns: u32,
}

impl BackendSpec {
    /// A backend of the given weight with nginx's defaults: `max_fails=1 fail_timeout=10s`, and
    /// no name (see [`named`](BackendSpec::named)).
    pub fn new(weight: u32) -> BackendSpec {
        BackendSpec {
            name: Arc::from(""),
            weight,
            down: false,
            max_fails: 1,
            fail_timeout: Nanos::from(Duration::from_secs(10)),
            slow_start: None,
            max_conns: 0,
        }
    }

    /// The same backend, named.
    pub fn named(mut self, name: &str) -> BackendSpec {
        self.name = Arc::from(name);
        self
    }
}

/// A slow-start ramp of 1: the backend's whole weight. Ramps are fixed point, in 1/1024ths.
pub const RAMP_FULL: u32 = 1024;

/// Smoothing factor of the response-time average: nginx's `least_time` uses
/// `avg = 0.05·v + 0.95·avg`, slow enough that one outlier does not flip the choice.
pub(crate) const LATENCY_ALPHA: f64 = 0.05;

/// Live statistics of one backend, owned and updated by [`Pool`](crate::Pool) only.
#[derive(Debug, Clone)]
pub struct BackendState {
    pub(crate) spec: BackendSpec,
    /// The weight algorithms use: the configured weight, until a weight model or slow start
    /// changes it.
    pub(crate) weight: u32,
    /// Slow start's share of `weight`, in 1/1024ths ([`RAMP_FULL`] outside slow start).
    pub(crate) ramp: u32,
    /// When slow start began for this backend, while it lasts.
    pub(crate) ramp_since: Option<Nanos>,
    /// Requests picked and not yet completed.
    pub(crate) in_flight: u32,
    /// Failures counted towards `max_fails` (nginx `peer->fails`).
    pub(crate) fails: u32,
    /// When the last failure happened (nginx `peer->accessed`).
    pub(crate) accessed: Nanos,
    /// When the failure window was last (re)started (nginx `peer->checked`): set on a failure,
    /// and on the first pick after `fail_timeout` has passed, which makes that pick the probe
    /// that decides whether the backend is back.
    pub(crate) checked: Nanos,
    /// Response-time moving average in nanoseconds; `None` until the first success. A
    /// failure's latency enters it only when above it (see [`crate::Completion::verdict`]).
    pub(crate) latency: Option<f64>,
    /// Moving average of 1 (success) and 0 (failure: an attempt that failed, an answer in
    /// `failure_statuses`, a client that gave up after waiting longer than `latency`), with the
    /// same smoothing as latency.
    pub(crate) success_rate: f64,
    pub(crate) requests: u64,
    pub(crate) failures: u64,
    /// Taken out by active health checks (they failed `fall` times in a row, and have not
    /// passed `rise` times since).
    pub(crate) check_failed: bool,
}

impl BackendState {
    pub(crate) fn new(spec: BackendSpec) -> BackendState {
        BackendState {
            weight: spec.weight,
            ramp: RAMP_FULL,
            ramp_since: None,
            in_flight: 0,
            fails: 0,
            accessed: Nanos::ZERO,
            checked: Nanos::ZERO,
            latency: None,
            success_rate: 1.0,
            requests: 0,
            failures: 0,
            check_failed: false,
            spec,
        }
    }

    pub fn spec(&self) -> &BackendSpec {
        &self.spec
    }

    pub fn weight(&self) -> u32 {
        self.weight
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Slow start's share of the weight, in 1/1024ths ([`RAMP_FULL`] when not ramping).
    pub fn ramp(&self) -> u32 {
        self.ramp
    }

    /// When the failure window last (re)started (nginx `peer->checked`).
    pub fn checked(&self) -> Nanos {
        self.checked
    }

    pub fn fails(&self) -> u32 {
        self.fails
    }

    /// Completed requests (successes and failures, as [`crate::Completion::verdict`] has them;
    /// cancellations that say nothing of the backend are not counted).
    pub fn requests(&self) -> u64 {
        self.requests
    }

    pub fn failures(&self) -> u64 {
        self.failures
    }

    pub fn latency(&self) -> Option<Nanos> {
        self.latency.map(|l| Nanos(l as u64))
    }

    pub fn success_rate(&self) -> f64 {
        self.success_rate
    }

    /// Whether the backend may be chosen at `now`: not marked down, weight above zero, and not
    /// within `fail_timeout` of reaching `max_fails` (nginx's rule, checked on every pick).
    #[inline]
    pub fn is_eligible(&self, now: Nanos) -> bool {
        !self.spec.down && self.weight > 0 && !self.check_failed && !self.is_failed(now)
    }

    /// Whether active health checks have taken the backend out.
    pub fn is_check_failed(&self) -> bool {
        self.check_failed
    }

    /// Below its `max_conns` (always, without one).
    #[inline]
    pub fn has_room(&self) -> bool {
        self.spec.max_conns == 0 || self.in_flight < self.spec.max_conns
    }

    /// Taken out of rotation by passive health at `now`.
    #[inline]
    pub fn is_failed(&self, now: Nanos) -> bool {
        self.spec.max_fails != 0
            && self.fails >= self.spec.max_fails
            && now.since(self.checked) <= self.spec.fail_timeout
    }
}

/// The read-only view of one tier's backends that algorithms see.
///
/// Every accessor is O(1) by id. Ids run from `0` to `len() - 1`.
#[derive(Debug, Clone, Copy)]
pub struct Backends<'a> {
    states: &'a [BackendState],
    now: Nanos,
    /// The sum of the backends' in-flight counts.
    in_flight: u64,
    /// Whether a [`Pool`](crate::Pool) keeps the books for these backends and tells the
    /// algorithm of every change ([`Balancer::on_change`](crate::Balancer::on_change)), so an
    /// indexed algorithm may look at only the backends that changed.
    tracked: bool,
}

impl<'a> Backends<'a> {
    /// A view of `states` at `now`. Adds up the in-flight counts (O(n)); the pool, which keeps
    /// that sum as it goes, uses [`with_in_flight`](Self::with_in_flight).
    pub fn new(states: &'a [BackendState], now: Nanos) -> Backends<'a> {
        let in_flight = states.iter().map(|s| u64::from(s.in_flight)).sum();
        Backends {
            tracked: false,
            ..Backends::with_in_flight(states, now, in_flight)
        }
    }

    /// A view whose total in flight is already known, of a pool that reports every change of
    /// these backends' state to the algorithm ([`Backends::is_tracked`]).
    pub(crate) fn with_in_flight(
        states: &'a [BackendState],
        now: Nanos,
        in_flight: u64,
    ) -> Backends<'a> {
        debug_assert_eq!(
            in_flight,
            states.iter().map(|s| u64::from(s.in_flight)).sum::<u64>()
        );
        Backends {
            states,
            now,
            in_flight,
            tracked: true,
        }
    }

    /// Whether every change to these backends' state since the algorithm last saw them was
    /// reported to it through [`Balancer::on_change`](crate::Balancer::on_change) (true for
    /// the views a [`Pool`](crate::Pool) hands out). When false, an algorithm that keeps an
    /// index must look at every backend again.
    #[inline]
    pub fn is_tracked(&self) -> bool {
        self.tracked
    }

    /// Requests in flight on all these backends together, in O(1).
    #[inline]
    pub fn total_in_flight(&self) -> u64 {
        self.in_flight
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.states.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// All ids, in configuration order.
    pub fn ids(&self) -> impl Iterator<Item = BackendId> + use<> {
        (0..self.states.len() as u32).map(BackendId)
    }

    /// The time this view was taken at.
    #[inline]
    pub fn now(&self) -> Nanos {
        self.now
    }

    #[inline]
    pub fn state(&self, id: BackendId) -> &'a BackendState {
        &self.states[id.index()]
    }

    /// The weight to balance by (configured, or as a weight model set it).
    #[inline]
    pub fn weight(&self, id: BackendId) -> u32 {
        self.states[id.index()].weight
    }

    /// The weight with slow start applied, in 1/1024ths of a weight unit: `weight · ramp`.
    /// Algorithms that honour `slow_start` balance by this instead of [`weight`](Self::weight);
    /// outside slow start it is `weight · 1024`, the same proportions.
    #[inline]
    pub fn share(&self, id: BackendId) -> u64 {
        let s = &self.states[id.index()];
        u64::from(s.weight) * u64::from(s.ramp)
    }

    /// The backend's configured name (see [`BackendSpec::name`]).
    #[inline]
    pub fn name(&self, id: BackendId) -> &'a str {
        &self.states[id.index()].spec.name
    }

    /// The configured `max_fails`, which also scales nginx's smooth-WRR penalty on failure.
    #[inline]
    pub fn max_fails(&self, id: BackendId) -> u32 {
        self.states[id.index()].spec.max_fails
    }

    /// Whether an algorithm may choose `id` now: healthy and in rotation
    /// ([`BackendState::is_eligible`]) and below its `max_conns`.
    #[inline]
    pub fn is_eligible(&self, id: BackendId) -> bool {
        let state = &self.states[id.index()];
        state.is_eligible(self.now) && state.has_room()
    }

    #[inline]
    pub fn in_flight(&self, id: BackendId) -> u32 {
        self.states[id.index()].in_flight
    }

    #[inline]
    pub fn latency(&self, id: BackendId) -> Option<Nanos> {
        self.states[id.index()].latency()
    }

    #[inline]
    pub fn success_rate(&self, id: BackendId) -> f64 {
        self.states[id.index()].success_rate
    }
}
