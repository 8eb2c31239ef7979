//! `GET /metrics`: the Prometheus text exposition (format 0.0.4), built at each scrape from
//! what the upstreams and the workers' counts hold, and written by the `prometheus` crate's
//! text encoder.
//!
//! Names follow Prometheus' conventions: a `fulcrum_` prefix, base units (seconds), `_total`
//! on counters. `backend=""` on `fulcrum_requests_total` counts the answers fulcrum gave
//! itself (a 502 after every backend failed, a 400 for a bad request).

use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use prometheus::{Encoder, TextEncoder};

use proxy::AdminState;
use proxy::metrics::{CODE_CLASSES, FAULTS, reason};

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
    // Encoding into memory fails only on a malformed family (a bug): then the scrape gets
    // what was written, which the scraper rejects as a whole, and the proxy goes on.
    if let Err(e) = TextEncoder::new().encode(&families(view), &mut text) {
        tracing::error!(error = %e, "cannot encode the metrics");
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// Every metric family, in a fixed order.
pub fn families(view: &View) -> Vec<MetricFamily> {
    let totals = view.proxy.metrics().totals();
    let upstreams = view.proxy.upstreams();
    let mut requests = Vec::new();
    let mut failures = Vec::new();
    let mut retries = Vec::new();
    let mut queue_rejected = Vec::new();
    let mut queued = Vec::new();
    let mut durations = Vec::new();
    for u in &upstreams {
        let name = u.name().to_owned();
        let counts = totals.get(u.name()).cloned().unwrap_or_default();
        let mut answered: Vec<_> = counts.responses.iter().collect();
        answered.sort_by_key(|(b, _)| **b);
        for (backend, classes) in answered {
            for (class, &n) in CODE_CLASSES.iter().zip(classes) {
                if n > 0 {
                    let backend = backend.map(|b| b.to_string()).unwrap_or_default();
                    let l = vec![
                        ("upstream", name.clone()),
                        ("backend", backend),
                        ("code", (*class).to_owned()),
                    ];
                    requests.push((l, n));
                }
            }
        }
        let mut failed: Vec<_> = counts.failures.iter().collect();
        failed.sort_by_key(|(b, _)| **b);
        for (backend, reasons) in failed {
            for (&fault, &n) in FAULTS.iter().zip(reasons) {
                if n > 0 {
                    let l = vec![
                        ("upstream", name.clone()),
                        ("backend", backend.to_string()),
                        ("reason", reason(fault).to_owned()),
                    ];
                    failures.push((l, n));
                }
            }
        }
        retries.push((vec![("upstream", name.clone())], counts.retries));
        for (why, n) in [
            ("full", counts.queue_full),
            ("timeout", counts.queue_timeouts),
        ] {
            if n > 0 {
                let l = vec![("upstream", name.clone()), ("reason", why.to_owned())];
                queue_rejected.push((l, n));
            }
        }
        queued.push((vec![("upstream", name.clone())], u.queued() as f64));

        let d = &counts.durations;
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
        let mut m = Metric::from_label(labels(vec![("upstream", name)]));
        m.set_histogram(h);
        durations.push(m);
    }

    let mut in_flight = Vec::new();
    let mut weight = Vec::new();
    let mut configured = Vec::new();
    let mut up = Vec::new();
    let mut state = Vec::new();
    let mut report_age = Vec::new();
    let mut connections = Vec::new();
    for u in &upstreams {
        for b in u.snapshot() {
            let l = || {
                vec![
                    ("upstream", u.name().to_owned()),
                    ("backend", b.addr.to_string()),
                ]
            };
            in_flight.push((l(), f64::from(b.in_flight)));
            weight.push((l(), f64::from(b.weight)));
            configured.push((l(), f64::from(b.static_weight)));
            up.push((l(), if b.available { 1.0 } else { 0.0 }));
            for s in [AdminState::Up, AdminState::Drain, AdminState::Disabled] {
                let mut with = l();
                with.push(("state", s.name().to_owned()));
                state.push((with, if b.state == s { 1.0 } else { 0.0 }));
            }
            if let Some((_, age)) = b.report {
                report_age.push((l(), age.as_secs_f64()));
            }
            let busy = b.connections_open.saturating_sub(b.connections_idle);
            for (kind, n) in [("busy", busy), ("idle", b.connections_idle)] {
                let mut with = l();
                with.push(("state", kind.to_owned()));
                connections.push((with, n as f64));
            }
        }
    }
    let clients = view
        .proxy
        .client_connections()
        .into_iter()
        .map(|(addr, n)| (vec![("listen", addr.to_string())], n as f64))
        .collect();

    vec![
        counters(
            "fulcrum_requests_total",
            "Requests answered, by upstream, the backend that answered (empty: fulcrum's own answer) and status class.",
            requests,
        ),
        family(
            "fulcrum_request_duration_seconds",
            "Time from a request's head to the end of its answer.",
            MetricType::HISTOGRAM,
            durations,
        ),
        counters(
            "fulcrum_upstream_failures_total",
            "Failed attempts on a backend, by reason (a kept-alive connection's race is a retry, not a failure).",
            failures,
        ),
        counters(
            "fulcrum_upstream_retries_total",
            "Attempts after a request's first: on the next backend, or on a fresh connection.",
            retries,
        ),
        counters(
            "fulcrum_upstream_queue_rejected_total",
            "Requests answered 503 because every backend was at its max_conns: the queue was full (or off), or they waited queue_timeout in it.",
            queue_rejected,
        ),
        gauges(
            "fulcrum_upstream_queued",
            "Requests waiting for a backend below its max_conns.",
            queued,
        ),
        gauges(
            "fulcrum_backend_in_flight",
            "Requests sent to the backend and not yet answered.",
            in_flight,
        ),
        gauges(
            "fulcrum_backend_weight",
            "The weight the algorithm balances by now (a weight model's or slow start's).",
            weight,
        ),
        gauges(
            "fulcrum_backend_configured_weight",
            "The weight configured, or last set through the admin API.",
            configured,
        ),
        gauges(
            "fulcrum_backend_up",
            "1 if the backend may be chosen now (up, healthy, not failed), else 0.",
            up,
        ),
        gauges(
            "fulcrum_backend_state",
            "The operator's state of the backend: 1 for the one it is in.",
            state,
        ),
        gauges(
            "fulcrum_backend_load_report_age_seconds",
            "How long ago the backend's latest load report came.",
            report_age,
        ),
        gauges(
            "fulcrum_upstream_connections",
            "Connections open to the backend over every worker, busy or idle.",
            connections,
        ),
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
    .into_iter()
    // An empty family is not written at all (its HELP alone would be a lint error).
    .filter(|f| !f.get_metric().is_empty())
    .collect()
}
