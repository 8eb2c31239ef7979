//! What the data plane counts for `/metrics` and the admin API: every request answered, by
//! upstream, backend and status class, its duration (by upstream and backend), and every
//! failed attempt by reason.
//!
//! Counting must not slow the workers down or make them wait on each other, so each worker
//! counts into its own [`WorkerStats`] (a mutex only that worker and a scrape ever take; the
//! worker holds it for a few hash-map updates) and a scrape sums the workers' counts
//! ([`Metrics::totals`]). Counts only grow while their backend is in its upstream. A backend
//! that leaves it (DNS discovery dropped it, the admin API removed it, a reload) keeps its
//! counts for [`KEEP_DEPARTED`], long enough for every scrape to read their last values, and
//! is then forgotten ([`Metrics::forget_departed`]): under the churn of a Kubernetes service
//! the series of departed pods would otherwise pile up in every scrape and in memory. One
//! that comes back later counts from 0 again, which Prometheus reads as a counter reset.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use balance::Fault;
use tokio::sync::watch;

use crate::upstream::Upstream;

/// How long the counts of a backend that left its upstream, or of an upstream a reload
/// removed, are kept: five minutes, Prometheus's own look-back for a series that stopped,
/// and several times any usual scrape interval.
pub const KEEP_DEPARTED: Duration = Duration::from_secs(300);

/// How often [`forget_departed`] looks for counts to forget.
const FORGET_EVERY: Duration = Duration::from_secs(10);

/// Upper bounds of the request-duration histogram, in seconds (Prometheus client libraries'
/// default buckets, which span 5 ms to 10 s).
pub const DURATION_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The maps counts are kept in, updated on every request: foldhash rather than the default
/// SipHash (issue 27: hashing the upstream's name and the backend's address cost about 480
/// instructions per request). Their keys are upstream names and backend addresses, which
/// come from the configuration, never from a client, so a keyed DoS-resistant hash buys
/// nothing here.
pub type CountMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Status classes counted: `1xx` to `5xx`.
pub const CODE_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Every [`Fault`]: the order of the counts by reason.
pub const FAULTS: [Fault; 7] = Fault::ALL;

/// A fault's name in metrics and the API.
pub fn reason(fault: Fault) -> &'static str {
    match fault {
        Fault::LocalResources => "local_resources",
        Fault::ConnectFailed => "connect_failed",
        Fault::ConnectTimeout => "connect_timeout",
        Fault::Closed => "closed",
        Fault::ReadTimeout => "read_timeout",
        Fault::InvalidResponse => "invalid_response",
        Fault::TlsHandshake => "tls_handshake",
    }
}

/// The index of `status`'s class in [`CODE_CLASSES`] (below 100 is `1xx`, above 599 `5xx`).
fn status_class(status: u16) -> usize {
    usize::from((status / 100).clamp(1, 5)) - 1
}

fn fault_index(fault: Fault) -> usize {
    FAULTS.iter().position(|&f| f == fault).unwrap_or(0)
}

/// A request-duration histogram: counts per bucket of [`DURATION_BUCKETS`] (not cumulative;
/// the last entry counts those above the highest bound), and the sum.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Durations {
    pub buckets: [u64; DURATION_BUCKETS.len() + 1],
    pub sum_seconds: f64,
    pub count: u64,
}

impl Durations {
    fn record(&mut self, d: Duration) {
        let s = d.as_secs_f64();
        let i = DURATION_BUCKETS
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(DURATION_BUCKETS.len());
        self.buckets[i] += 1;
        self.sum_seconds += s;
        self.count += 1;
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Durations) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.sum_seconds += other.sum_seconds;
        self.count += other.count;
    }

    /// Cumulative counts at each bound, as Prometheus wants them (`+Inf` is `count`).
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut total = 0;
        DURATION_BUCKETS
            .iter()
            .zip(&self.buckets)
            .map(|(&bound, &n)| {
                total += n;
                (bound, total)
            })
            .collect()
    }
}

/// The answers one backend (or fulcrum itself) gave for an upstream: by status class (index
/// into [`CODE_CLASSES`]), and how long their requests took. Both in one entry, so that a
/// request costs one map lookup.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answers {
    pub classes: [u64; 5],
    pub durations: Durations,
}

/// One upstream's counts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpstreamCounts {
    /// Answers by the backend that gave them (`None`: fulcrum's own answer, no backend's).
    pub responses: CountMap<Option<SocketAddr>, Answers>,
    /// Failed attempts by backend and reason (index into [`FAULTS`]).
    pub failures: CountMap<SocketAddr, [u64; FAULTS.len()]>,
    /// Attempts after a request's first (on another backend or a fresh connection).
    pub retries: u64,
    /// Retries not made because the upstream's retry budget was spent.
    pub budget_exhausted: u64,
    /// Requests answered 503 because every backend was at its `max_conns`: the queue was full
    /// (or off), or they waited `queue_timeout` in it.
    pub queue_full: u64,
    pub queue_timeouts: u64,
}

impl UpstreamCounts {
    fn add(&mut self, other: &UpstreamCounts) {
        for (k, v) in &other.responses {
            let mine = self.responses.entry(*k).or_default();
            for (a, b) in mine.classes.iter_mut().zip(&v.classes) {
                *a += b;
            }
            mine.durations.add(&v.durations);
        }
        for (k, v) in &other.failures {
            let mine = self.failures.entry(*k).or_default();
            for (a, b) in mine.iter_mut().zip(v) {
                *a += b;
            }
        }
        self.retries += other.retries;
        self.budget_exhausted += other.budget_exhausted;
        self.queue_full += other.queue_full;
        self.queue_timeouts += other.queue_timeouts;
    }

    /// Requests answered, all backends and classes.
    pub fn requests(&self) -> u64 {
        self.responses.values().flat_map(|a| a.classes).sum()
    }

    /// How long requests took, from their head to the end of the answer: every backend's
    /// (and fulcrum's own answers') summed.
    pub fn durations(&self) -> Durations {
        let mut all = Durations::default();
        for a in self.responses.values() {
            all.add(&a.durations);
        }
        all
    }
}

/// A route's counts' key: the listener (as configured) and the route's name.
pub type RouteKey = (Arc<str>, Arc<str>);

/// Every route's counts' key (its listener, a NUL, its name; a NUL is in neither) ever
/// configured, each with its number: the index of its counts in every worker's list.
#[derive(Debug, Default)]
struct RouteKeys {
    ids: HashMap<Arc<str>, usize>,
    keys: Vec<Arc<str>>,
}

static ROUTE_KEYS: LazyLock<Mutex<RouteKeys>> = LazyLock::new(Default::default);

fn route_keys() -> MutexGuard<'static, RouteKeys> {
    ROUTE_KEYS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The number a route's counts are kept under, for the life of the process: every build of a
/// route with the same listener and name (one at each reload) gets the same, and a worker
/// finds the route's counts by it, at an index rather than by hashing and comparing the text
/// (issue 28: the text cost about 130 instructions a request). The keys kept are the routes
/// configured since start, as the counts' series are.
pub(crate) fn route_id(listener: &str, route: &str) -> usize {
    let key = format!("{listener}\0{route}");
    let mut known = route_keys();
    if let Some(&id) = known.ids.get(key.as_str()) {
        return id;
    }
    let id = known.keys.len();
    let key: Arc<str> = key.into();
    known.keys.push(Arc::clone(&key));
    known.ids.insert(key, id);
    id
}

/// One worker's counts, by upstream name.
#[derive(Debug, Default)]
pub struct WorkerStats {
    counts: Mutex<Counts>,
    /// TLS handshakes that failed or timed out (no upstream is known yet).
    tls_handshake_failures: std::sync::atomic::AtomicU64,
}

/// What a worker counts under its one lock.
#[derive(Debug, Default)]
struct Counts {
    upstreams: CountMap<Arc<str>, UpstreamCounts>,
    /// Answers by route (its [`route_id`]) and status class, on listeners with routes.
    routes: Vec<[u64; 5]>,
    /// How long the requests a route sent to an upstream took, by route (its [`route_id`]).
    route_durations: Vec<Durations>,
    /// Requests not let through, by route (its [`route_id`]; a listener's own requests under
    /// its empty route name) and [`crate::admission::Reason`].
    limited: Vec<[u64; 3]>,
}

impl Counts {
    fn route(&mut self, id: usize, class: usize) {
        if self.routes.len() <= id {
            self.routes.resize(id + 1, [0; 5]);
        }
        if let Some(classes) = self.routes.get_mut(id) {
            classes[class] += 1;
        }
    }
}

impl WorkerStats {
    fn lock(&self) -> MutexGuard<'_, Counts> {
        // Counts are plain numbers: a panic elsewhere cannot leave them inconsistent.
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn with(&self, upstream: &Arc<str>, f: impl FnOnce(&mut UpstreamCounts)) {
        let mut counts = self.lock();
        match counts.upstreams.get_mut(upstream) {
            Some(c) => f(c),
            None => f(counts.upstreams.entry(Arc::clone(upstream)).or_default()),
        }
    }

    /// A request answered with `status` (by `backend`, or by fulcrum itself) after `took`;
    /// `route`: the [`route_id`] of the route that took it, if one did.
    pub(crate) fn answered(
        &self,
        upstream: &Arc<str>,
        backend: Option<SocketAddr>,
        status: u16,
        took: Duration,
        route: Option<usize>,
    ) {
        let class = status_class(status);
        let mut counts = self.lock();
        if let Some(route) = route {
            counts.route(route, class);
            if counts.route_durations.len() <= route {
                counts
                    .route_durations
                    .resize(route + 1, Durations::default());
            }
            if let Some(d) = counts.route_durations.get_mut(route) {
                d.record(took);
            }
        }
        // Looked up by reference first: `entry` would clone the name's `Arc` every time.
        let c = match counts.upstreams.get_mut(upstream) {
            Some(c) => c,
            None => counts.upstreams.entry(Arc::clone(upstream)).or_default(),
        };
        let answers = c.responses.entry(backend).or_default();
        answers.classes[class] += 1;
        answers.durations.record(took);
    }

    /// A request of the route numbered `id` ([`route_id`]) was not let through, for `why`.
    pub(crate) fn limited(&self, id: usize, why: crate::admission::Reason) {
        let mut counts = self.lock();
        if counts.limited.len() <= id {
            counts.limited.resize(id + 1, [0; 3]);
        }
        if let Some(reasons) = counts.limited.get_mut(id) {
            reasons[why.index()] += 1;
        }
    }

    /// A request that the route numbered `id` ([`route_id`]) took was answered with
    /// `status` by fulcrum itself, no upstream involved (a redirect, a fixed answer).
    pub(crate) fn routed(&self, id: usize, status: u16) {
        self.lock().route(id, status_class(status));
    }

    /// An attempt on `backend` failed with `fault`.
    pub(crate) fn failed(&self, upstream: &Arc<str>, backend: SocketAddr, fault: Fault) {
        self.with(upstream, |c| {
            c.failures.entry(backend).or_default()[fault_index(fault)] += 1;
        });
    }

    /// A request that found no room (see [`crate::upstream::Unpicked`]).
    pub(crate) fn unpicked(&self, upstream: &Arc<str>, why: crate::upstream::Unpicked) {
        use crate::upstream::Unpicked;
        match why {
            Unpicked::QueueFull => self.with(upstream, |c| c.queue_full += 1),
            Unpicked::QueueTimeout => self.with(upstream, |c| c.queue_timeouts += 1),
            Unpicked::NoBackend | Unpicked::ClientGone => {}
        }
    }

    /// A client's TLS handshake failed or timed out.
    pub(crate) fn tls_handshake_failed(&self) {
        self.tls_handshake_failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// `n` attempts after a request's first.
    /// A retry the retry budget did not allow.
    pub(crate) fn budget_exhausted(&self, upstream: &Arc<str>) {
        self.with(upstream, |c| c.budget_exhausted += 1);
    }

    pub(crate) fn retried(&self, upstream: &Arc<str>, n: u64) {
        if n > 0 {
            self.with(upstream, |c| c.retries += n);
        }
    }
}

/// Every worker's counts, for a scrape.
#[derive(Debug, Default)]
pub struct Metrics {
    workers: Mutex<Vec<Arc<WorkerStats>>>,
    /// Counts whose backend (or upstream: `None`) is gone, and since when it was seen gone.
    departed: Mutex<HashMap<Counted, Instant>>,
}

/// Whose counts: an upstream's backend, or (`None`) the whole upstream.
type Counted = (Arc<str>, Option<SocketAddr>);

impl Metrics {
    /// A new worker's own counts.
    pub(crate) fn worker(&self) -> Arc<WorkerStats> {
        let stats = Arc::new(WorkerStats::default());
        self.workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::clone(&stats));
        stats
    }

    /// Every worker's counts, taken out of the list (which is not held while they are read).
    fn every_worker(&self) -> Vec<Arc<WorkerStats>> {
        self.workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// TLS handshakes that failed or timed out, every worker's.
    pub fn tls_handshake_failures(&self) -> u64 {
        self.workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|w| {
                w.tls_handshake_failures
                    .load(std::sync::atomic::Ordering::Relaxed)
            })
            .sum()
    }

    /// Answers by (listener, route) and status class (index into [`CODE_CLASSES`]), every
    /// worker's summed.
    pub fn route_totals(&self) -> HashMap<RouteKey, [u64; 5]> {
        self.by_route(|c| &c.routes)
    }

    /// Requests not let through by (listener, route; the route empty for a listener's
    /// requests no route took) and reason (index into [`crate::admission::Reason::ALL`]),
    /// every worker's summed.
    pub fn limited_totals(&self) -> HashMap<RouteKey, [u64; 3]> {
        self.by_route(|c| &c.limited)
    }

    /// How long the requests each route (by listener and name) sent to an upstream took,
    /// every worker's summed: every named route configured since start, with nothing counted
    /// yet too (so that its series exists from the start).
    pub fn route_durations(&self) -> HashMap<RouteKey, Durations> {
        let workers = self.every_worker();
        let keys = route_keys().keys.clone();
        let mut by_id = vec![Durations::default(); keys.len()];
        for w in workers {
            let counts = w.lock();
            for (mine, theirs) in by_id.iter_mut().zip(&counts.route_durations) {
                mine.add(theirs);
            }
        }
        keys.iter()
            .zip(by_id)
            .filter_map(|(key, d)| {
                let (listener, route) = key.split_once('\0')?;
                (!route.is_empty()).then(|| ((listener.into(), route.into()), d))
            })
            .collect()
    }

    /// Every worker's counts by interned route id (`of` picks which), summed by (listener,
    /// route); a route with nothing counted on a worker gives no series from it.
    fn by_route<const N: usize>(
        &self,
        of: impl Fn(&Counts) -> &Vec<[u64; N]>,
    ) -> HashMap<RouteKey, [u64; N]> {
        let workers = self.every_worker();
        let keys = route_keys().keys.clone();
        let mut totals: HashMap<RouteKey, [u64; N]> = HashMap::new();
        for w in workers {
            let counts = w.lock();
            for (id, row) in of(&counts).iter().enumerate() {
                let Some(key) = keys.get(id).filter(|_| row.iter().any(|&n| n > 0)) else {
                    continue;
                };
                let (listener, route) = key.split_once('\0').unwrap_or((key, ""));
                let mine = totals
                    .entry((listener.into(), route.into()))
                    .or_insert([0; N]);
                for (a, b) in mine.iter_mut().zip(row) {
                    *a += b;
                }
            }
        }
        totals
    }

    /// Forgets the counts of every backend that has been out of its upstream, and of every
    /// upstream that has been out of `present` (the upstreams in force, with their backends'
    /// addresses), for [`KEEP_DEPARTED`] at `now`. A backend seen gone starts its time then; one
    /// back in its upstream before the time is up keeps its counts. An answer a departed
    /// backend gives after its counts were forgotten (a request that was in flight) counts
    /// anew and is forgotten in turn.
    pub fn forget_departed(&self, present: &HashMap<Arc<str>, HashSet<SocketAddr>>, now: Instant) {
        let workers = self.every_worker();
        let mut gone: HashSet<Counted> = HashSet::new();
        for w in &workers {
            for (name, counts) in &w.lock().upstreams {
                let Some(members) = present.get(name) else {
                    gone.insert((Arc::clone(name), None));
                    continue;
                };
                let counted = counts
                    .responses
                    .keys()
                    .flatten()
                    .chain(counts.failures.keys());
                for addr in counted.filter(|a| !members.contains(a)) {
                    gone.insert((Arc::clone(name), Some(*addr)));
                }
            }
        }
        let expired: Vec<_> = {
            let mut departed = self.departed.lock().unwrap_or_else(|p| p.into_inner());
            // Back, or forgotten already.
            departed.retain(|key, _| gone.contains(key));
            for key in gone {
                departed.entry(key).or_insert(now);
            }
            let expired = departed
                .iter()
                .filter(|&(_, &since)| now.saturating_duration_since(since) >= KEEP_DEPARTED)
                .map(|(key, _)| key.clone())
                .collect();
            departed.retain(|_, since| now.saturating_duration_since(*since) < KEEP_DEPARTED);
            expired
        };
        if expired.is_empty() {
            return;
        }
        for w in &workers {
            let mut counts = w.lock();
            for (name, addr) in &expired {
                match addr {
                    None => {
                        counts.upstreams.remove(name);
                    }
                    Some(addr) => {
                        if let Some(c) = counts.upstreams.get_mut(name) {
                            c.responses.remove(&Some(*addr));
                            c.failures.remove(addr);
                        }
                    }
                }
            }
        }
    }

    /// The counts of every worker, summed, by upstream name.
    pub fn totals(&self) -> HashMap<Arc<str>, UpstreamCounts> {
        let workers = self.every_worker();
        let mut totals: HashMap<Arc<str>, UpstreamCounts> = HashMap::new();
        for w in workers {
            for (name, counts) in w.lock().upstreams.iter() {
                totals.entry(Arc::clone(name)).or_default().add(counts);
            }
        }
        totals
    }
}

/// Forgets departed backends' counts ([`Metrics::forget_departed`]) every [`FORGET_EVERY`],
/// against the upstreams `upstreams` tells, until `stop`.
pub async fn forget_departed(
    metrics: Arc<Metrics>,
    upstreams: watch::Receiver<Vec<Arc<Upstream>>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(FORGET_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        let present: HashMap<Arc<str>, HashSet<SocketAddr>> = upstreams
            .borrow()
            .iter()
            .map(|u| {
                (
                    Arc::clone(u.shared_name()),
                    u.snapshot().iter().map(|b| b.addr).collect(),
                )
            })
            .collect();
        // tokio's clock, which tests can pause and advance.
        metrics.forget_departed(&present, tokio::time::Instant::now().into_std());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_s_counts_stay_one_series_across_builds() {
        let m = Metrics::default();
        let (a, b) = (m.worker(), m.worker());
        // As two reloads build the route: the same number.
        let (first, again) = (
            route_id("127.0.0.1:80", "api"),
            route_id("127.0.0.1:80", "api"),
        );
        assert_eq!(first, again);
        let other = route_id("127.0.0.1:81", "api");
        let web: Arc<str> = Arc::from("web");
        a.answered(&web, None, 200, Duration::from_millis(1), Some(first));
        a.routed(again, 503);
        b.routed(again, 204);
        b.routed(other, 404);
        let totals = m.route_totals();
        assert_eq!(totals.len(), 2);
        assert_eq!(m.totals()[&web].requests(), 1);
        assert_eq!(
            totals[&(Arc::from("127.0.0.1:80"), Arc::from("api"))],
            [0, 2, 0, 0, 1]
        );
        assert_eq!(
            totals[&(Arc::from("127.0.0.1:81"), Arc::from("api"))],
            [0, 0, 0, 1, 0]
        );
        // Its durations: the one answer that went to an upstream; the other route's series
        // is there, empty.
        let durations = m.route_durations();
        assert_eq!(
            durations[&(Arc::from("127.0.0.1:80"), Arc::from("api"))].count,
            1
        );
        assert_eq!(
            durations[&(Arc::from("127.0.0.1:81"), Arc::from("api"))].count,
            0
        );
    }

    #[test]
    fn a_departed_backend_s_counts_are_kept_for_a_while_then_forgotten() {
        let m = Metrics::default();
        let (a, b) = (m.worker(), m.worker());
        let (web, old): (Arc<str>, Arc<str>) = (Arc::from("web"), Arc::from("old"));
        let [x, y, z]: [SocketAddr; 3] =
            ["127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"].map(|a| a.parse().unwrap());
        let ms = Duration::from_millis(1);
        a.answered(&web, Some(x), 200, ms, None);
        b.answered(&web, Some(y), 200, ms, None);
        a.answered(&web, Some(y), 500, ms, None);
        b.failed(&web, z, Fault::ConnectFailed);
        a.answered(&web, None, 503, ms, None);
        a.answered(&old, Some(x), 200, ms, None);
        let with = |members: &[SocketAddr]| {
            HashMap::from([(Arc::clone(&web), members.iter().copied().collect())])
        };
        let secs = Duration::from_secs;
        let t0 = Instant::now();
        // y and z left web, and a reload removed old: all kept for now.
        m.forget_departed(&with(&[x]), t0);
        let t = m.totals();
        assert_eq!(t[&web].responses[&Some(y)].classes, [0, 1, 0, 0, 1]);
        assert!(t[&web].failures.contains_key(&z));
        assert!(t.contains_key(&old));
        // y comes back before its time is up and keeps its counts; z and old are forgotten,
        // in both workers' counts; fulcrum's own answers stay.
        m.forget_departed(&with(&[x, y]), t0 + KEEP_DEPARTED - secs(1));
        m.forget_departed(&with(&[x, y]), t0 + KEEP_DEPARTED);
        let t = m.totals();
        assert_eq!(t[&web].responses[&Some(y)].classes, [0, 1, 0, 0, 1]);
        assert!(!t[&web].failures.contains_key(&z), "{:?}", t[&web].failures);
        assert!(!t.contains_key(&old));
        assert_eq!(t[&web].responses[&None].classes, [0, 0, 0, 0, 1]);
        assert_eq!(t[&web].responses[&Some(x)].classes, [0, 1, 0, 0, 0]);
        // y leaves again: its time starts anew, from when it was seen gone.
        let left = t0 + KEEP_DEPARTED + secs(10);
        m.forget_departed(&with(&[x]), left);
        m.forget_departed(&with(&[x]), left + KEEP_DEPARTED - secs(1));
        assert!(m.totals()[&web].responses.contains_key(&Some(y)));
        m.forget_departed(&with(&[x]), left + KEEP_DEPARTED);
        let t = m.totals();
        assert!(!t[&web].responses.contains_key(&Some(y)));
        assert_eq!(t[&web].requests(), 2);
        // An answer y gives afterwards (a request that was in flight) counts anew.
        b.answered(&web, Some(y), 200, ms, None);
        assert_eq!(
            m.totals()[&web].responses[&Some(y)].classes,
            [0, 1, 0, 0, 0]
        );
    }

    /// The loop a proxy runs: it reads the upstreams in force and forgets a backend the
    /// upstream no longer has once [`KEEP_DEPARTED`] is up, and not before.
    #[tokio::test(start_paused = true)]
    async fn the_loop_forgets_a_backend_its_upstream_no_longer_has() {
        let [x, y]: [SocketAddr; 2] =
            ["127.0.0.1:9001", "127.0.0.1:9002"].map(|a| a.parse().unwrap());
        let settings = crate::UpstreamSettings::new(
            "web",
            balance::Algorithm::RoundRobin,
            vec![crate::BackendSettings::new(x)],
        );
        let web = Arc::new(Upstream::new(settings));
        let m = Arc::new(Metrics::default());
        let w = m.worker();
        let ms = Duration::from_millis(1);
        w.answered(web.shared_name(), Some(x), 200, ms, None);
        w.answered(web.shared_name(), Some(y), 200, ms, None);
        let (_upstreams, told) = watch::channel(vec![web]);
        let (stop, stopped) = watch::channel(false);
        let looping = tokio::spawn(forget_departed(Arc::clone(&m), told, stopped));
        let name: Arc<str> = Arc::from("web");
        tokio::time::sleep(KEEP_DEPARTED - FORGET_EVERY).await;
        assert!(
            m.totals()[&name].responses.contains_key(&Some(y)),
            "kept for now"
        );
        tokio::time::sleep(3 * FORGET_EVERY).await;
        let t = m.totals();
        assert!(
            !t[&name].responses.contains_key(&Some(y)),
            "{:?}",
            t[&name].responses
        );
        assert!(t[&name].responses.contains_key(&Some(x)));
        stop.send_replace(true);
        looping.await.unwrap();
    }

    #[test]
    fn workers_are_summed_by_upstream_backend_and_class() {
        let m = Metrics::default();
        let (a, b) = (m.worker(), m.worker());
        let web: Arc<str> = Arc::from("web");
        let x: SocketAddr = "127.0.0.1:9001".parse().unwrap();
        a.answered(&web, Some(x), 200, Duration::from_millis(3), None);
        b.answered(&web, Some(x), 204, Duration::from_millis(30), None);
        b.answered(&web, None, 502, Duration::from_secs(20), None);
        a.failed(&web, x, Fault::ConnectFailed);
        b.failed(&web, x, Fault::ConnectFailed);
        a.retried(&web, 2);
        let t = &m.totals()[&web];
        assert_eq!(t.responses[&Some(x)].classes, [0, 2, 0, 0, 0]);
        assert_eq!(t.responses[&None].classes, [0, 0, 0, 0, 1]);
        // By backend too: x's two, fulcrum's own one.
        assert_eq!(t.responses[&Some(x)].durations.count, 2);
        assert_eq!(t.responses[&None].durations.cumulative()[10], (10.0, 0));
        assert_eq!(t.failures[&x][1], 2);
        assert_eq!(t.retries, 2);
        assert_eq!(t.requests(), 3);
        assert_eq!(t.durations().count, 3);
        // 3 ms in the first bucket, 30 ms in the fourth (≤ 50 ms), 20 s above them all.
        let c = t.durations().cumulative();
        assert_eq!(c[0], (0.005, 1));
        assert_eq!(c[3], (0.05, 2));
        assert_eq!(c[10], (10.0, 2));
        assert!((t.durations().sum_seconds - 20.033).abs() < 1e-9);
    }
}
