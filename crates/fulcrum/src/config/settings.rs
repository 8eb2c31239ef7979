//! The one place a checked file becomes the settings the proxy runs with: defaults filled in
//! (the proxy's own, which follow nginx), and what a backend inherits from its upstream.

use std::net::SocketAddr;
use std::time::Duration;

use proxy::access_log::{AccessLogSettings, Destination};
use proxy::{BackendSettings, ListenerSettings, ProxySettings, UpstreamSettings};
use proxy::{DiscoveryQuery, DiscoverySettings, RecordKind};

use super::address::Target;

use super::file::{File, MAX_WORKERS};
use super::listener::Listener;
use super::upstream::Upstream;

/// How long shutdown waits for requests in flight when `shutdown_timeout` is left out.
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// The proxy's settings for a file that passed every check.
pub(super) fn proxy(file: File) -> ProxySettings {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    ProxySettings {
        // nginx's `worker_processes auto`, within the bound a configured value has.
        workers: file
            .workers
            .unwrap_or_else(|| cores.min(MAX_WORKERS as usize)),
        listeners: file.listeners.into_iter().map(listener).collect(),
        upstreams: file.upstreams.into_iter().map(upstream).collect(),
        access_log: file
            .access_log
            .unwrap_or(Some(Destination::Stderr))
            .map(|destination| AccessLogSettings {
                destination,
                format: file.access_log_format.unwrap_or_default(),
            }),
        shutdown_timeout: file.shutdown_timeout.unwrap_or(DEFAULT_SHUTDOWN_TIMEOUT),
    }
}

fn listener(l: Listener) -> ListenerSettings {
    let mut s = ListenerSettings::new(l.listen.into_inner(), "");
    s.upstream = l.upstream;
    s.routes = l.routes;
    s.request_headers = l.request_headers;
    s.response_headers = l.response_headers;
    s.request_id = l.request_id;
    s.access = l.access.clone();
    s.limit_req = l.limit_req.clone();
    s.limit_conn = l.limit_conn.clone();
    s.max_connections = l.max_connections;
    if let Some(d) = l.client_header_timeout {
        s.client_header_timeout = d;
    }
    if let Some(d) = l.client_body_timeout {
        s.client_body_timeout = d;
    }
    if let Some(n) = l.client_body_min_rate {
        s.client_body_min_rate = n;
    }
    if let Some(d) = l.send_timeout {
        s.send_timeout = d;
    }
    if let Some(n) = l.send_min_rate {
        s.send_min_rate = n;
    }
    if let Some(n) = l.max_header_bytes {
        s.max_header_bytes = n;
    }
    if let Some(n) = l.max_headers {
        s.max_headers = n;
    }
    if let Some(n) = l.max_body_bytes {
        s.max_body_bytes = n;
    }
    s.trusted_proxies = l.trusted_proxies;
    s.protocol = l.protocol;
    if let Some(d) = l.idle_timeout {
        s.idle_timeout = d;
    }
    s.send_proxy_protocol = l.proxy_protocol;
    s.accept_proxy_protocol = l.accept_proxy_protocol;
    s.upgrade = l.upgrade;
    s.http2 = l.http2;
    s.tls = l.tls;
    s
}

/// The upstream's backends and its DNS discovery sources: a backend written with an address
/// is a backend; one written with a host name is a source of type A with its port and options,
/// re-resolved like any other (NGINX Plus's `server ... resolve`); `[upstream.discovery]` is
/// one more. What a backend leaves out comes from the upstream.
fn backends_and_sources(u: &mut Upstream) -> (Vec<BackendSettings>, Vec<DiscoverySettings>) {
    let mut backends = Vec::new();
    let mut discovery = Vec::new();
    for b in std::mem::take(&mut u.backends) {
        let target = b.addr.into_inner();
        let settings = BackendSettings {
            addr: match &target {
                Target::Addr(a) => *a,
                Target::Name(..) => SocketAddr::from(([0, 0, 0, 0], 0)),
            },
            name: b.name,
            weight: b.weight,
            backup: b.backup,
            down: b.down,
            max_fails: b
                .max_fails
                .or(u.max_fails)
                .unwrap_or(BackendSettings::DEFAULT_MAX_FAILS),
            fail_timeout: b
                .fail_timeout
                .or(u.fail_timeout)
                .unwrap_or(BackendSettings::DEFAULT_FAIL_TIMEOUT),
            slow_start: b.slow_start,
            max_conns: b.max_conns,
            load_source: b.load_source,
            probe: b.probe,
            discovered: None,
        };
        match target {
            Target::Addr(_) => backends.push(settings),
            Target::Name(name, port) => discovery.push(DiscoverySettings {
                query: DiscoveryQuery {
                    kind: RecordKind::A,
                    name,
                    port: Some(port),
                },
                resolvers: u.resolvers.clone(),
                ipv6: u.ipv6,
                min_interval: DiscoverySettings::DEFAULT_MIN_INTERVAL,
                max_interval: DiscoverySettings::DEFAULT_MAX_INTERVAL,
                template: settings,
            }),
        }
    }
    if let Some(d) = u.discovery.take() {
        discovery.push(d.settings(&u.resolvers, u.ipv6, u.max_fails, u.fail_timeout));
    }
    (backends, discovery)
}

fn upstream(mut u: Upstream) -> UpstreamSettings {
    let (backends, discovery) = backends_and_sources(&mut u);
    let mut s = UpstreamSettings::new(u.name.into_inner(), u.balancing.algorithm, backends);
    s.hash_key = u.balancing.hash_key;
    s.options = u.balancing.options;
    if let Some(d) = u.connect_timeout {
        s.connect_timeout = d;
    }
    if let Some(d) = u.read_timeout {
        s.read_timeout = d;
    }
    s.response_timeout = u.response_timeout;
    if let Some(n) = u.queue {
        s.queue = n;
    }
    if let Some(d) = u.queue_timeout {
        s.queue_timeout = d;
    }
    // Seed 002 §V sets latency's penalty to the timeout a failed attempt costs: the upstream's
    // read_timeout unless the penalty is given (only latency and p2c_ewma take the option; the
    // pool's estimate before it has one is the same timeout, whatever the algorithm).
    s.options.penalty = u.balancing.penalty.unwrap_or(s.read_timeout).into();
    s.retries = u.retries;
    if let Some(next) = u.next_upstream {
        s.next_upstream = next;
    }
    s.options.failure_statuses = u
        .failure_statuses
        .unwrap_or_default()
        .with_next_upstream(s.next_upstream);
    // The older key, kept: `non_idempotent` added to the conditions.
    if u.retry_non_idempotent == Some(true) {
        s.next_upstream = s.next_upstream.with(balance::NextUpstream::NON_IDEMPOTENT);
    }
    if let Some(budget) = u.retry_budget {
        s.retry_budget = budget;
    }
    if let Some(n) = u.keepalive {
        s.keepalive = n;
    }
    if let Some(d) = u.keepalive_timeout {
        s.keepalive_timeout = d;
    }
    if let Some(d) = u.poll_interval {
        s.poll_interval = d;
    }
    if let Some(d) = u.poll_timeout {
        s.poll_timeout = d;
    }
    if let Some(n) = u.stale_after {
        s.stale_after = n;
    }
    s.health_check = u.health_check;
    s.tls = u.tls;
    if let Some(p) = u.backend_protocol {
        s.backend_protocol = p.into_inner();
    }
    if let Some(n) = u.h2.max_connections {
        s.h2_max_connections = n;
    }
    s.h2_max_streams_per_client = u.h2.max_streams_per_client;
    s.sticky = u.sticky;
    s.discovery = discovery;
    s.seed = u.seed.unwrap_or_else(process_seed);
    s
}

/// The seed of an upstream without `seed`: drawn once per process from the OS's randomness
/// (std's `RandomState` keys), the same for the process's life — reloads included — and
/// different on every instance. With one seed for all, a fleet fed round-robin draws the same
/// random pairs in step on every instance: the lab measured `random_two`'s mean 130 ms with
/// three instances on seed 0 against 108 ms with distinct seeds (docs/lab.md, fleets).
fn process_seed() -> u64 {
    use std::hash::BuildHasher;
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| std::hash::RandomState::new().hash_one(std::process::id()))
}
