//! The proxy's settings, validated. Defaults follow nginx where nginx has the same knob.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use balance::Algorithm;

use crate::upstream_tls::BackendProtocol;

/// Everything the data plane needs to run.
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// Worker threads, each with its own runtime and its own socket per listener (nginx
    /// `worker_processes`); at least 1.
    pub workers: usize,
    pub listeners: Vec<ListenerSettings>,
    pub upstreams: Vec<UpstreamSettings>,
    /// One line per request finished, where and how ([`crate::access_log`]); `None`: none.
    pub access_log: Option<crate::access_log::AccessLogSettings>,
    /// How long shutdown waits for requests in flight before closing their connections.
    pub shutdown_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ListenerSettings {
    pub listen: SocketAddr,
    /// Name of the upstream requests go to: every request without `routes`, and those no
    /// route takes with them. `None` (only with routes): those get 404.
    pub upstream: Option<String>,
    /// `[[listener.route]]`, in file order: which requests go where, by host and path
    /// ([`RouteSettings`]). Empty: every request goes to `upstream`.
    pub routes: Vec<RouteSettings>,
    /// Client connections served at once; further clients wait in the kernel's accept queue
    /// (like HAProxy's `maxconn`). `None`: as many as the open-files limit allows, at most
    /// [`Self::DEFAULT_MAX_CONNECTIONS`] (see [`crate::limits::fit_to_limit`]).
    pub max_connections: Option<usize>,
    /// Time a client has to send a complete request head; answered with 408 (nginx
    /// `client_header_timeout`, 60 s there; HAProxy `timeout http-request`).
    pub client_header_timeout: Duration,
    /// Time allowed between two reads of a request body; answered with 408 (nginx
    /// `client_body_timeout`).
    pub client_body_timeout: Duration,
    /// Bytes per second a request body must average, or it is cut with 408: the whole body
    /// has `client_body_timeout` plus a second per this many bytes received (Apache's
    /// `mod_reqtimeout` `MinRate`). 0: only the time between reads is limited (nginx).
    pub client_body_min_rate: u64,
    /// Time allowed for each write to the client; a client that stops reading for longer is
    /// disconnected (nginx `send_timeout`).
    pub send_timeout: Duration,
    /// Bytes per second a response must average on its way to the client, or the client is
    /// cut off: the whole response has `send_timeout` plus a second per this many bytes sent
    /// ([`crate::io::Pace`], as `client_body_min_rate` for request bodies). Against a client
    /// that takes a byte at a time (an HTTP/2 window opened a byte at a time: CVE-2019-9511),
    /// which `send_timeout` alone never cuts. 0: only the time between writes is limited
    /// (nginx).
    pub send_min_rate: u64,
    /// Bytes of the request head (request line and headers); larger heads get 431.
    pub max_header_bytes: usize,
    /// Header lines in a request; more get 431. At most [`crate::MAX_HEADERS_LIMIT`].
    pub max_headers: usize,
    /// Bytes of a request body; larger bodies get 413 (nginx `client_max_body_size`, 1 MiB).
    pub max_body_bytes: u64,
    /// Peers whose forwarding headers (`X-Forwarded-For`, `Forwarded`, `X-Real-IP`,
    /// `X-Forwarded-Host`, `X-Forwarded-Proto`) are believed and appended to; from any other
    /// peer they are replaced by our own. Empty (the default): trust no one. With
    /// `accept_proxy_protocol`, the peers allowed to connect at all.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// What the listener speaks to its clients.
    pub protocol: Protocol,
    /// `Protocol::Tcp`: a session with no byte either way for this long is closed (nginx
    /// stream's `proxy_timeout`, 10 minutes).
    pub idle_timeout: Duration,
    /// `Protocol::Tcp`: each connection to a backend starts with a PROXY protocol header
    /// naming the client (HAProxy's `send-proxy`/`send-proxy-v2`, nginx's `proxy_protocol on`).
    pub send_proxy_protocol: Option<ProxyProtocol>,
    /// Every connection must start with a PROXY protocol header (v1 or v2), sent by a load
    /// balancer in front; the client it names is the client (HAProxy's `accept-proxy`).
    /// Only peers in `trusted_proxies` may connect.
    pub accept_proxy_protocol: bool,
    /// `Protocol::Http`: protocols a request may upgrade its connection to (`Upgrade`, RFC
    /// 9110 §7.8), lower case, e.g. `websocket`. A backend's 101 turns the connection into a
    /// tunnel that holds its pick until it closes, or idles for `idle_timeout`. Empty (the
    /// default): `Upgrade` is removed like any hop-by-hop header.
    pub upgrade: Vec<String>,
    /// `Protocol::Http`: HTTP/2 accepted too (h2c with prior knowledge; `h2` by ALPN over
    /// TLS), with these limits. `None`: HTTP/1.1 only.
    pub http2: Option<Http2Settings>,
    /// TLS termination (`[[listener.tls]]`): empty for plain HTTP; else the certificate
    /// entries, the first the default for clients without SNI or with a name none matches.
    pub tls: Vec<crate::tls::CertificateFiles>,
    /// Fields set, added and removed on every request to a backend, and on every answer
    /// ([`crate::header_rules`]); a route's rules apply after these.
    pub request_headers: crate::header_rules::HeaderRules,
    pub response_headers: crate::header_rules::HeaderRules,
    /// `X-Request-Id`: kept from a peer in `trusted_proxies`, else made (32 hex digits), and
    /// sent to the backend, returned to the client and written in the access log.
    pub request_id: bool,
    /// nginx's `allow` / `deny` for every request (a route's own list replaces it).
    pub access: Option<crate::access::AccessList>,
    /// nginx's `limit_req` for every request (a route's own replaces it).
    pub limit_req: Option<crate::admission::RateLimit>,
    /// nginx's `limit_conn` for every request (a route's own replaces it).
    pub limit_conn: Option<crate::admission::ConnLimit>,
}

/// One `[[listener.route]]`: the requests it takes (`spec`, matched with nginx's precedence by
/// the [`routes`] crate) and what is done with them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSettings {
    /// In the access log, the metrics and the admin API; `route<N>` (from 1) unless given.
    pub name: String,
    pub spec: routes::Spec,
    pub action: RouteAction,
    /// Fields set, added and removed on its requests and answers, after the listener's.
    pub request_headers: crate::header_rules::HeaderRules,
    pub response_headers: crate::header_rules::HeaderRules,
    /// nginx's `allow` / `deny` for its requests, in place of the listener's.
    pub access: Option<crate::access::AccessList>,
    /// nginx's `limit_req` for its requests, in place of the listener's.
    pub limit_req: Option<crate::admission::RateLimit>,
    /// nginx's `limit_conn` for its requests, in place of the listener's.
    pub limit_conn: Option<crate::admission::ConnLimit>,
}

/// What a route does with a request: exactly one thing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteAction {
    /// Passed to this upstream. `rewrite`: the part of the normalised path the route's prefix
    /// matched is replaced by this (`"/"` for `strip_prefix`), and the backend gets the
    /// result, as nginx's `proxy_pass http://u/x/` in `location /p/` sends `/x/...` for
    /// `/p/...`; `None`: the request's target as sent (nginx's `proxy_pass http://u`).
    Upstream {
        upstream: String,
        rewrite: Option<String>,
    },
    /// Answered with a redirect ([`Redirect`]).
    Redirect(Redirect),
    /// Answered with this status and body.
    Respond {
        status: u16,
        body: String,
        content_type: String,
    },
}

/// A redirect: `Location` is the request's own URL with the parts given here replaced
/// (nginx's `return 301 https://$host$request_uri` is `scheme = "https"` alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// 301, 302, 303, 307 or 308.
    pub status: u16,
    /// `None`: the request's (`http`, or `https` on a TLS listener).
    pub scheme: Option<String>,
    /// `None`: the request's host (its `Host` without the port).
    pub host: Option<String>,
    /// `None`: the port of the request's `Host`, if it named one and neither `scheme` nor
    /// `host` is given; otherwise none (the scheme's default).
    pub port: Option<u16>,
    /// The path and query; `None`: the request's target as sent (nginx's `$request_uri`).
    pub path: Option<String>,
}

/// HTTP/2 on a listener (`http2 = true`) and the limits its connections are held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Settings {
    /// Streams a client may have open at once on one connection (`SETTINGS_MAX_CONCURRENT_
    /// STREAMS`); more are refused with `REFUSED_STREAM` (RFC 9113 §5.1.2). nginx's
    /// `http2_max_concurrent_streams` is 128, HAProxy's `tune.h2.max-concurrent-streams` 100.
    pub max_concurrent_streams: u32,
    /// Streams a client may cancel (RST_STREAM) before their answer within one second; one
    /// more and the connection is closed with GOAWAY `ENHANCE_YOUR_CALM`. Against rapid reset
    /// (CVE-2023-44487), where every cancelled stream costs the server a request and the client
    /// nothing, and no concurrency limit holds because a reset stream no longer counts.
    pub max_resets_per_second: u32,
    /// A connection with no stream open for this long is closed with GOAWAY (nginx's
    /// `keepalive_timeout`, 75 s, which replaced `http2_idle_timeout`).
    pub idle_timeout: Duration,
}

impl Http2Settings {
    pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 128;
    pub const DEFAULT_MAX_RESETS_PER_SECOND: u32 = 100;
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(75);
}

impl Default for Http2Settings {
    fn default() -> Self {
        Http2Settings {
            max_concurrent_streams: Self::DEFAULT_MAX_CONCURRENT_STREAMS,
            max_resets_per_second: Self::DEFAULT_MAX_RESETS_PER_SECOND,
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// What a listener speaks to its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// HTTP/1.1 requests, each balanced on its own.
    #[default]
    Http,
    /// Plain TCP (L4): each connection balanced once and relayed byte for byte both ways.
    Tcp,
}

/// A version of HAProxy's PROXY protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyProtocol {
    /// The text header (`PROXY TCP4 ...\r\n`).
    V1,
    /// The binary header.
    V2,
}

impl ListenerSettings {
    pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
    pub const DEFAULT_CLIENT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    pub const DEFAULT_CLIENT_BODY_TIMEOUT: Duration = Duration::from_secs(60);
    /// Apache's `mod_reqtimeout` default `MinRate` for bodies.
    pub const DEFAULT_CLIENT_BODY_MIN_RATE: u64 = 500;
    pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(60);
    /// As `client_body_min_rate`: 500 B/s (4 kbit/s) is slower than any real link.
    pub const DEFAULT_SEND_MIN_RATE: u64 = 500;
    pub const DEFAULT_MAX_HEADER_BYTES: usize = 16 * 1024;
    pub const DEFAULT_MAX_HEADERS: usize = 100;
    pub const DEFAULT_MAX_BODY_BYTES: u64 = 1024 * 1024;
    /// nginx stream's `proxy_timeout`.
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

    /// The connections served at once: `max_connections`, or the default.
    pub fn connection_limit(&self) -> usize {
        self.max_connections
            .unwrap_or(Self::DEFAULT_MAX_CONNECTIONS)
    }

    /// A listener on `listen` sending to `upstream`, with every default.
    pub fn new(listen: SocketAddr, upstream: impl Into<String>) -> ListenerSettings {
        ListenerSettings {
            listen,
            upstream: Some(upstream.into()),
            routes: Vec::new(),
            max_connections: None,
            client_header_timeout: Self::DEFAULT_CLIENT_HEADER_TIMEOUT,
            client_body_timeout: Self::DEFAULT_CLIENT_BODY_TIMEOUT,
            client_body_min_rate: Self::DEFAULT_CLIENT_BODY_MIN_RATE,
            send_timeout: Self::DEFAULT_SEND_TIMEOUT,
            send_min_rate: Self::DEFAULT_SEND_MIN_RATE,
            max_header_bytes: Self::DEFAULT_MAX_HEADER_BYTES,
            max_headers: Self::DEFAULT_MAX_HEADERS,
            max_body_bytes: Self::DEFAULT_MAX_BODY_BYTES,
            trusted_proxies: Vec::new(),
            protocol: Protocol::Http,
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
            send_proxy_protocol: None,
            accept_proxy_protocol: false,
            upgrade: Vec::new(),
            http2: None,
            tls: Vec::new(),
            request_headers: Default::default(),
            response_headers: Default::default(),
            request_id: false,
            access: None,
            limit_req: None,
            limit_conn: None,
        }
    }
}

/// What a hash algorithm hashes (`hash_key`): nginx's `$remote_addr`, `$http_NAME`,
/// `$cookie_NAME` or `$request_uri`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HashKey {
    /// The client address (as text for `hash`, `maglev` and `bounded_load`; as octets for
    /// `ip_hash` and `new_hash`, which only hash the address).
    #[default]
    ClientIp,
    /// The first value of a request header (name compared without case); absent: empty.
    Header(String),
    /// The value of a cookie in the `Cookie` header (name compared without case, as nginx's
    /// `$cookie_NAME`); absent: empty.
    Cookie(String),
    /// The request's path and query as the client sent them (nginx's `$request_uri`; of an
    /// absolute-form target, the part after the authority).
    Uri,
}

impl FromStr for HashKey {
    type Err = String;

    fn from_str(s: &str) -> Result<HashKey, String> {
        let name = |kind: &str, n: &str| {
            if n.is_empty()
                || !n
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b':' && b != b';' && b != b'=')
            {
                Err(format!(
                    "\"{kind}:\" needs a {kind} name, as in \"{kind}:X-User\" (got \"{s}\")"
                ))
            } else {
                Ok(n.to_owned())
            }
        };
        match s {
            "client_ip" => Ok(HashKey::ClientIp),
            "uri" => Ok(HashKey::Uri),
            _ => {
                if let Some(n) = s.strip_prefix("header:") {
                    name("header", n).map(HashKey::Header)
                } else if let Some(n) = s.strip_prefix("cookie:") {
                    name("cookie", n).map(HashKey::Cookie)
                } else {
                    Err(format!(
                        "unknown hash_key \"{s}\"; use client_ip, header:NAME, cookie:NAME or uri"
                    ))
                }
            }
        }
    }
}

impl fmt::Display for HashKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HashKey::ClientIp => f.write_str("client_ip"),
            HashKey::Header(n) => write!(f, "header:{n}"),
            HashKey::Cookie(n) => write!(f, "cookie:{n}"),
            HashKey::Uri => f.write_str("uri"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamSettings {
    pub name: String,
    pub algorithm: Algorithm,
    /// What hash algorithms hash.
    pub hash_key: HashKey,
    /// The algorithm's options (hash ring, table size, slow start...).
    pub options: balance::Options,
    pub backends: Vec<BackendSettings>,
    /// Time to establish a connection to a backend (nginx `proxy_connect_timeout`, 60 s there;
    /// 5 s here, since a backend that takes longer is better skipped).
    pub connect_timeout: Duration,
    /// Time to wait for the response head after sending, and between two reads of the body
    /// (nginx `proxy_read_timeout`, 60 s).
    pub read_timeout: Duration,
    /// Time from a request's first attempt until its whole response has been received; `None`
    /// is no limit. Bounds a backend that trickles its answer too slowly for `read_timeout`
    /// to notice (Envoy's route `timeout`; nginx has none). Before the response head it is a
    /// 504; later the client's connection is cut (reset).
    pub response_timeout: Option<Duration>,
    /// Requests that may wait for a backend below its `max_conns` when every one is full;
    /// 0 answers 503 at once (NGINX Plus `queue`).
    pub queue: usize,
    /// How long a request may wait in that queue before it is answered 503.
    pub queue_timeout: Duration,
    /// Further backends to try after a failed attempt; `None` tries every backend once (nginx
    /// `proxy_next_upstream_tries 0`).
    pub retries: Option<u32>,
    /// What moves a request on to the next backend (nginx `proxy_next_upstream`; default
    /// `error timeout`). With `non_idempotent`, POST, PATCH and other non-idempotent requests
    /// move on after they were sent too; a request none of which reached a backend always
    /// may.
    pub next_upstream: balance::NextUpstream,
    /// The cap on retries (`None`: none): Finagle's retry budget, on by default.
    pub retry_budget: Option<balance::RetryBudgetSettings>,
    /// Idle keep-alive connections kept per backend (nginx `keepalive`).
    pub keepalive: usize,
    /// How long an idle keep-alive connection may wait for reuse (nginx `keepalive_timeout`).
    pub keepalive_timeout: Duration,
    /// Seed for algorithms that draw random numbers.
    pub seed: u64,
    /// How often backends' load sources are polled (seed 003's t = 3 s).
    pub poll_interval: Duration,
    /// How long one poll may take.
    pub poll_timeout: Duration,
    /// Polls in a row without a fresh report after which a backend's report is stale.
    pub stale_after: u32,
    /// Active health checks, if any.
    pub health_check: Option<HealthCheckSettings>,
    /// TLS to the backends (`tls = true`); `None`: plain HTTP.
    pub tls: Option<std::sync::Arc<crate::upstream_tls::BackendTls>>,
    /// What the backends are spoken to in (`backend_protocol`).
    pub backend_protocol: BackendProtocol,
    /// HTTP/2 connections each worker may open to one backend (`h2_max_connections`): a
    /// stream goes on the oldest connection with one free, and another connection is opened
    /// only when every open one is at the backend's concurrent-stream limit (Envoy's
    /// connection pool; HAProxy opens another once a connection has no stream available).
    pub h2_max_connections: usize,
    /// Backend streams one HTTP/2 client connection may hold on one backend, per worker
    /// (`h2_max_streams_per_client`); `None`: half the backend's concurrent-stream limit, so
    /// that no one client connection can take every stream of a backend connection.
    pub h2_max_streams_per_client: Option<usize>,
    /// Sticky sessions by cookie (`sticky`): `None`, none.
    pub sticky: Option<crate::sticky::StickySettings>,
    /// What the operator pinned on addresses (overrides kept across reloads, see the binary's
    /// `state` module): a backend at a pinned address joins, or is reloaded, with the pin's
    /// state and weight instead of its own.
    pub pins: std::collections::HashMap<SocketAddr, Pin>,
    /// Where backends are found in DNS (`[upstream.discovery]`, and backends written with a
    /// host name), one entry per source; their backends join `backends` as they are found.
    pub discovery: Vec<DiscoverySettings>,
}

/// The record type a discovery source asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// A and AAAA: every address, with the source's port.
    A,
    /// SRV: each record's target and port, its weight and its priority (primaries and backups).
    Srv,
}

impl RecordKind {
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::A => "a",
            RecordKind::Srv => "srv",
        }
    }
}

/// What a discovery source asks DNS: its identity across reloads (a source whose query stays
/// keeps the backends it found).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DiscoveryQuery {
    pub kind: RecordKind,
    /// The DNS name (`_http._tcp.api.service.consul` for SRV).
    pub name: String,
    /// The backends' port (type A only; SRV records carry their own).
    pub port: Option<u16>,
}

impl fmt::Display for DiscoveryQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{} {}:{port}", self.kind.name(), self.name),
            None => write!(f, "{} {}", self.kind.name(), self.name),
        }
    }
}

/// One DNS discovery source of an upstream (NGINX Plus's `server ... resolve` and `service=`,
/// HAProxy's `server-template`): re-resolved at the answer's TTL, bounded by the intervals.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscoverySettings {
    pub query: DiscoveryQuery,
    /// The DNS servers to ask (UDP, then TCP for a truncated answer); empty: the system's
    /// (`/etc/resolv.conf`).
    pub resolvers: Vec<SocketAddr>,
    /// Whether IPv6 addresses are looked for (AAAA records, and a hosts file's IPv6 lines);
    /// `false` asks for A records alone (nginx's `resolver ... ipv6=off`), for a DNS server
    /// that answers AAAA queries wrong, or a network without IPv6.
    pub ipv6: bool,
    /// The shortest and the longest time between two lookups: a TTL outside is clamped.
    pub min_interval: Duration,
    pub max_interval: Duration,
    /// What every backend it finds gets (its `addr` and `name` are the found address; for
    /// SRV, `weight` and `backup` come from the records).
    pub template: BackendSettings,
}

impl DiscoverySettings {
    pub const DEFAULT_MIN_INTERVAL: Duration = Duration::from_secs(1);
    pub const DEFAULT_MAX_INTERVAL: Duration = Duration::from_secs(60);

    /// The backend it makes of a found address. Its name — what nginx's ring (`hash ...
    /// consistent`) places it by — is the one written for a backend written with a host name
    /// (`app.internal:8080`, as nginx names the peers of `server app.internal:8080 resolve`,
    /// so that every key keeps its place when the addresses change), and the address for
    /// `[upstream.discovery]`, whose template is named by no host.
    pub fn backend(&self, addr: SocketAddr) -> BackendSettings {
        let name = match self.template.name.parse::<SocketAddr>() {
            Ok(_) => addr.to_string(),
            Err(_) => self.template.name.clone(),
        };
        BackendSettings {
            addr,
            name,
            discovered: Some(self.query.clone()),
            ..self.template.clone()
        }
    }
}

/// What an operator asked of a backend (the admin API's `state`, kept here below the upstream that holds it; `down = true` in the
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

/// The state and weight an operator set on one address, kept for when a backend there joins
/// (one DNS discovery adds later, one added again) or is reloaded: `None` leaves that value
/// as the backend's settings give it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pin {
    pub state: Option<AdminState>,
    pub weight: Option<u32>,
}

/// Active health checks of an upstream's backends (`[upstream.health_check]`), run from one
/// place (not once per worker). As HAProxy: `fall` failed checks in a row take a backend out,
/// `rise` passed checks in a row bring it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheckSettings {
    pub kind: CheckKind,
    pub interval: Duration,
    /// Time allowed for one check (connect, and for HTTP the status line).
    pub timeout: Duration,
    pub rise: u32,
    pub fall: u32,
}

impl HealthCheckSettings {
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
    pub const DEFAULT_RISE: u32 = 2;
    pub const DEFAULT_FALL: u32 = 3;
}

/// What a health check does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckKind {
    /// `GET path`; passes when the status is within `expect` (inclusive).
    Http { path: String, expect: (u16, u16) },
    /// Passes when a connection can be made.
    Tcp,
}

impl UpstreamSettings {
    /// Whether the algorithm probes its backends (`prequal`): the control plane then runs a
    /// prober for the upstream, and picks wake it.
    pub fn probes_backends(&self) -> bool {
        self.algorithm == Algorithm::Prequal
    }

    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(60);
    pub const DEFAULT_KEEPALIVE: usize = 256;
    pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(60);
    pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(3);
    pub const DEFAULT_POLL_TIMEOUT: Duration = Duration::from_secs(1);
    pub const DEFAULT_STALE_AFTER: u32 = 3;
    /// Four connections of nginx's 128 streams each: 512 requests in flight from one worker
    /// to one backend before any waits, and two client connections at their cap (half a
    /// connection each) fill only one of them.
    pub const DEFAULT_H2_MAX_CONNECTIONS: usize = 4;
    /// NGINX Plus's `queue ... timeout=` default.
    pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(60);

    /// Its balancing policy: the algorithm, the backends' specs in pool order, the attempt
    /// limit, the queue and the polling — what the pool is built from, and what the simulator
    /// replays.
    pub fn policy(&self) -> balance::Policy {
        let (backups, primaries): (Vec<&BackendSettings>, Vec<&BackendSettings>) =
            self.backends.iter().partition(|b| b.backup);
        balance::Policy {
            algorithm: self.algorithm,
            options: self.options.clone(),
            primaries: primaries.iter().map(|b| self.pinned_spec(b)).collect(),
            backups: backups.iter().map(|b| self.pinned_spec(b)).collect(),
            retries: self.retries,
            next_upstream: self.next_upstream,
            retry_budget: self.retry_budget,
            queue: self.queue,
            queue_timeout: self.queue_timeout,
            poll_interval: self.poll_interval,
            stale_after: self.stale_after,
        }
    }

    /// Attempts allowed for one request: the first and the retries (`retries`, or every
    /// backend once), as [`balance::Policy::attempt_limit`] counts them (without building the
    /// policy: this is read for every request).
    pub fn max_attempts(&self) -> usize {
        balance::attempt::attempt_limit(self.retries, self.backends.len())
    }

    /// The upstream's TLS and the backend's address as written (the name to verify it by),
    /// when the upstream speaks TLS to its backends: what every connection to `addr` is made
    /// with, whatever the protocol over it.
    pub(crate) fn backend_tls(
        &self,
        addr: SocketAddr,
    ) -> Option<(&std::sync::Arc<crate::upstream_tls::BackendTls>, &str)> {
        let tls = self.tls.as_ref()?;
        // A backend DNS found is verified by the name it was found by (that of a host-name
        // backend, or of `[upstream.discovery]`); an SRV name is no host name, so SRV needs
        // `tls_server_name`.
        let written = self
            .backends
            .iter()
            .find(|b| b.addr == addr)
            .map_or("", |b| match &b.discovered {
                // Less the trailing dot of an absolute name: not part of a host name.
                Some(q) => q.name.strip_suffix('.').unwrap_or(&q.name),
                None => b.name.as_str(),
            });
        Some((tls, written))
    }

    /// The most total weight DNS may give an upstream balanced on nginx's ketama ring (`hash`
    /// with `consistent`, `bounded_load`), and the admin API may set: the ring's own bound
    /// ([`balance::ring::MAX_RING_WEIGHT`], which the configuration holds static backends to),
    /// so that no answer — SRV weights go to 65535 — and no call makes a ring the proxy cannot
    /// build in time or memory.
    pub const MAX_RING_WEIGHT: u64 = balance::ring::MAX_RING_WEIGHT;

    /// The ring this upstream balances on, named as the configuration writes it (`hash` with
    /// `consistent`, `bounded_load`: nginx's ketama ring, 160 points per unit of weight);
    /// `None` for an algorithm without one.
    pub fn ring(&self) -> Option<&'static str> {
        match self.algorithm {
            Algorithm::Hash if self.options.consistent => Some("hash with consistent = true"),
            Algorithm::BoundedLoad => Some("bounded_load"),
            _ => None,
        }
    }

    /// Refuses a total weight `total` of this upstream's backends that its ring (if it has
    /// one) could not be built for within [`Self::MAX_RING_WEIGHT`]: what the configuration
    /// refuses of a file, said to an operator who changes a weight at runtime.
    pub fn check_ring_weight(&self, total: u64) -> Result<(), String> {
        match self.ring() {
            Some(ring) if total > Self::MAX_RING_WEIGHT => Err(format!(
                "upstream \"{}\" balances by {ring}, whose ring has 160 points per unit of weight: its backends' total weight would be {total}, and the ring is built for at most {}; keep the total within it (weights are relative: lower the others instead), or change the algorithm first",
                self.name,
                Self::MAX_RING_WEIGHT
            )),
            _ => Ok(()),
        }
    }

    /// Scales the weights of `found` (what the source `query` found) down in proportion, each
    /// at least 1, where this upstream's ring would outgrow [`Self::MAX_RING_WEIGHT`] with them
    /// beside its other backends. Returns whether it did.
    pub fn fit_to_ring(&self, query: &DiscoveryQuery, found: &mut [BackendSettings]) -> bool {
        let ring = self.ring().is_some();
        let others: u64 = self
            .backends
            .iter()
            .filter(|b| b.discovered.as_ref() != Some(query))
            .map(|b| u64::from(b.weight))
            .sum();
        let given: u64 = found.iter().map(|b| u64::from(b.weight)).sum();
        if !ring || others + given <= Self::MAX_RING_WEIGHT || given == 0 {
            return false;
        }
        let room = Self::MAX_RING_WEIGHT.saturating_sub(others).max(1);
        for b in found.iter_mut() {
            let scaled = u64::from(b.weight) * room / given;
            b.weight = u32::try_from(scaled).unwrap_or(u32::MAX).max(1);
        }
        true
    }

    /// An upstream with every default.
    pub fn new(
        name: impl Into<String>,
        algorithm: Algorithm,
        backends: Vec<BackendSettings>,
    ) -> UpstreamSettings {
        UpstreamSettings {
            name: name.into(),
            algorithm,
            hash_key: HashKey::ClientIp,
            options: balance::Options::default(),
            backends,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            read_timeout: Self::DEFAULT_READ_TIMEOUT,
            response_timeout: None,
            queue: 0,
            queue_timeout: Self::DEFAULT_QUEUE_TIMEOUT,
            retries: None,
            next_upstream: balance::NextUpstream::DEFAULT,
            retry_budget: Some(balance::RetryBudgetSettings::default()),
            keepalive: Self::DEFAULT_KEEPALIVE,
            keepalive_timeout: Self::DEFAULT_KEEPALIVE_TIMEOUT,
            seed: 0,
            poll_interval: Self::DEFAULT_POLL_INTERVAL,
            poll_timeout: Self::DEFAULT_POLL_TIMEOUT,
            stale_after: Self::DEFAULT_STALE_AFTER,
            health_check: None,
            tls: None,
            backend_protocol: BackendProtocol::Http1,
            h2_max_connections: Self::DEFAULT_H2_MAX_CONNECTIONS,
            h2_max_streams_per_client: None,
            sticky: None,
            pins: std::collections::HashMap::new(),
            discovery: Vec::new(),
        }
    }

    /// The state and weight backend `b` joins (or is reloaded) with: its pin's where it has
    /// one, else its own (`down = true` is disabled).
    pub fn pinned(&self, b: &BackendSettings) -> (AdminState, u32) {
        let pin = self.pins.get(&b.addr).copied().unwrap_or_default();
        let own = if b.down {
            AdminState::Disabled
        } else {
            AdminState::Up
        };
        (pin.state.unwrap_or(own), pin.weight.unwrap_or(b.weight))
    }

    /// `b`'s spec for the pool, its pin applied (a backend pinned out of rotation starts
    /// down, one pinned to a weight starts with it).
    fn pinned_spec(&self, b: &BackendSettings) -> balance::BackendSpec {
        let (state, weight) = self.pinned(b);
        balance::BackendSpec {
            weight,
            down: state != AdminState::Up,
            ..b.spec()
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct BackendSettings {
    pub addr: SocketAddr,
    /// The backend as configured (`"app1.internal:8080"`, or the address): ring algorithms
    /// place it by this name, as nginx does.
    pub name: String,
    pub weight: u32,
    pub backup: bool,
    pub down: bool,
    pub max_fails: u32,
    pub fail_timeout: Duration,
    /// This backend's slow start, overriding the upstream's (`options.slow_start`).
    pub slow_start: Option<Duration>,
    /// Requests in flight on this backend at most, across all workers; 0 is no limit (nginx
    /// `max_conns`).
    pub max_conns: u32,
    /// Where its load reports come from, if anywhere.
    pub load_source: Option<LoadSource>,
    /// Where `prequal` sends its `GET /probe` (`probe = "host:port"`); `None`: the backend
    /// itself.
    pub probe: Option<SocketAddr>,
    /// The discovery source that found it (`None`: written in the configuration).
    pub discovered: Option<DiscoveryQuery>,
}

/// Where a backend's load reports come from (one source per backend).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadSource {
    /// A `fulcrum agent`: `GET /load` answers the JSON of the agent protocol.
    Agent(SocketAddr),
    /// A Prometheus node_exporter: `GET /metrics`, utilizations from counter deltas.
    NodeExporter(SocketAddr),
    /// A memcached that agents push their reports to (`fulcrum/load/<backend addr>`).
    Memcached(SocketAddr),
    /// An agent speaking HAProxy's agent-check protocol: its replies set the weight and state
    /// directly (no load model).
    AgentCheck(SocketAddr),
}

impl LoadSource {
    /// Whether it gives load reports for a weight model (an agent, a node_exporter, a
    /// memcached), rather than setting the weight itself (an agent-check).
    pub fn gives_load_reports(self) -> bool {
        match self {
            LoadSource::Agent(_) | LoadSource::NodeExporter(_) | LoadSource::Memcached(_) => true,
            LoadSource::AgentCheck(_) => false,
        }
    }
}

impl BackendSettings {
    pub const DEFAULT_MAX_FAILS: u32 = 1;
    pub const DEFAULT_FAIL_TIMEOUT: Duration = Duration::from_secs(10);

    pub fn new(addr: SocketAddr) -> BackendSettings {
        BackendSettings {
            addr,
            name: addr.to_string(),
            weight: 1,
            backup: false,
            down: false,
            max_fails: Self::DEFAULT_MAX_FAILS,
            fail_timeout: Self::DEFAULT_FAIL_TIMEOUT,
            slow_start: None,
            max_conns: 0,
            load_source: None,
            probe: None,
            discovered: None,
        }
    }

    pub fn weight(mut self, weight: u32) -> BackendSettings {
        self.weight = weight;
        self
    }

    pub fn spec(&self) -> balance::BackendSpec {
        balance::BackendSpec {
            name: self.name.as_str().into(),
            weight: self.weight,
            down: self.down,
            max_fails: self.max_fails,
            fail_timeout: self.fail_timeout.into(),
            slow_start: self.slow_start.map(Into::into),
            max_conns: self.max_conns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend found by a name written with a trailing dot (absolute) is verified by the
    /// host name, without the dot.
    #[test]
    fn a_discovered_backend_is_verified_by_its_name_less_a_trailing_dot() {
        let (dir, ca_file) = crate::upstream_tls::test_ca("settings-tls");
        let tls = crate::upstream_tls::BackendTls::new(
            Some(&ca_file),
            None,
            crate::upstream_tls::BackendProtocol::Http1,
        )
        .unwrap();
        let addr = SocketAddr::from(([10, 0, 0, 1], 443));
        let mut b = BackendSettings::new(addr);
        b.discovered = Some(DiscoveryQuery {
            kind: RecordKind::A,
            name: "api.fulcrum.test.".to_owned(),
            port: Some(443),
        });
        let mut u = UpstreamSettings::new("d", balance::Algorithm::RoundRobin, vec![b]);
        u.tls = Some(std::sync::Arc::new(tls));
        assert_eq!(u.backend_tls(addr).map(|t| t.1), Some("api.fulcrum.test"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn hash_keys_parse_and_print_as_configured() {
        for text in ["client_ip", "uri", "header:X-User", "cookie:sid"] {
            assert_eq!(text.parse::<HashKey>().unwrap().to_string(), text);
        }
        for bad in ["", "header:", "cookie:a=b", "ip", "header"] {
            assert!(bad.parse::<HashKey>().is_err(), "{bad:?} accepted");
        }
    }
}
