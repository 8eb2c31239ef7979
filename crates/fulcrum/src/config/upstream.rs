//! `[[upstream]]`: a pool of backends, how requests are spread over it, and how an attempt is
//! timed and retried (nginx's `upstream` block with the `proxy_*` directives that apply to
//! it).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use balance::Algorithm;
use toml::Spanned;
use toml::de::DeValue;

use super::algorithm::{self, Balancing};
use super::backend::{self, Backend};
use super::duration::Zero;
use super::health;
use super::report::Report;
use super::table::{Section, Table};

pub(super) const SECTION: Section = Section {
    title: "[[upstream]]",
    keys: &[
        "name",
        "algorithm",
        "hash_key",
        "consistent",
        "octets",
        "table_size",
        "balance_factor",
        "window",
        "smoothing",
        "penalty",
        "high_load",
        "blackout_period",
        "weight_expiration_period",
        "error_utilization_penalty",
        "low_load",
        "slow_start",
        "pool_size",
        "reuse",
        "quantile",
        "probe_rate",
        "probe_max_age",
        "probe_timeout",
        "max_fails",
        "fail_timeout",
        "retries",
        "retry_non_idempotent",
        "next_upstream",
        "failure_statuses",
        "retry_budget",
        "connect_timeout",
        "read_timeout",
        "response_timeout",
        "queue",
        "queue_timeout",
        "keepalive",
        "keepalive_timeout",
        "poll_interval",
        "poll_timeout",
        "stale_after",
        "seed",
        "health_check",
        "tls",
        "tls_ca",
        "tls_server_name",
        "backend_protocol",
        "h2_max_connections",
        "h2_max_streams_per_client",
        "sticky",
        "backend",
        "discovery",
        "resolvers",
        "ipv6",
    ],
    not_yet: &[],
};

/// The most further backends one request may try. Every retry is another backend's time; a
/// hundred is more than any pool needs, and `retries` left out already means "each backend
/// once".
const MAX_RETRIES: i64 = 100;

/// The most requests that may wait for room on a full upstream: each holds its client's
/// connection and buffers while it waits, so a queue longer than a process's descriptors
/// would only move the failure.
const MAX_QUEUE: i64 = 1_000_000;

/// The most idle connections kept per backend and worker: each holds a descriptor, and a
/// process rarely may hold more than a million (Linux's default `fs.nr_open` is 1048576).
const MAX_KEEPALIVE: i64 = 1_000_000;

/// The most HTTP/2 connections a worker may open to one backend: each is a descriptor here
/// and a connection's buffers at the backend; a thousand connections of a hundred streams
/// each is far past what any backend serves at once from one worker.
const MAX_H2_CONNECTIONS: i64 = 1000;

/// The most backend streams one HTTP/2 client connection may hold on one backend: the
/// largest concurrent-stream limit HTTP/2 can express (RFC 9113 §6.5.2, 2^31 - 1).
const MAX_H2_STREAMS_PER_CLIENT: i64 = (1 << 31) - 1;

/// The most polls a report may be missed before it is stale: beyond this a dead reporter
/// would steer its backend for too long.
const MAX_STALE_AFTER: i64 = 100;

/// The largest total weight of an upstream balanced on nginx's ketama ring (`hash` with
/// `consistent = true`, and `bounded_load`). The ring has 160 points per unit of weight and
/// is built again whenever membership changes: 10000 units make 1.6 million points (about
/// 13 MB, built in tens of milliseconds), while a million-weight backend alone would need
/// 160 million (1.3 GB) before the proxy could start. The ring's own bound: past it, weights
/// set at runtime are scaled down to it.
const MAX_RING_WEIGHT: u64 = balance::ring::MAX_RING_WEIGHT;

/// A checked upstream.
#[derive(Debug)]
pub(super) struct Upstream {
    pub name: Spanned<String>,
    pub balancing: Balancing,
    /// `None` in this and the following: the default (see `settings`).
    pub max_fails: Option<u32>,
    pub fail_timeout: Option<Duration>,
    pub retries: Option<u32>,
    pub retry_non_idempotent: Option<bool>,
    pub next_upstream: Option<balance::NextUpstream>,
    /// Without `next_upstream`'s statuses, which `settings` adds.
    pub failure_statuses: Option<balance::FailureStatuses>,
    /// `Some(None)`: `retry_budget = "off"`.
    pub retry_budget: Option<Option<balance::RetryBudgetSettings>>,
    pub connect_timeout: Option<Duration>,
    pub read_timeout: Option<Duration>,
    pub response_timeout: Option<Duration>,
    pub queue: Option<usize>,
    pub queue_timeout: Option<Duration>,
    pub keepalive: Option<usize>,
    pub keepalive_timeout: Option<Duration>,
    pub poll_interval: Option<Duration>,
    pub poll_timeout: Option<Duration>,
    pub stale_after: Option<u32>,
    pub health_check: Option<proxy::HealthCheckSettings>,
    /// `tls = true`, with its CA and name, read and checked.
    pub tls: Option<std::sync::Arc<proxy::upstream_tls::BackendTls>>,
    /// `backend_protocol`, and where it is written (`None`: left out, HTTP/1.1).
    pub backend_protocol: Option<Spanned<proxy::BackendProtocol>>,
    /// `h2_max_connections` and `h2_max_streams_per_client` (only with `"h2"`).
    pub h2: H2Limits,
    /// `sticky`: sticky sessions by cookie.
    pub sticky: Option<proxy::StickySettings>,
    pub seed: Option<u64>,
    pub backends: Vec<Backend>,
    /// `[upstream.discovery]`, if any.
    pub discovery: Option<super::discovery::Discovery>,
    /// `resolvers`: the DNS servers of its host-name backends and the default of its
    /// discovery's (empty: the system's).
    pub resolvers: Vec<SocketAddr>,
    /// `ipv6`: whether its host-name backends and (by default) its discovery look for IPv6
    /// addresses (nginx's `resolver ... ipv6=`); true unless set false.
    pub ipv6: bool,
}

/// Reads one upstream and its backends; `None` when its name is missing or wrong (the rest
/// is still checked). Keys are read, and their problems found, in the same order as ever:
/// problems and warnings at one place keep the order they were found in.
pub(super) fn read(r: &mut Report<'_>, t: &Table<'_>) -> Option<Upstream> {
    let name = read_name(r, t);
    let balancing = algorithm::read(r, t, t.count("backend"));
    let attempts = Attempts::read(r, t);
    let waiting = Waiting::read(r, t);
    let seed = t.integer(r, "seed", 0..=i64::MAX, "");
    let polling = Polling::read(r, t);
    let health_check = t
        .section(r, "health_check", &health::SECTION)
        .and_then(|h| health::read(r, &h));
    let backend_protocol = backend_protocol(r, t);
    let h2 = H2Limits::read(r, t, backend_protocol.as_ref().map(|p| *p.get_ref()));
    let tls = super::tls::upstream(
        r,
        t,
        backend_protocol
            .as_ref()
            .map_or_else(Default::default, |p| *p.get_ref()),
    );
    let polling = polling.checked(r, t);
    let sticky = super::sticky::read(r, t);

    let shown = name.as_ref().map_or_else(
        || "this upstream".to_owned(),
        |n| format!("upstream \"{}\"", n.get_ref()),
    );
    let (discovery, resolvers) = read_discovery(r, t, &balancing);
    let ipv6 = t.flag(r, "ipv6").unwrap_or(true);
    let discovered = t.value("discovery").is_some();
    let backends = read_backends(r, t, &balancing, &shown, discovered);
    check_ring_weight(r, t, &balancing, &backends);
    check_health_checks_and_agents(r, t);
    check_queue_has_max_conns(r, t, &shown, &backends);
    let plain = tls.is_none()
        && backend_protocol
            .as_ref()
            .is_none_or(|p| *p.get_ref() == proxy::BackendProtocol::Http1);
    check_probes_are_plain_http(r, t, &balancing, plain, &backends);
    if balancing.algorithm == Algorithm::RoundRobin && backends.iter().any(|b| b.weight != 1) {
        r.warn(
            &t.span(),
            format!(
                "{shown}: round_robin ignores weights; use weighted_round_robin to honour them"
            ),
        );
    }

    let name = name?;
    Some(Upstream {
        name: Spanned::new(name.span(), name.get_ref().to_string()),
        balancing,
        max_fails: attempts.max_fails,
        fail_timeout: attempts.fail_timeout,
        retries: attempts.retries,
        retry_non_idempotent: attempts.retry_non_idempotent,
        next_upstream: attempts.next_upstream,
        failure_statuses: attempts.failure_statuses,
        retry_budget: attempts.retry_budget,
        connect_timeout: attempts.connect_timeout,
        read_timeout: attempts.read_timeout,
        response_timeout: attempts.response_timeout,
        queue: waiting.queue,
        queue_timeout: waiting.queue_timeout,
        keepalive: waiting.keepalive,
        keepalive_timeout: waiting.keepalive_timeout,
        poll_interval: polling.interval,
        poll_timeout: polling.timeout,
        stale_after: polling.stale_after,
        health_check,
        tls,
        backend_protocol,
        h2,
        sticky,
        seed,
        backends,
        discovery,
        resolvers,
        ipv6,
    })
}

/// `[upstream.discovery]` and `resolvers` (empty: the system's).
fn read_discovery(
    r: &mut Report<'_>,
    t: &Table<'_>,
    balancing: &Balancing,
) -> (Option<super::discovery::Discovery>, Vec<SocketAddr>) {
    let discovery = t
        .section(r, "discovery", &super::discovery::SECTION)
        .and_then(|d| super::discovery::read(r, &d, &balancing.chosen));
    let resolvers = if t.value("resolvers").is_some() {
        super::discovery::resolvers(r, t)
    } else {
        Vec::new()
    };
    (discovery, resolvers)
}

/// `name`: required, and not empty.
fn read_name<'a>(r: &mut Report<'_>, t: &Table<'a>) -> Option<Spanned<&'a str>> {
    let name = t.required_text(r, "name", "a name", "web");
    if let Some(n) = &name
        && n.get_ref().is_empty()
    {
        r.error(n.span(), &t.key("name"), "must not be empty");
    }
    name
}

/// How an attempt is timed, when a backend is blamed for it, and what is retried (`None`:
/// the default, see `settings`).
struct Attempts {
    max_fails: Option<u32>,
    fail_timeout: Option<Duration>,
    retries: Option<u32>,
    retry_non_idempotent: Option<bool>,
    next_upstream: Option<balance::NextUpstream>,
    failure_statuses: Option<balance::FailureStatuses>,
    retry_budget: Option<Option<balance::RetryBudgetSettings>>,
    connect_timeout: Option<Duration>,
    read_timeout: Option<Duration>,
    response_timeout: Option<Duration>,
}

impl Attempts {
    fn read(r: &mut Report<'_>, t: &Table<'_>) -> Attempts {
        Attempts {
            max_fails: backend::max_fails(r, t),
            fail_timeout: backend::fail_timeout(r, t),
            retries: t.integer(r, "retries", 0..=MAX_RETRIES, ""),
            retry_non_idempotent: t.flag(r, "retry_non_idempotent"),
            next_upstream: next_upstream(r, t),
            failure_statuses: failure_statuses(r, t),
            retry_budget: retry_budget(r, t),
            connect_timeout: t.duration(
                r,
                "connect_timeout",
                Zero::Refused("every connection attempt would time out before it starts"),
            ),
            read_timeout: t.duration(
                r,
                "read_timeout",
                Zero::Refused("no backend could ever answer in time"),
            ),
            response_timeout: t.duration(
                r,
                "response_timeout",
                Zero::Refused("no backend could ever answer in time; leave it out for no limit"),
            ),
        }
    }
}

/// `next_upstream`: nginx's `proxy_next_upstream` conditions, `off` alone.
fn next_upstream(r: &mut Report<'_>, t: &Table<'_>) -> Option<balance::NextUpstream> {
    t.value("next_upstream")?;
    let names = t.strings(
        r,
        "next_upstream",
        ("a condition", "conditions"),
        "http_503",
    );
    let known = || {
        let mut all: Vec<&str> = balance::NextUpstream::NAMES
            .iter()
            .map(|(n, _)| *n)
            .collect();
        all.push("off");
        all.join(", ")
    };
    let mut set = balance::NextUpstream::OFF;
    for (key, name) in &names {
        match balance::NextUpstream::named(name.get_ref()) {
            Some(_) if *name.get_ref() == "off" && names.len() > 1 => r.error(
                name.span(),
                key,
                "`off` turns every condition off: it cannot be listed with others",
            ),
            Some(flag) => set = set.with(flag),
            None => r.error(
                name.span(),
                key,
                format!(
                    "\"{}\" is not a condition; nginx's proxy_next_upstream takes {}",
                    name.get_ref(),
                    known()
                ),
            ),
        }
    }
    Some(set)
}

/// `failure_statuses`: the answers that count as failures for what the load-aware algorithms
/// learn (`balance::statuses`), each entry a status (`"503"`) or a range (`"500-599"`); `[]`
/// for none. Without it, `balance::FailureStatuses::DEFAULT`.
fn failure_statuses(r: &mut Report<'_>, t: &Table<'_>) -> Option<balance::FailureStatuses> {
    t.value("failure_statuses")?;
    let entries = t.strings(
        r,
        "failure_statuses",
        ("a status or a range", "statuses or ranges"),
        "500-599",
    );
    let status = |text: &str| {
        text.trim()
            .parse::<u16>()
            .ok()
            .filter(|s| balance::statuses::STATUSES.contains(s))
    };
    let mut set = balance::FailureStatuses::NONE;
    for (key, entry) in &entries {
        let text = *entry.get_ref();
        let range = match text.split_once('-') {
            Some((first, last)) => status(first).zip(status(last)),
            None => status(text).map(|s| (s, s)),
        };
        match range {
            Some((first, last)) if first <= last => set = set.with_range(first, last),
            _ => r.error(
                entry.span(),
                key,
                format!(
                    "\"{text}\" is not a status from 100 to 599 nor a range of them such as \"500-599\" (the default is [\"{}\"])",
                    balance::FailureStatuses::DEFAULT.to_string().replace(", ", "\", \"")
                ),
            ),
        }
    }
    Some(set)
}

const RETRY_BUDGET: Section = Section {
    title: "retry_budget",
    keys: &["ratio", "min_per_second", "window"],
    not_yet: &[],
};

/// `retry_budget`: `"off"`, or `{ ratio, min_per_second, window }` (each defaulting to
/// Finagle's: 0.2, 3, 10 s). `Some(None)`: off.
fn retry_budget(r: &mut Report<'_>, t: &Table<'_>) -> Option<Option<balance::RetryBudgetSettings>> {
    let value = t.value("retry_budget")?;
    if let toml::de::DeValue::String(text) = value.get_ref() {
        if text.as_ref() != "off" {
            r.error(
                value.span(),
                &t.key("retry_budget"),
                "expected \"off\" or a table such as { ratio = 0.2, min_per_second = 3, window = \"10s\" }",
            );
        }
        return Some(None);
    }
    let b = t.section(r, "retry_budget", &RETRY_BUDGET)?;
    let mut settings = balance::RetryBudgetSettings::default();
    if let Some(ratio) = b.number(r, "ratio", "0.2") {
        if (0.0..=1000.0).contains(ratio.get_ref()) {
            settings.ratio = *ratio.get_ref();
        } else {
            r.error(
                ratio.span(),
                &b.key("ratio"),
                "a share of the requests: from 0 (retries only from the reserve) to 1000",
            );
        }
    }
    if let Some(n) = b.integer(r, "min_per_second", 0..=1_000_000, "") {
        settings.min_per_second = n;
    }
    if let Some(window) = b.duration(
        r,
        "window",
        Zero::Refused("deposits would expire as they are made"),
    ) {
        settings.window = window.into();
    }
    Some(Some(settings))
}

/// What waits: requests in the queue for a backend below its `max_conns`, and idle
/// connections kept for reuse (`None`: the default, see `settings`).
struct Waiting {
    queue: Option<usize>,
    queue_timeout: Option<Duration>,
    keepalive: Option<usize>,
    keepalive_timeout: Option<Duration>,
}

impl Waiting {
    fn read(r: &mut Report<'_>, t: &Table<'_>) -> Waiting {
        Waiting {
            queue: t.integer(
                r,
                "queue",
                0..=MAX_QUEUE,
                " (0, the default, answers 503 at once when every backend is at its max_conns)",
            ),
            queue_timeout: t.duration(
                r,
                "queue_timeout",
                Zero::Refused(
                    "a queued request would be refused before it could wait; for no queue, write queue = 0",
                ),
            ),
            keepalive: t.integer(r, "keepalive", 0..=MAX_KEEPALIVE, " (0 turns reuse off)"),
            keepalive_timeout: t.duration(
                r,
                "keepalive_timeout",
                Zero::Refused(
                    "an idle connection would be closed before its reuse; to keep none, write keepalive = 0",
                ),
            ),
        }
    }
}

/// How far one worker's HTTP/2 connections to a backend may grow, and how much of them one
/// client connection may hold (`None`: the default, see `settings`). Only for
/// `backend_protocol = "h2"`: an HTTP/1.1 upstream has one request a connection.
#[derive(Debug, Default)]
pub(super) struct H2Limits {
    pub max_connections: Option<usize>,
    pub max_streams_per_client: Option<usize>,
}

impl H2Limits {
    fn read(
        r: &mut Report<'_>,
        t: &Table<'_>,
        protocol: Option<proxy::BackendProtocol>,
    ) -> H2Limits {
        let limits = H2Limits {
            max_connections: t.integer(
                r,
                "h2_max_connections",
                1..=MAX_H2_CONNECTIONS,
                " (HTTP/2 connections each worker may open to one backend)",
            ),
            max_streams_per_client: t.integer(
                r,
                "h2_max_streams_per_client",
                1..=MAX_H2_STREAMS_PER_CLIENT,
                " (leave it out for half the backend's concurrent-stream limit)",
            ),
        };
        if protocol != Some(proxy::BackendProtocol::H2) {
            for key in ["h2_max_connections", "h2_max_streams_per_client"] {
                if t.span_of(key).is_some() {
                    t.error(
                        r,
                        key,
                        format!(
                            "{key} applies only to HTTP/2 backends: add backend_protocol = \"h2\", or remove {key}"
                        ),
                    );
                }
            }
        }
        limits
    }
}

/// How the backends' load sources are polled (`None`: the default, see `settings`).
struct Polling {
    interval: Option<Duration>,
    timeout: Option<Duration>,
    stale_after: Option<u32>,
}

impl Polling {
    fn read(r: &mut Report<'_>, t: &Table<'_>) -> Polling {
        Polling {
            interval: t.duration(
                r,
                "poll_interval",
                Zero::Refused("backends would be polled without pause"),
            ),
            timeout: t.duration(
                r,
                "poll_timeout",
                Zero::Refused("every poll would time out before it starts"),
            ),
            stale_after: t.integer(r, "stale_after", 1..=MAX_STALE_AFTER, ""),
        }
    }

    /// Refuses a timeout longer than the interval; a timeout left out becomes 1 s, or the
    /// interval if that is shorter.
    fn checked(self, r: &mut Report<'_>, t: &Table<'_>) -> Polling {
        if let (Some(timeout), Some(span)) = (self.timeout, t.span_of("poll_timeout")) {
            let interval = self
                .interval
                .unwrap_or(proxy::UpstreamSettings::DEFAULT_POLL_INTERVAL);
            if timeout > interval {
                r.error(
                    span,
                    &t.key("poll_timeout"),
                    format!(
                        "poll_timeout ({timeout:?}) is longer than poll_interval ({interval:?}): a poll must end before the next begins"
                    ),
                );
            }
        }
        // Unset, the timeout is 1 s or the interval if that is shorter.
        let timeout = self.timeout.or_else(|| {
            self.interval
                .map(|i| i.min(proxy::UpstreamSettings::DEFAULT_POLL_TIMEOUT))
        });
        Polling { timeout, ..self }
    }
}

/// The `[[upstream.backend]]`s that read well: at least one, each address once, not all
/// backups. `shown` names the upstream in messages.
fn read_backends(
    r: &mut Report<'_>,
    t: &Table<'_>,
    balancing: &Balancing,
    shown: &str,
    discovered: bool,
) -> Vec<Backend> {
    let tables = t.sections(r, "backend", &backend::SECTION);
    if t.no_items("backend") && !discovered {
        r.error(
            t.span(),
            &t.key("backend"),
            format!("{shown} has no backends: add [[upstream.backend]] with addr = \"host:port\", or [upstream.discovery]"),
        );
    }
    let mut backends = Vec::new();
    // Where each address was first seen (its line is found only for a duplicate: finding a
    // line walks the text, which for every one of 10,000 backends would take seconds).
    let mut seen: HashMap<super::address::Target, _> = HashMap::new();
    for b in &tables {
        let Some(backend) = backend::read(r, b, &balancing.chosen) else {
            continue;
        };
        let addr = backend.addr.get_ref().clone();
        if let Some(first) = seen.insert(addr.clone(), backend.addr.span()) {
            let first = r.line_of(&first);
            r.error(
                backend.addr.span(),
                &b.key("addr"),
                format!("backend {addr} is already in {shown} (line {first}): list each backend once and use weight for a larger share"),
            );
        }
        backends.push(backend);
    }
    if !discovered
        && !backends.is_empty()
        && backends.len() == tables.len()
        && backends.iter().all(|b| b.backup)
    {
        r.error(
            t.span(),
            &t.key("backend"),
            format!("every backend of {shown} is a backup: at least one must not be"),
        );
    }
    backends
}

/// An agent's up/down and the health checks would overrule each other (HAProxy keeps two
/// states for them; fulcrum has one): one or the other. Found from the keys written, so that
/// it is reported however wrong the rest of the section or the backend is.
fn check_health_checks_and_agents(r: &mut Report<'_>, t: &Table<'_>) {
    let Some(health_check) = t.span_of("health_check") else {
        return;
    };
    let Some(DeValue::Array(backends)) = t.value("backend").map(Spanned::get_ref) else {
        return;
    };
    let agent_checked = backends.iter().find_map(|b| match b.get_ref() {
        DeValue::Table(keys) if keys.contains_key("agent_check") => Some(keys),
        _ => None,
    });
    if let Some(keys) = agent_checked {
        let backend = match keys.get("addr").map(Spanned::get_ref) {
            Some(DeValue::String(addr)) => format!("backend {addr}"),
            _ => "a backend".to_owned(),
        };
        r.error(
            health_check,
            &t.key("health_check"),
            format!(
                "{backend} has agent_check, whose up and down would overrule the health checks (and theirs the agent's): use one or the other"
            ),
        );
    }
}

/// `prequal` probes in plain HTTP/1.1: an upstream spoken to over TLS or in HTTP/2 needs a
/// `probe` address on each backend (an agent beside it, or a plain port of its own).
fn check_probes_are_plain_http(
    r: &mut Report<'_>,
    t: &Table<'_>,
    balancing: &Balancing,
    plain: bool,
    backends: &[Backend],
) {
    if balancing.algorithm != Algorithm::Prequal || plain {
        return;
    }
    if let Some(b) = backends.iter().find(|b| b.probe.is_none()) {
        r.error(
            b.addr.span(),
            &t.key("algorithm"),
            format!(
                "prequal probes with plain HTTP/1.1 GET /probe, and this upstream speaks TLS or HTTP/2 to its backends: give backend {} a probe = \"host:port\" (a fulcrum agent --probe-target beside it, or a plain-HTTP port that answers /probe)",
                b.addr.get_ref()
            ),
        );
    }
}

/// A queue holds requests until a backend is below its max_conns: without one, nothing is
/// ever full and the queue would never be used.
fn check_queue_has_max_conns(r: &mut Report<'_>, t: &Table<'_>, shown: &str, backends: &[Backend]) {
    if let Some(key) = ["queue", "queue_timeout"]
        .into_iter()
        .find(|k| t.span_of(k).is_some())
        && !backends.is_empty()
        && backends.iter().all(|b| b.max_conns == 0)
    {
        r.error(
            t.span_of(key).unwrap_or_else(|| t.span()),
            &t.key(key),
            format!(
                "{shown} has no backend with max_conns, so none is ever full and no request would wait: set max_conns on its backends, or remove {key}"
            ),
        );
    }
}

/// `backend_protocol`: `"http1"` (the default) or `"h2"`.
fn backend_protocol(r: &mut Report<'_>, t: &Table<'_>) -> Option<Spanned<proxy::BackendProtocol>> {
    let written = t.text(r, "backend_protocol", "a protocol", "h2")?;
    let protocol = match *written.get_ref() {
        "http1" | "http/1.1" => proxy::BackendProtocol::Http1,
        "h2" | "http2" => proxy::BackendProtocol::H2,
        other => {
            r.error(
                written.span(),
                &t.key("backend_protocol"),
                format!(
                    "unknown backend_protocol \"{other}\"; use \"http1\" (HTTP/1.1, the default) or \"h2\" (HTTP/2: h2c with prior knowledge, or h2 by ALPN with tls = true)"
                ),
            );
            return None;
        }
    };
    Some(Spanned::new(written.span(), protocol))
}

/// Refuses a total weight the ketama ring cannot be built for in reasonable time and memory.
fn check_ring_weight(r: &mut Report<'_>, t: &Table<'_>, b: &Balancing, backends: &[Backend]) {
    let ring = match b.algorithm {
        Algorithm::Hash if b.options.consistent => "hash with consistent = true",
        Algorithm::BoundedLoad => "bounded_load",
        _ => return,
    };
    let total: u64 = backends.iter().map(|b| u64::from(b.weight)).sum();
    if total > MAX_RING_WEIGHT {
        r.error(
            t.span_of("algorithm").unwrap_or_else(|| t.span()),
            &t.key("backend"),
            format!(
                "total weight {total} is too large for {ring}: its ring has 160 points per unit of weight, so keep the total at most {MAX_RING_WEIGHT} (weights are relative: divide them)"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::*;

    #[test]
    fn backend_protocol() {
        let with = |value: &str| {
            GOOD.replacen(
                "algorithm = \"least_conn\"\n",
                &format!("algorithm = \"least_conn\"\nbackend_protocol = {value}\n"),
                1,
            )
        };
        let c = ok(&with("\"h2\""));
        assert_eq!(
            c.proxy.upstreams[0].backend_protocol,
            proxy::BackendProtocol::H2
        );
        let c = ok(GOOD);
        assert_eq!(
            c.proxy.upstreams[0].backend_protocol,
            proxy::BackendProtocol::Http1
        );
        let e = refused(&with("\"h3\""));
        assert!(
            e.contains("upstream[0].backend_protocol")
                && e.contains("unknown backend_protocol \"h3\""),
            "{e}"
        );
        // Only HTTP requests can be carried in HTTP/2: not a TCP listener's connections, not
        // an upgrade.
        for listener_key in ["protocol = \"tcp\"", "upgrade = [\"websocket\"]"] {
            let e = refused(&with("\"h2\"").replacen(
                "upstream = \"web\"\n",
                &format!("upstream = \"web\"\n{listener_key}\n"),
                1,
            ));
            assert!(
                e.contains("has backend_protocol = \"h2\" (line")
                    && e.contains("listener[0].upstream"),
                "{listener_key}: {e}"
            );
        }
    }

    #[test]
    fn h2_connection_limits() {
        let with = |keys: &str| {
            GOOD.replacen(
                "algorithm = \"least_conn\"\n",
                &format!("algorithm = \"least_conn\"\n{keys}\n"),
                1,
            )
        };
        let c = ok(&with("backend_protocol = \"h2\""));
        assert_eq!(c.proxy.upstreams[0].h2_max_connections, 4);
        assert_eq!(c.proxy.upstreams[0].h2_max_streams_per_client, None);
        let c = ok(&with(
            "backend_protocol = \"h2\"\nh2_max_connections = 2\nh2_max_streams_per_client = 10",
        ));
        assert_eq!(c.proxy.upstreams[0].h2_max_connections, 2);
        assert_eq!(c.proxy.upstreams[0].h2_max_streams_per_client, Some(10));
        for (keys, says) in [
            (
                "backend_protocol = \"h2\"\nh2_max_connections = 0",
                "upstream[0].h2_max_connections: must be between 1 and 1000",
            ),
            (
                "backend_protocol = \"h2\"\nh2_max_streams_per_client = 0",
                "upstream[0].h2_max_streams_per_client: must be between 1 and 2147483647",
            ),
            (
                "h2_max_connections = 2",
                "h2_max_connections applies only to HTTP/2 backends: add backend_protocol = \"h2\"",
            ),
            (
                "backend_protocol = \"http1\"\nh2_max_streams_per_client = 8",
                "h2_max_streams_per_client applies only to HTTP/2 backends",
            ),
        ] {
            let e = refused(&with(keys));
            assert!(e.contains(says), "{keys}: {e}");
        }
    }

    #[test]
    fn max_conns_queue_and_response_timeout() {
        let c = ok(&GOOD
            .replace(
                "connect_timeout = \"250ms\"",
                "queue = 10\nqueue_timeout = \"2s\"\nresponse_timeout = \"30s\"",
            )
            .replace("weight = 3", "weight = 3\n  max_conns = 4"));
        let u = &c.proxy.upstreams[0];
        assert_eq!(
            (u.queue, u.queue_timeout),
            (10, std::time::Duration::from_secs(2))
        );
        assert_eq!(u.response_timeout, Some(std::time::Duration::from_secs(30)));
        assert_eq!(
            u.backends.iter().map(|b| b.max_conns).collect::<Vec<_>>(),
            [4, 0]
        );
        // Without max_conns nothing is ever full: a queue would never be used.
        let e = refused(&GOOD.replace("connect_timeout = \"250ms\"", "queue = 10"));
        assert!(e.contains("no backend with max_conns"), "{e}");
        let e = refused(&GOOD.replace("connect_timeout = \"250ms\"", "response_timeout = \"0s\""));
        assert!(e.contains("leave it out for no limit"), "{e}");
        let e = refused(&GOOD.replace("weight = 3", "max_conns = -1"));
        assert!(e.contains("max_conns"), "{e}");
    }

    /// Defect 1 of issue 10: `read_timeout = "0s"` and `connect_timeout = "0s"` passed
    /// `check`, then every request got 504 and every backend was disabled.
    #[test]
    fn zero_timeouts_are_refused() {
        for (key, why) in [
            ("connect_timeout", "every connection attempt would time out"),
            ("read_timeout", "no backend could ever answer in time"),
            ("keepalive_timeout", "to keep none, write keepalive = 0"),
            (
                "fail_timeout",
                "to turn passive health off, write max_fails = 0",
            ),
        ] {
            let e = refused(&with_algorithm("least_conn", &format!("{key} = \"0s\"")));
            let want = format!(
                "t.toml:11:{}: upstream[0].{key}: must be more than 0: ",
                key.len() + 4
            );
            assert!(e.starts_with(&want), "{want:?} in {e}");
            assert!(e.contains(why), "{e}");
        }
    }

    /// Defect 1 of issue 10: durations past what a clock holds passed `check`.
    #[test]
    fn durations_beyond_a_year_are_refused() {
        for d in ["400d", "100000000000y"] {
            let e = refused(&with_algorithm(
                "least_conn",
                &format!("read_timeout = \"{d}\""),
            ));
            assert!(
                e.contains("upstream[0].read_timeout: at most a year (\"1y\")"),
                "{e}"
            );
        }
        let u = &ok(&with_algorithm("least_conn", "read_timeout = \"1y\""))
            .proxy
            .upstreams[0];
        assert_eq!(u.read_timeout, std::time::Duration::from_secs(31_557_600));
    }

    #[test]
    fn bad_duration_names_line_and_key() {
        let e = refused(&GOOD.replace("250ms", "fast"));
        assert!(
            e.starts_with("t.toml:11:19: upstream[0].connect_timeout: invalid duration \"fast\""),
            "{e}"
        );
    }

    /// Defect 1 of issue 10: every count has a bound, and 0 where it means something.
    #[test]
    fn counts_run_cannot_honour_are_refused() {
        let huge = "4611686018427387904";
        for (line, want) in [
            (
                format!("keepalive = {huge}"),
                "upstream[0].keepalive: must be between 0 and 1000000",
            ),
            (
                "keepalive = -1".to_owned(),
                "upstream[0].keepalive: must be between 0 and 1000000",
            ),
            (
                "retries = 101".to_owned(),
                "upstream[0].retries: must be between 0 and 100",
            ),
            (
                format!("max_fails = {huge}"),
                "upstream[0].max_fails: must be between 0 and 1000000",
            ),
            (
                "seed = -1".to_owned(),
                "upstream[0].seed: must be between 0 and 9223372036854775807",
            ),
        ] {
            let e = refused(&with_algorithm("least_conn", &line));
            assert!(e.contains(want), "{line}: {e}");
        }
        let c = ok(&with_algorithm(
            "least_conn",
            "keepalive = 0\nretries = 0\nseed = 9223372036854775807\nretry_non_idempotent = true",
        ));
        let u = &c.proxy.upstreams[0];
        assert_eq!(
            (u.keepalive, u.retries, u.seed, u.next_upstream),
            (
                0,
                Some(0),
                i64::MAX as u64,
                balance::NextUpstream::DEFAULT.with(balance::NextUpstream::NON_IDEMPOTENT)
            )
        );
    }

    #[test]
    fn next_upstream_and_the_retry_budget() {
        use balance::NextUpstream as N;
        let c = ok(&with_algorithm(
            "least_conn",
            "next_upstream = [\"error\", \"http_503\", \"http_429\"]\nretry_budget = { ratio = 0.5, window = \"2s\" }",
        ));
        let u = &c.proxy.upstreams[0];
        assert_eq!(
            u.next_upstream,
            N::ERROR.with(N::HTTP_503).with(N::HTTP_429)
        );
        let budget = u.retry_budget.unwrap();
        assert_eq!((budget.ratio, budget.min_per_second), (0.5, 3));
        assert_eq!(budget.window, balance::Nanos(2_000_000_000));
        let c = ok(&with_algorithm(
            "least_conn",
            "next_upstream = [\"off\"]\nretry_budget = \"off\"",
        ));
        let u = &c.proxy.upstreams[0];
        assert_eq!((u.next_upstream, u.retry_budget), (N::OFF, None));
        // The defaults: nginx's conditions, Finagle's budget.
        let c = ok(&with_algorithm("least_conn", ""));
        let u = &c.proxy.upstreams[0];
        assert_eq!(u.next_upstream, N::DEFAULT);
        assert_eq!(
            u.retry_budget,
            Some(balance::RetryBudgetSettings::default())
        );
        for (line, want) in [
            (
                "next_upstream = [\"http_404\"]",
                "\"http_404\" is not a condition",
            ),
            (
                "next_upstream = [\"off\", \"error\"]",
                "cannot be listed with others",
            ),
            ("retry_budget = \"on\"", "expected \"off\" or a table"),
            ("retry_budget = { ratio = -1 }", "a share of the requests"),
            (
                "retry_budget = { window = \"0s\" }",
                "deposits would expire",
            ),
            ("retry_budget = { ratoi = 1 }", "ratoi"),
        ] {
            let e = refused(&with_algorithm("least_conn", line));
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn failure_statuses_default_list_and_next_upstream() {
        use balance::FailureStatuses as F;
        let u = ok(&with_algorithm("latency", "")).proxy.upstreams.remove(0);
        assert_eq!(u.options.failure_statuses, F::DEFAULT);
        let u = ok(&with_algorithm(
            "p2c_ewma",
            "failure_statuses = [\"503\", \"520-524\"]\npenalty = \"2s\"",
        ))
        .proxy
        .upstreams
        .remove(0);
        assert_eq!(u.options.failure_statuses.to_string(), "503, 520-524");
        // p2c_ewma takes latency's penalty (what a failure costs).
        assert_eq!(u.options.penalty, balance::Nanos(2_000_000_000));
        // next_upstream's statuses are added, the empty list included.
        let u = ok(&with_algorithm(
            "least_time",
            "failure_statuses = []\nnext_upstream = [\"error\", \"http_429\", \"http_502\"]",
        ))
        .proxy
        .upstreams
        .remove(0);
        assert_eq!(u.options.failure_statuses.to_string(), "429, 502");
        for (line, want) in [
            ("failure_statuses = [\"5xx\"]", "\"5xx\" is not a status"),
            ("failure_statuses = [\"599-500\"]", "nor a range"),
            ("failure_statuses = [\"600\"]", "from 100 to 599"),
            ("failure_statuses = [503]", "expected a status or a range"),
            ("failure_statuses = \"503\"", "a list of statuses or ranges"),
        ] {
            let e = refused(&with_algorithm("least_conn", line));
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    /// A ring of a million weight units (160 million points) would not be built in time.
    #[test]
    fn ring_weight_is_bounded() {
        let heavy = |alg: &str, line: &str| {
            with_algorithm(alg, line).replace("weight = 3", "weight = 1000000")
        };
        let e = refused(&heavy("hash", "consistent = true"));
        assert!(
            e.contains("upstream[0].backend: total weight 1000001 is too large for hash with consistent = true"),
            "{e}"
        );
        let e = refused(&heavy("bounded_load", "seed = 1"));
        assert!(e.contains("too large for bounded_load"), "{e}");
        ok(&heavy("hash", "consistent = false"));
        ok(&heavy("weighted_round_robin", "seed = 1"));
        ok(&with_algorithm("hash", "consistent = true").replace("weight = 3", "weight = 9999"));
    }

    #[test]
    fn weight_zero_and_duplicate_backend_both_reported() {
        let text = GOOD
            .replace("weight = 3", "weight = 0")
            .replace("9002", "9001");
        let e = refused(&text);
        assert!(
            e.contains(
                "t.toml:15:12: upstream[0].backend[0].weight: must be between 1 and 1000000"
            ),
            "{e}"
        );
        assert!(e.contains("t.toml:18:10: upstream[0].backend[1].addr: backend 127.0.0.1:9001 is already in upstream \"web\" (line 14)"), "{e}");
        assert!(e.contains("2 problems"), "{e}");
    }

    #[test]
    fn names_backends_and_backups() {
        let text = format!(
            "{GOOD}\n[[upstream]]\nname = \"web\"\n  [[upstream.backend]]\n  addr = \"127.0.0.1:9003\"\n"
        );
        let e = refused(&text);
        assert!(
            e.contains(
                "t.toml:22:8: upstream[1].name: upstream \"web\" is already defined at line 9"
            ),
            "{e}"
        );
        let e = refused(&format!("{GOOD}\n[[upstream]]\nname = \"api\"\n"));
        assert!(
            e.contains("t.toml:21:1: upstream[1].backend: upstream \"api\" has no backends"),
            "{e}"
        );
        let e = refused(&GOOD.replace("weight = 3", "backup = true"));
        assert!(
            e.contains("upstream[0].backend: every backend of upstream \"web\" is a backup"),
            "{e}"
        );
        let e = refused(&GOOD.replace("name = \"web\"", "name = \"\""));
        assert!(e.contains("upstream[0].name: must not be empty"), "{e}");
    }

    #[test]
    fn round_robin_with_weights_warns() {
        let c = ok(&GOOD.replace("least_conn", "round_robin"));
        assert_eq!(c.warnings.len(), 1);
        assert_eq!(
            c.warnings[0],
            "t.toml:8: upstream \"web\": round_robin ignores weights; use weighted_round_robin to honour them"
        );
    }
}
