//! `GET /metrics`: the Prometheus text exposition (format 0.0.4), built at each scrape from
//! what the upstreams and the workers' counts hold, and written by the `prometheus` crate's
//! text encoder.
//!
//! Names follow Prometheus' conventions: a `fulcrum_` prefix, base units (seconds), `_total`
//! on counters. `backend=""` on `fulcrum_requests_total` and `fulcrum_request_duration_seconds`
//! counts the answers fulcrum gave itself (a 502 after every backend failed, a 400 for a bad request). Beside fulcrum's own:
//! the standard `process_*` families (the crate's process collector), `fulcrum_build_info`,
//! and how the last reload went under Prometheus' own names for it.
//!
//! Every family is written from the start, one without a series yet as its HELP and TYPE
//! alone, so that an alert or a dashboard has its metric before the first event; the table of
//! docs/operations.md lists each, and a test checks the two against each other.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use prometheus::{Encoder, TextEncoder};

use proxy::metrics::{CODE_CLASSES, Durations, FAULTS, UpstreamCounts, reason};
use proxy::{AdminState, BackendSnapshot, Upstream};

use crate::View;

/// The exposition format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

type Labels = Vec<(&'static str, String)>;

fn labels(pairs: Labels) -> Vec<LabelPair> {
    pairs
        .into_iter()
        .map(|(name, value)| {
            let mut l = LabelPair::default();
            l.set_name(name.to_owned());
            l.set_value(value);
            l
        })
        .collect()
}

fn family(name: &str, help: &str, kind: MetricType, metrics: Vec<Metric>) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_owned());
    f.set_help(help.to_owned());
    f.set_field_type(kind);
    f.set_metric(metrics);
    f
}

fn counters(name: &str, help: &str, series: Vec<(Labels, u64)>) -> MetricFamily {
    let metrics = series
        .into_iter()
        .map(|(l, v)| {
            let mut c = Counter::default();
            c.set_value(v as f64);
            let mut m = Metric::from_label(labels(l));
            m.set_counter(c);
            m
        })
        .collect();
    family(name, help, MetricType::COUNTER, metrics)
}

fn gauges(name: &str, help: &str, series: Vec<(Labels, f64)>) -> MetricFamily {
    let metrics = series
        .into_iter()
        .map(|(l, v)| {
            let mut g = Gauge::default();
            g.set_value(v);
            let mut m = Metric::from_label(labels(l));
            m.set_gauge(g);
            m
        })
        .collect();
    family(name, help, MetricType::GAUGE, metrics)
}

/// The text of one scrape.
pub fn exposition(view: &View) -> String {
    let mut text = Vec::new();
    for f in families(view) {
        if f.get_metric().is_empty() {
            // A family without a series yet: its HELP and TYPE alone (the encoder refuses an
            // empty family), so that every family is known from the start.
            text.extend_from_slice(metadata(&f).as_bytes());
            continue;
        }
        // Encoding into memory fails only on a malformed family (a bug): then the scrape
        // gets what was written, which the scraper rejects as a whole, and the proxy goes on.
        if let Err(e) = TextEncoder::new().encode(std::slice::from_ref(&f), &mut text) {
            tracing::error!(error = %e, "cannot encode the metrics");
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// The `# HELP` and `# TYPE` lines of a family, as the text format writes them.
fn metadata(f: &MetricFamily) -> String {
    let kind = match f.get_field_type() {
        MetricType::COUNTER => "counter",
        MetricType::GAUGE => "gauge",
        MetricType::HISTOGRAM => "histogram",
        MetricType::SUMMARY => "summary",
        MetricType::UNTYPED => "untyped",
    };
    // The format escapes a backslash and a line feed in HELP.
    let help = f.help().replace('\\', "\\\\").replace('\n', "\\n");
    format!("# HELP {0} {help}\n# TYPE {0} {kind}\n", f.name())
}

/// Every metric family, in a fixed order: what the workers counted per upstream, then each
/// backend's state, then the client side, the process and the configuration's reloads.
/// Every family is there from the start, a family without a series yet with its HELP and
/// TYPE alone (those of `[cluster]` only with a cluster).
pub fn families(view: &View) -> Vec<MetricFamily> {
    let totals = view.proxy.metrics().totals();
    let upstreams = view.proxy.upstreams();
    let mut all = upstream_families(&totals, &upstreams);
    all.extend(backend_families(&upstreams));
    all.extend(discovery_families(&upstreams));
    all.push(route_family(view));
    all.push(route_durations_family(view));
    all.push(limited_family(view));
    all.extend(client_families(view));
    all.extend(cluster_families(view));
    all.extend(state_file_families(view));
    all.extend(process_families());
    all.push(build_info());
    all.extend(reload_families(&view.reloads));
    all
}

/// The standard process metrics (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
/// `process_open_fds`, ...), as every Prometheus client library exports them, read from
/// `/proc/self` by the `prometheus` crate's collector (Linux only, as /proc is).
#[cfg(target_os = "linux")]
fn process_families() -> Vec<MetricFamily> {
    use prometheus::core::Collector as _;
    static PROCESS: std::sync::OnceLock<prometheus::process_collector::ProcessCollector> =
        std::sync::OnceLock::new();
    PROCESS
        .get_or_init(prometheus::process_collector::ProcessCollector::for_self)
        .collect()
}

/// No /proc: no process metrics.
#[cfg(not(target_os = "linux"))]
fn process_families() -> Vec<MetricFamily> {
    Vec::new()
}

/// `fulcrum_build_info{version, profile} 1`: which build runs (Prometheus' `*_build_info`
/// convention, joined onto other series by `on() group_left`).
fn build_info() -> MetricFamily {
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    gauges(
        "fulcrum_build_info",
        "Always 1: the version of fulcrum running, and whether it is a release or a debug build.",
        vec![(
            vec![
                ("version", env!("CARGO_PKG_VERSION").to_owned()),
                ("profile", profile.to_owned()),
            ],
            1.0,
        )],
    )
}

/// Whether the last reload took, and when one last did: Prometheus' own
/// `prometheus_config_last_reload_*` pair, under fulcrum's prefix.
fn reload_families(reloads: &crate::Reloads) -> [MetricFamily; 2] {
    let (successful, at) = reloads.last();
    [
        gauges(
            "fulcrum_config_last_reload_successful",
            "1 if the last reload of the configuration (SIGHUP or POST /api/reload) was applied, 0 if it was refused; 1 before any.",
            vec![(Labels::new(), if successful { 1.0 } else { 0.0 })],
        ),
        gauges(
            "fulcrum_config_last_reload_success_timestamp_seconds",
            "Unix time of the last configuration applied: the start, or the last reload that was.",
            vec![(Labels::new(), at)],
        ),
    ]
}

/// The series of the families the workers' counts make, gathered upstream by upstream.
#[derive(Default)]
struct UpstreamSeries {
    requests: Vec<(Labels, u64)>,
    failures: Vec<(Labels, u64)>,
    retries: Vec<(Labels, u64)>,
    budget_exhausted: Vec<(Labels, u64)>,
    queue_rejected: Vec<(Labels, u64)>,
    queued: Vec<(Labels, f64)>,
    durations: Vec<Metric>,
}

/// Answers, durations, failed attempts, retries and the queue, per upstream: the workers'
/// counts summed, and each upstream's queue now.
fn upstream_families(
    totals: &HashMap<Arc<str>, UpstreamCounts>,
    upstreams: &[Arc<Upstream>],
) -> Vec<MetricFamily> {
    let mut s = UpstreamSeries::default();
    for u in upstreams {
        let name = u.name().to_owned();
        let counts = totals.get(u.name()).cloned().unwrap_or_default();
        s.requests.extend(answers(&name, &counts));
        let members: HashSet<SocketAddr> = u.snapshot().iter().map(|b| b.addr).collect();
        s.failures.extend(failed_attempts(&name, &counts, &members));
        s.retries
            .push((vec![("upstream", name.clone())], counts.retries));
        s.budget_exhausted
            .push((vec![("upstream", name.clone())], counts.budget_exhausted));
        for (why, n) in [
            ("full", counts.queue_full),
            ("timeout", counts.queue_timeouts),
        ] {
            if n > 0 {
                let l = vec![("upstream", name.clone()), ("reason", why.to_owned())];
                s.queue_rejected.push((l, n));
            }
        }
        s.queued
            .push((vec![("upstream", name.clone())], u.queued() as f64));
        s.durations.extend(durations(&name, &counts, &members));
    }
    vec![
        counters(
            "fulcrum_requests_total",
            "Requests answered, by upstream, the backend that answered (empty: fulcrum's own answer) and status class.",
            s.requests,
        ),
        family(
            "fulcrum_request_duration_seconds",
            "Time from a request's head to the end of its answer, by upstream and the backend that answered (empty: fulcrum's own answer).",
            MetricType::HISTOGRAM,
            s.durations,
        ),
        counters(
            "fulcrum_upstream_failures_total",
            "Failed attempts on a backend, by reason (a kept-alive connection's race is a retry, not a failure).",
            s.failures,
        ),
        counters(
            "fulcrum_upstream_retries_total",
            "Attempts after a request's first: on the next backend, or on a fresh connection.",
            s.retries,
        ),
        counters(
            "fulcrum_upstream_retries_budget_exhausted_total",
            "Retries not made because the upstream's retry budget was spent (the client got the failed attempt's answer).",
            s.budget_exhausted,
        ),
        counters(
            "fulcrum_upstream_queue_rejected_total",
            "Requests answered 503 because every backend was at its max_conns: the queue was full (or off), or they waited queue_timeout in it.",
            s.queue_rejected,
        ),
        gauges(
            "fulcrum_upstream_queued",
            "Requests waiting for a backend below its max_conns.",
            s.queued,
        ),
    ]
}

/// An upstream's answers by backend (none: fulcrum's own) and status class, in backend order;
/// classes never seen are left out.
fn answers(upstream: &str, counts: &UpstreamCounts) -> Vec<(Labels, u64)> {
    let mut answered: Vec<_> = counts.responses.iter().collect();
    answered.sort_by_key(|(b, _)| **b);
    let mut series = Vec::new();
    for (backend, answers) in answered {
        for (class, &n) in CODE_CLASSES.iter().zip(&answers.classes) {
            if n > 0 {
                let backend = backend.map(|b| b.to_string()).unwrap_or_default();
                let l = vec![
                    ("upstream", upstream.to_owned()),
                    ("backend", backend),
                    ("code", (*class).to_owned()),
                ];
                series.push((l, n));
            }
        }
    }
    series
}

/// An upstream's failed attempts by backend and reason, in backend order: every reason of
/// every backend it has now, 0 until one fails (so that `rate()` and `increase()` alerts have
/// a series from the start, as Prometheus's practice asks), and the reasons seen on backends
/// it no longer has (for [`proxy::metrics::KEEP_DEPARTED`] after they left).
fn failed_attempts(
    upstream: &str,
    counts: &UpstreamCounts,
    members: &HashSet<SocketAddr>,
) -> Vec<(Labels, u64)> {
    let mut backends: Vec<SocketAddr> = counts.failures.keys().copied().collect();
    backends.extend(members.iter().copied());
    backends.sort();
    backends.dedup();
    let mut series = Vec::new();
    for backend in backends {
        let member = members.contains(&backend);
        let reasons = counts.failures.get(&backend).copied().unwrap_or_default();
        for (&fault, &n) in FAULTS.iter().zip(&reasons) {
            if n > 0 || member {
                let l = vec![
                    ("upstream", upstream.to_owned()),
                    ("backend", backend.to_string()),
                    ("reason", reason(fault).to_owned()),
                ];
                series.push((l, n));
            }
        }
    }
    series
}

/// An upstream's request durations by backend, in backend order: fulcrum's own answers
/// (`backend=""`) and every backend it has now from the start (empty until they answer, so
/// that the series exist before the first request), and the backends it no longer has that
/// answered (for [`proxy::metrics::KEEP_DEPARTED`] after they left).
fn durations(
    upstream: &str,
    counts: &UpstreamCounts,
    members: &HashSet<SocketAddr>,
) -> Vec<Metric> {
    let mut backends: Vec<Option<SocketAddr>> = counts.responses.keys().copied().collect();
    backends.push(None);
    backends.extend(members.iter().map(|&a| Some(a)));
    backends.sort();
    backends.dedup();
    let none = Durations::default();
    backends
        .into_iter()
        .map(|b| {
            let d = counts.responses.get(&b).map_or(&none, |a| &a.durations);
            let backend = b.map(|a| a.to_string()).unwrap_or_default();
            duration_histogram(
                vec![("upstream", upstream.to_owned()), ("backend", backend)],
                d,
            )
        })
        .collect()
}

/// Request durations as a Prometheus histogram (cumulative buckets) with `labels`.
fn duration_histogram(l: Labels, d: &Durations) -> Metric {
    let mut h = Histogram::default();
    h.set_sample_count(d.count);
    h.set_sample_sum(d.sum_seconds);
    h.set_bucket(
        d.cumulative()
            .into_iter()
            .map(|(bound, n)| {
                let mut b = Bucket::default();
                b.set_upper_bound(bound);
                b.set_cumulative_count(n);
                b
            })
            .collect(),
    );
    let mut m = Metric::from_label(labels(l));
    m.set_histogram(h);
    m
}

/// The series of the families each backend's snapshot makes, gathered backend by backend.
#[derive(Default)]
struct BackendSeries {
    in_flight: Vec<(Labels, f64)>,
    weight: Vec<(Labels, f64)>,
    configured: Vec<(Labels, f64)>,
    up: Vec<(Labels, f64)>,
    state: Vec<(Labels, f64)>,
    report_age: Vec<(Labels, f64)>,
    connections: Vec<(Labels, f64)>,
    probes: Vec<(Labels, u64)>,
    probe_failures: Vec<(Labels, u64)>,
    report_stale: Vec<(Labels, f64)>,
    poll_failures: Vec<(Labels, u64)>,
}

impl BackendSeries {
    /// A polled backend's load-source series: its report's staleness and its failed polls.
    fn add_polls(&mut self, upstream: &str, b: &BackendSnapshot) {
        let l = || {
            vec![
                ("upstream", upstream.to_owned()),
                ("backend", b.addr.to_string()),
            ]
        };
        self.report_stale
            .push((l(), if b.polls.stale { 1.0 } else { 0.0 }));
        self.poll_failures.push((l(), b.polls.failed));
    }

    /// One backend's point in each family (its report's age only when it has one; its probes
    /// when its upstream probes, `probing`, or once did).
    fn add(&mut self, upstream: &str, b: &BackendSnapshot, probing: bool) {
        let l = || {
            vec![
                ("upstream", upstream.to_owned()),
                ("backend", b.addr.to_string()),
            ]
        };
        self.in_flight.push((l(), f64::from(b.in_flight)));
        self.weight.push((l(), f64::from(b.weight)));
        self.configured.push((l(), f64::from(b.static_weight)));
        self.up.push((l(), if b.available { 1.0 } else { 0.0 }));
        for s in [AdminState::Up, AdminState::Drain, AdminState::Disabled] {
            let mut with = l();
            with.push(("state", s.name().to_owned()));
            self.state
                .push((with, if b.state == s { 1.0 } else { 0.0 }));
        }
        if let Some((_, age)) = b.report {
            self.report_age.push((l(), age.as_secs_f64()));
        }
        if probing || b.probes.sent > 0 {
            self.probes.push((l(), b.probes.sent));
            self.probe_failures.push((l(), b.probes.failed));
        }
        let busy = b.connections_open.saturating_sub(b.connections_idle);
        for (kind, n) in [("busy", busy), ("idle", b.connections_idle)] {
            let mut with = l();
            with.push(("state", kind.to_owned()));
            self.connections.push((with, n as f64));
        }
    }
}

/// Each backend's state now: in flight, weights, up, the operator's state, its load
/// report's age, its connections.
fn backend_families(upstreams: &[Arc<Upstream>]) -> Vec<MetricFamily> {
    let mut s = BackendSeries::default();
    for u in upstreams {
        let probing = u.probes_backends();
        // The backends whose load source is polled (an agent, a node_exporter, a memcached):
        // their staleness and failed polls are shown from the start.
        let settings = u.settings();
        let polled: HashSet<SocketAddr> = settings
            .backends
            .iter()
            .filter(|b| b.load_source.is_some_and(|l| l.gives_load_reports()))
            .map(|b| b.addr)
            .collect();
        for b in u.snapshot() {
            s.add(u.name(), &b, probing);
            if polled.contains(&b.addr) {
                s.add_polls(u.name(), &b);
            }
        }
    }
    vec![
        gauges(
            "fulcrum_backend_in_flight",
            "Requests sent to the backend and not yet answered.",
            s.in_flight,
        ),
        gauges(
            "fulcrum_backend_weight",
            "The weight the algorithm balances by now (a weight model's or slow start's).",
            s.weight,
        ),
        gauges(
            "fulcrum_backend_configured_weight",
            "The weight configured, or last set through the admin API.",
            s.configured,
        ),
        gauges(
            "fulcrum_backend_up",
            "1 if the backend may be chosen now (up, healthy, not failed), else 0.",
            s.up,
        ),
        gauges(
            "fulcrum_backend_state",
            "The operator's state of the backend: 1 for the one it is in.",
            s.state,
        ),
        gauges(
            "fulcrum_backend_load_report_age_seconds",
            "How long ago the backend's latest load report came.",
            s.report_age,
        ),
        gauges(
            "fulcrum_backend_load_report_stale",
            "1 while the backend's load source has missed stale_after polls in a row (it is weighted as the average of the fresh reports), else 0.",
            s.report_stale,
        ),
        counters(
            "fulcrum_backend_load_poll_failures_total",
            "Polls of the backend's load source (agent, node_exporter, memcached) that failed.",
            s.poll_failures,
        ),
        gauges(
            "fulcrum_upstream_connections",
            "Connections open to the backend over every worker, busy or idle.",
            s.connections,
        ),
        counters(
            "fulcrum_backend_probes_total",
            "Probes of the backend prequal asked for (GET /probe).",
            s.probes,
        ),
        counters(
            "fulcrum_backend_probe_failures_total",
            "Probes of the backend that brought no usable answer (not sent, timed out, refused, or a bad answer).",
            s.probe_failures,
        ),
    ]
}

/// Each DNS discovery source (per upstream, DNS name, record type and port), from the moment it is
/// configured: the age of its last good answer (since it was configured, while it has had
/// none; it grows while the DNS server is down), the backends that answer gave, and its failed
/// lookups.
fn discovery_families(upstreams: &[Arc<Upstream>]) -> Vec<MetricFamily> {
    let mut age = Vec::new();
    let mut backends = Vec::new();
    let mut failures = Vec::new();
    for u in upstreams {
        for d in u.discovery_status() {
            let l = || -> Labels {
                vec![
                    ("upstream", u.name().to_owned()),
                    ("name", d.query.name.clone()),
                    ("type", d.query.kind.name().to_owned()),
                    // Two sources may share a name and differ by port (`app:8080` and
                    // `app:8081`): without it their series would collide. Empty for SRV.
                    (
                        "port",
                        d.query.port.map_or_else(String::new, |p| p.to_string()),
                    ),
                ]
            };
            age.push((l(), d.age.as_secs_f64()));
            backends.push((l(), d.backends as f64));
            failures.push((l(), d.failures));
        }
    }
    vec![
        gauges(
            "fulcrum_discovery_answer_age_seconds",
            "Seconds since the source's last good DNS answer (since it was configured, if none yet).",
            age,
        ),
        gauges(
            "fulcrum_discovery_backends",
            "Backends the source's last good DNS answer gave.",
            backends,
        ),
        counters(
            "fulcrum_discovery_lookup_failures_total",
            "DNS lookups of the source that failed (timeout, SERVFAIL, refused, NXDOMAIN, empty answer).",
            failures,
        ),
    ]
}

/// The client side: connections being served per listener, and failed TLS handshakes.
/// Answers by listener, route and status class, on listeners with routes.
fn route_family(view: &View) -> MetricFamily {
    let mut totals: Vec<_> = view.proxy.metrics().route_totals().into_iter().collect();
    totals.sort();
    let mut series = Vec::new();
    for ((listener, route), classes) in totals {
        for (class, &n) in CODE_CLASSES.iter().zip(&classes) {
            if n > 0 {
                let l = vec![
                    ("listener", listener.to_string()),
                    ("route", route.to_string()),
                    ("code", (*class).to_owned()),
                ];
                series.push((l, n));
            }
        }
    }
    counters(
        "fulcrum_route_requests_total",
        "Requests answered, by the listener (as configured), the route that took them ([[listener.route]] name) and the status class.",
        series,
    )
}

/// How long the requests each named route sent to an upstream took, by listener and route:
/// every route configured since start, from the start.
fn route_durations_family(view: &View) -> MetricFamily {
    let mut totals: Vec<_> = view.proxy.metrics().route_durations().into_iter().collect();
    totals.sort_by(|a, b| a.0.cmp(&b.0));
    let series = totals
        .into_iter()
        .map(|((listener, route), d)| {
            duration_histogram(
                vec![
                    ("listener", listener.to_string()),
                    ("route", route.to_string()),
                ],
                &d,
            )
        })
        .collect();
    family(
        "fulcrum_route_request_duration_seconds",
        "Time from a request's head to the end of its answer, for the requests a route ([[listener.route]] name) sent to an upstream, by the listener (as configured) and the route.",
        MetricType::HISTOGRAM,
        series,
    )
}

/// Requests not let through, by listener, route (empty for a listener's requests no route
/// took) and reason: `limit_req`, `limit_conn`, `access`.
fn limited_family(view: &View) -> MetricFamily {
    let mut totals: Vec<_> = view.proxy.metrics().limited_totals().into_iter().collect();
    totals.sort();
    let mut series = Vec::new();
    for ((listener, route), reasons) in totals {
        for (why, &n) in proxy::admission::Reason::ALL.iter().zip(&reasons) {
            if n > 0 {
                let l = vec![
                    ("listener", listener.to_string()),
                    ("route", route.to_string()),
                    ("reason", why.name().to_owned()),
                ];
                series.push((l, n));
            }
        }
    }
    counters(
        "fulcrum_requests_limited_total",
        "Requests refused before any backend, by the listener (as configured), the route that took them (empty: the listener's own) and the reason: limit_req, limit_conn or access (allow / deny).",
        series,
    )
}

fn client_families(view: &View) -> [MetricFamily; 2] {
    let clients = view
        .proxy
        .client_connections()
        .into_iter()
        .map(|(addr, n)| (vec![("listen", addr.to_string())], n as f64))
        .collect();
    [
        gauges(
            "fulcrum_client_connections",
            "Client connections being served, by listener.",
            clients,
        ),
        counters(
            "fulcrum_tls_handshake_failures_total",
            "Client TLS handshakes that failed (not TLS, no common protocol or cipher, an alert) or did not finish within client_header_timeout.",
            vec![(Vec::new(), view.proxy.metrics().tls_handshake_failures())],
        ),
    ]
}

/// The state file's writes (`state_file`): written from the start whenever there is one, so
/// that an alert on a failed write has its series before the first failure.
fn state_file_families(view: &View) -> Vec<MetricFamily> {
    let Some(w) = view.overrides.as_ref().and_then(|o| o.writes()) else {
        return Vec::new();
    };
    vec![
        gauges(
            "fulcrum_state_file_last_write_successful",
            "1 if the state file's last write succeeded (or none was needed yet), 0 if it failed: the admin-API changes in force would not survive a restart.",
            vec![(Labels::new(), if w.last_successful { 1.0 } else { 0.0 })],
        ),
        counters(
            "fulcrum_state_file_write_failures_total",
            "Writes of the state file that failed since the start.",
            vec![(Labels::new(), w.failures)],
        ),
    ]
}

/// The sync with the fleet's etcd (`[cluster]`): written from the start whenever a cluster is
/// configured, so that an alert on contact lost has its series before the first loss.
fn cluster_families(view: &View) -> Vec<MetricFamily> {
    let Some(read) = &view.cluster else {
        return Vec::new();
    };
    let c = (read.0)();
    let one = |value: f64| vec![(Labels::new(), value)];
    vec![
        gauges(
            "fulcrum_cluster_connected",
            "1 while etcd answers, 0 while this instance serves on its last known state.",
            one(if c.connected { 1.0 } else { 0.0 }),
        ),
        gauges(
            "fulcrum_cluster_last_contact_seconds",
            "Seconds since etcd last answered (since the start, before it ever did).",
            one(c.since_contact.as_secs_f64()),
        ),
        gauges(
            "fulcrum_cluster_writes_pending",
            "Admin-API changes of this instance not yet written to etcd.",
            one(c.pending as f64),
        ),
        gauges(
            "fulcrum_cluster_revision",
            "The last etcd revision of the fleet's state this instance has applied.",
            one(c.revision as f64),
        ),
    ]
}
