//! `[[listener]]`: an address fulcrum accepts clients on, the upstream it sends them to, and
//! what a client may ask of it (connections, time, header and body sizes, whose forwarding
//! headers to believe).

use std::net::SocketAddr;
use std::time::Duration;

use ipnet::IpNet;
use proxy::{Protocol, ProxyProtocol};
use toml::Spanned;
use toml::de::DeValue;

use super::address;
use super::duration::Zero;
use super::report::Report;
use super::table::{Section, Table};

pub(super) const SECTION: Section = Section {
    title: "[[listener]]",
    keys: &[
        "listen",
        "upstream",
        "protocol",
        "max_connections",
        "client_header_timeout",
        "client_body_timeout",
        "client_body_min_rate",
        "send_timeout",
        "send_min_rate",
        "max_header_bytes",
        "max_headers",
        "max_body_bytes",
        "trusted_proxies",
        "idle_timeout",
        "proxy_protocol",
        "accept_proxy_protocol",
        "upgrade",
        "http2",
        "http2_max_concurrent_streams",
        "http2_max_resets_per_second",
        "http2_idle_timeout",
        "tls",
        "route",
        "request_id",
        "request_headers",
        "response_headers",
        "access",
        "limit_req",
        "limit_conn",
    ],
    not_yet: &[],
};

/// Keys that only HTTP listeners read: a TCP listener with one is told it does nothing.
const HTTP_ONLY: [&str; 17] = [
    "upgrade",
    "limit_req",
    "limit_conn",
    "request_headers",
    "response_headers",
    "request_id",
    "client_body_timeout",
    "client_body_min_rate",
    "send_timeout",
    "send_min_rate",
    "max_header_bytes",
    "max_headers",
    "max_body_bytes",
    // A TCP connection has no forwarding headers; `accept_proxy_protocol` reads it.
    "trusted_proxies",
    "http2_max_concurrent_streams",
    "http2_max_resets_per_second",
    "http2_idle_timeout",
];

/// Keys that tune HTTP/2, read only with `http2 = true`.
const HTTP2_LIMITS: [&str; 3] = [
    "http2_max_concurrent_streams",
    "http2_max_resets_per_second",
    "http2_idle_timeout",
];

/// The most client connections one listener serves at once. Each holds a descriptor (two
/// while it talks to a backend), and Linux's default ceiling per process (`fs.nr_open`) is
/// 1048576, so more could never be reached; the limit is a semaphore whose own maximum
/// (`usize::MAX >> 3` permits in tokio) must never be exceeded, or the proxy panics at start.
const MAX_CONNECTIONS: i64 = 1_000_000;

/// The smallest request head allowed: a request line and a few ordinary headers.
const MIN_HEADER_BYTES: i64 = 1024;

/// The largest request head allowed. A client can make each of its connections hold this much
/// before it is refused; nginx's largest default header buffer is 8 KB and HAProxy's 16 KB, so
/// 1 MiB leaves room for any real head.
const MAX_HEADER_BYTES: i64 = 1 << 20;

/// The largest request body allowed. Bodies are held whole in memory before they are
/// forwarded (so that a failed attempt can be retried), one per connection: beyond 1 GiB a
/// few uploads would exhaust a server. There is no "unlimited" (nginx's
/// `client_max_body_size 0`) for the same reason.
const MAX_BODY_BYTES: i64 = 1 << 30;

/// A checked listener.
#[derive(Debug)]
pub(super) struct Listener {
    pub listen: Spanned<SocketAddr>,
    /// `None` only with routes: the requests none takes get 404.
    pub upstream: Option<String>,
    /// `[[listener.route]]`, checked.
    pub routes: Vec<proxy::RouteSettings>,
    pub request_headers: proxy::header_rules::HeaderRules,
    pub response_headers: proxy::header_rules::HeaderRules,
    pub request_id: bool,
    pub access: Option<proxy::access::AccessList>,
    pub limit_req: Option<proxy::admission::RateLimit>,
    pub limit_conn: Option<proxy::admission::ConnLimit>,
    /// `None` in this and the following: the default (see `settings`).
    pub max_connections: Option<usize>,
    pub client_header_timeout: Option<Duration>,
    pub client_body_timeout: Option<Duration>,
    pub client_body_min_rate: Option<u64>,
    pub send_timeout: Option<Duration>,
    pub send_min_rate: Option<u64>,
    pub max_header_bytes: Option<usize>,
    pub max_headers: Option<usize>,
    pub max_body_bytes: Option<u64>,
    pub trusted_proxies: Vec<IpNet>,
    pub protocol: Protocol,
    pub idle_timeout: Option<Duration>,
    pub proxy_protocol: Option<ProxyProtocol>,
    pub accept_proxy_protocol: bool,
    /// Protocols an HTTP request may upgrade to, lower case.
    pub upgrade: Vec<String>,
    /// `Some` with `http2 = true`: HTTP/2 accepted, with these limits.
    pub http2: Option<proxy::Http2Settings>,
    /// Where `upstream` is written and its key path, for what the upstream's settings forbid
    /// on this listener.
    pub upstream_at: (std::ops::Range<usize>, String),
    /// `[[listener.tls]]`, checked: empty for plain HTTP.
    pub tls: Vec<proxy::tls::CertificateFiles>,
}

impl Listener {
    /// The upstreams it sends to: its own, then each its routes name, once each.
    pub fn upstream_names(&self) -> impl Iterator<Item = &str> {
        let mut names: Vec<&str> = self.upstream.iter().map(String::as_str).collect();
        for r in &self.routes {
            if let proxy::RouteAction::Upstream { upstream, .. } = &r.action
                && !names.contains(&upstream.as_str())
            {
                names.push(upstream);
            }
        }
        names.into_iter()
    }
}

/// Reads one listener; `upstreams` are the names defined in the file, sorted (`None` when
/// some upstream's name could not be read: then any name may be right). Its address when it
/// reads well (checked against the others' even when the rest is wrong), and the listener;
/// `None` when its address or upstream is missing or wrong (the rest is still checked).
/// Problems at one place keep the order they were found in.
pub(super) fn read(
    r: &mut Report<'_>,
    t: &Table<'_>,
    upstreams: Option<&[&str]>,
) -> (Option<Spanned<SocketAddr>>, Option<Listener>) {
    let listen = read_listen(r, t);
    let listener = read_rest(r, t, upstreams, listen.clone());
    (listen, listener)
}

/// The listener on `listen` (`None`: wrong, reported) with the rest of its keys.
fn read_rest(
    r: &mut Report<'_>,
    t: &Table<'_>,
    upstreams: Option<&[&str]>,
    listen: Option<Spanned<SocketAddr>>,
) -> Option<Listener> {
    let has_routes = !t.no_items("route");
    let upstream = read_upstream(r, t, upstreams, has_routes);
    let routes = super::route::read(r, t, upstreams);
    let request_headers = super::header_rules::read(r, t, "request_headers");
    let response_headers = super::header_rules::read(r, t, "response_headers");
    let request_id = t.flag(r, "request_id").unwrap_or(false);
    let access = super::access::read(r, t);
    let limit_req = super::limits::limit_req(r, t);
    let limit_conn = super::limits::limit_conn(r, t);
    let upstream_at = (
        t.span_of("upstream").unwrap_or_else(|| t.span()),
        t.key("upstream"),
    );
    let protocol = read_protocol(r, t);
    let idle_timeout = t.duration(
        r,
        "idle_timeout",
        Zero::Refused("every session would be closed at once"),
    );
    let proxy_protocol = proxy_protocol(r, t);
    let accept_proxy_protocol = t.flag(r, "accept_proxy_protocol").unwrap_or(false);
    let upgrade = upgrade(r, t);
    check_keys_for_protocol(r, t, protocol, &upgrade, accept_proxy_protocol);
    let limits = ClientLimits::read(r, t);
    let trusted_proxies = trusted_proxies(r, t);
    let http2 = http2(r, t, protocol);
    if accept_proxy_protocol && trusted_proxies.is_empty() {
        t.error(
            r,
            "accept_proxy_protocol",
            "needs trusted_proxies: the load balancers in front that may name the client (anyone else could claim any address), e.g. trusted_proxies = [\"10.0.0.0/8\"]",
        );
    }
    let tls = super::tls::read(r, t);
    if protocol == Protocol::Tcp && has_routes {
        t.error(
            r,
            "route",
            "a TCP listener relays connections, which have no host or path to route by: remove its routes, or use protocol = \"http\"",
        );
    }
    if protocol == Protocol::Tcp && t.span_of("tls").is_some() {
        t.error(
            r,
            "tls",
            "TLS termination on a TCP listener is not supported yet (only on HTTP listeners): remove [[listener.tls]], or use protocol = \"http\"",
        );
    }
    Some(Listener {
        listen: listen?,
        upstream: upstream?,
        routes,
        request_headers,
        response_headers,
        request_id,
        access,
        limit_req,
        limit_conn,
        max_connections: limits.max_connections,
        client_header_timeout: limits.client_header_timeout,
        client_body_timeout: limits.client_body_timeout,
        client_body_min_rate: limits.client_body_min_rate,
        send_timeout: limits.send_timeout,
        send_min_rate: limits.send_min_rate,
        max_header_bytes: limits.max_header_bytes,
        max_headers: limits.max_headers,
        max_body_bytes: limits.max_body_bytes,
        trusted_proxies,
        protocol,
        idle_timeout,
        proxy_protocol,
        accept_proxy_protocol,
        upgrade,
        http2,
        upstream_at,
        tls,
    })
}

/// `listen`: required, an address fulcrum may listen on.
fn read_listen(r: &mut Report<'_>, t: &Table<'_>) -> Option<Spanned<SocketAddr>> {
    let listen = t.required_text(r, "listen", "an address", "127.0.0.1:8080");
    listen.and_then(|l| match address::listen(l.get_ref()) {
        Ok(addr) => Some(Spanned::new(l.span(), addr)),
        Err(why) => {
            r.error(l.span(), &t.key("listen"), why);
            None
        }
    })
}

/// `upstream`: required, and one of `upstreams` when they are known.
/// `upstream`: where the listener's requests go (those no route takes, with routes). Required
/// without routes; `Some(None)` when absent beside routes (their requests get 404); `None`
/// when wrong (reported).
fn read_upstream(
    r: &mut Report<'_>,
    t: &Table<'_>,
    upstreams: Option<&[&str]>,
    has_routes: bool,
) -> Option<Option<String>> {
    if has_routes && t.span_of("upstream").is_none() {
        return Some(None);
    }
    let upstream = t.required_text(r, "upstream", "an upstream name", "web")?;
    defined_upstream(r, t, &upstream, upstreams).then(|| Some(upstream.get_ref().to_string()))
}

/// Whether `upstream` (the value of `t`'s `upstream`) is one of `upstreams` (`None`: any name
/// may be right); reports it when it is not.
pub(super) fn defined_upstream(
    r: &mut Report<'_>,
    t: &Table<'_>,
    upstream: &Spanned<&str>,
    upstreams: Option<&[&str]>,
) -> bool {
    let Some(names) = upstreams.filter(|names| !names.contains(upstream.get_ref())) else {
        return true;
    };
    let defined = if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    };
    r.error(
        upstream.span(),
        &t.key("upstream"),
        format!(
            "no upstream is named \"{}\"; defined: {defined}",
            upstream.get_ref()
        ),
    );
    false
}

/// `protocol`: `"http"` (the default) or `"tcp"`.
fn read_protocol(r: &mut Report<'_>, t: &Table<'_>) -> Protocol {
    match t.text(r, "protocol", "a protocol", "tcp") {
        None => Protocol::Http,
        Some(p) => match *p.get_ref() {
            "http" => Protocol::Http,
            "tcp" => Protocol::Tcp,
            other => {
                r.error(
                    p.span(),
                    &t.key("protocol"),
                    format!("unknown protocol \"{other}\"; use \"http\" or \"tcp\""),
                );
                Protocol::Http
            }
        },
    }
}

/// Keys the listener's protocol does not read: on an HTTP listener, `idle_timeout` without
/// an upgrade (a warning) and `proxy_protocol` (an error); on a TCP listener, every HTTP-only
/// key (a warning; `trusted_proxies` is read there with `accept_proxy_protocol`).
fn check_keys_for_protocol(
    r: &mut Report<'_>,
    t: &Table<'_>,
    protocol: Protocol,
    upgrade: &[String],
    accept_proxy_protocol: bool,
) {
    if protocol == Protocol::Http {
        if upgrade.is_empty()
            && let Some(span) = t.span_of("idle_timeout")
        {
            r.warn(
                &span,
                format!(
                    "{}: an HTTP listener reads it only for upgraded connections, and upgrade is not set; remove it or add upgrade = [\"websocket\"]",
                    t.key("idle_timeout")
                ),
            );
        }
        if t.span_of("proxy_protocol").is_some() {
            t.error(
                r,
                "proxy_protocol",
                "only a TCP listener reads it: add protocol = \"tcp\", or remove it",
            );
        }
    } else {
        for key in HTTP_ONLY {
            let skip = key == "trusted_proxies" && accept_proxy_protocol;
            if let Some(span) = t.span_of(key).filter(|_| !skip) {
                r.warn(
                    &span,
                    format!(
                        "{}: does nothing on a TCP listener (protocol = \"tcp\"); remove it",
                        t.key(key)
                    ),
                );
            }
        }
    }
}

/// What a client may take of the listener: connections, time to send its request and to
/// read the answer, sizes of its head and body (`None`: the default, see `settings`).
struct ClientLimits {
    max_connections: Option<usize>,
    client_header_timeout: Option<Duration>,
    client_body_timeout: Option<Duration>,
    client_body_min_rate: Option<u64>,
    send_timeout: Option<Duration>,
    send_min_rate: Option<u64>,
    max_header_bytes: Option<usize>,
    max_headers: Option<usize>,
    max_body_bytes: Option<u64>,
}

impl ClientLimits {
    fn read(r: &mut Report<'_>, t: &Table<'_>) -> ClientLimits {
        ClientLimits {
            max_connections: t.integer(r, "max_connections", 1..=MAX_CONNECTIONS, ""),
            client_header_timeout: t.duration(
                r,
                "client_header_timeout",
                Zero::Refused("no client could send a request in time"),
            ),
            client_body_timeout: t.duration(
                r,
                "client_body_timeout",
                Zero::Refused("no client could send a request body in time"),
            ),
            client_body_min_rate: t.integer(
                r,
                "client_body_min_rate",
                0..=1_000_000_000,
                " (bytes per second; 0 limits only the time between reads)",
            ),
            send_timeout: t.duration(
                r,
                "send_timeout",
                Zero::Refused(
                    "any answer that does not fit the socket buffer at once would be cut",
                ),
            ),
            send_min_rate: t.integer(
                r,
                "send_min_rate",
                0..=1_000_000_000,
                " (bytes per second; 0 limits only the time between writes)",
            ),
            max_header_bytes: t.integer(
                r,
                "max_header_bytes",
                MIN_HEADER_BYTES..=MAX_HEADER_BYTES,
                "",
            ),
            max_headers: t.integer(r, "max_headers", 1..=proxy::MAX_HEADERS_LIMIT as i64, ""),
            max_body_bytes: t.integer(
                r,
                "max_body_bytes",
                1..=MAX_BODY_BYTES,
                " (bodies are held in memory before they are forwarded, so there is no unlimited)",
            ),
        }
    }
}

/// `upgrade = ["websocket"]`: protocol names (RFC 9110 §16.7's registry: `websocket`, `h2c`,
/// or any token), without version; kept in lower case.
fn upgrade(r: &mut Report<'_>, t: &Table<'_>) -> Vec<String> {
    let mut names = Vec::new();
    for (key, text) in t.strings(r, "upgrade", ("a protocol", "protocols"), "websocket") {
        let name = text.get_ref();
        if name.is_empty() || !name.bytes().all(is_token_char) {
            r.error(
                text.span(),
                &key,
                format!("\"{name}\" is not a protocol name (a token such as \"websocket\", without a version)"),
            );
        } else {
            names.push(name.to_ascii_lowercase());
        }
    }
    names
}

/// RFC 9110 §5.6.2's `tchar`, less `/` (which separates a version).
fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `http2` and its limits. HTTP/2 is a way to carry HTTP requests: a TCP listener relays
/// bytes and cannot take it.
fn http2(r: &mut Report<'_>, t: &Table<'_>, protocol: Protocol) -> Option<proxy::Http2Settings> {
    let on = t.flag(r, "http2").unwrap_or(false);
    if on && protocol == Protocol::Tcp {
        t.error(
            r,
            "http2",
            "a TCP listener (protocol = \"tcp\") relays bytes and cannot speak HTTP/2: remove http2, or use protocol = \"http\"",
        );
        return None;
    }
    let mut s = proxy::Http2Settings::default();
    if let Some(n) = t.integer(
        r,
        "http2_max_concurrent_streams",
        1..=10_000,
        " (streams one client connection may have open at once)",
    ) {
        s.max_concurrent_streams = n;
    }
    if let Some(n) = t.integer(
        r,
        "http2_max_resets_per_second",
        1..=1_000_000,
        " (streams a client may cancel before their answer, per second)",
    ) {
        s.max_resets_per_second = n;
    }
    if let Some(d) = t.duration(
        r,
        "http2_idle_timeout",
        Zero::Refused("every HTTP/2 connection would be closed at once"),
    ) {
        s.idle_timeout = d;
    }
    if !on && protocol == Protocol::Http {
        for key in HTTP2_LIMITS {
            if let Some(span) = t.span_of(key) {
                r.warn(
                    &span,
                    format!(
                        "{}: does nothing without http2 = true; add it, or remove this",
                        t.key(key)
                    ),
                );
            }
        }
    }
    on.then_some(s)
}

/// `proxy_protocol`: `false`, `true` (version 2, as DESIGN has it), `"v1"` or `"v2"`.
fn proxy_protocol(r: &mut Report<'_>, t: &Table<'_>) -> Option<ProxyProtocol> {
    let value = t.value("proxy_protocol")?;
    match value.get_ref() {
        DeValue::Boolean(false) => None,
        DeValue::Boolean(true) => Some(ProxyProtocol::V2),
        DeValue::String(s) if s.as_ref() == "v1" => Some(ProxyProtocol::V1),
        DeValue::String(s) if s.as_ref() == "v2" => Some(ProxyProtocol::V2),
        other => {
            t.error(
                r,
                "proxy_protocol",
                format!(
                    "expected true, false, \"v1\" or \"v2\", not {}",
                    super::table::found(other)
                ),
            );
            None
        }
    }
}

/// `trusted_proxies = ["10.0.0.0/8", "192.168.1.5", "::1"]`: each element an address or a
/// CIDR range; a wrong one is reported by its index.
fn trusted_proxies(r: &mut Report<'_>, t: &Table<'_>) -> Vec<IpNet> {
    let mut nets = Vec::new();
    for (key, text) in t.strings(
        r,
        "trusted_proxies",
        ("an address", "addresses"),
        "10.0.0.0/8",
    ) {
        match address::trusted_proxy(text.get_ref()) {
            Ok((net, host_bits)) => {
                if host_bits {
                    r.warn(
                        &text.span(),
                        format!(
                            "{key}: \"{}\" has bits set past its prefix; it means {net}",
                            text.get_ref()
                        ),
                    );
                }
                nets.push(net);
            }
            Err(why) => r.error(text.span(), &key, why),
        }
    }
    nets
}

#[cfg(test)]
mod tests {
    use crate::config::testing::*;
    use proxy::{Protocol, ProxyProtocol};

    #[test]
    fn tcp_listeners_and_their_keys() {
        let c = ok(&with_listener(
            "protocol = \"tcp\"\nidle_timeout = \"30s\"\nproxy_protocol = \"v1\"",
        ));
        let l = &c.proxy.listeners[0];
        assert_eq!(l.protocol, Protocol::Tcp);
        assert_eq!(l.idle_timeout, std::time::Duration::from_secs(30));
        assert_eq!(l.send_proxy_protocol, Some(ProxyProtocol::V1));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let c = ok(&with_listener("protocol = \"tcp\"\nproxy_protocol = true"));
        assert_eq!(
            c.proxy.listeners[0].send_proxy_protocol,
            Some(ProxyProtocol::V2)
        );
        assert_eq!(
            c.proxy.listeners[0].idle_timeout,
            std::time::Duration::from_secs(600)
        );
        assert_eq!(ok(GOOD).proxy.listeners[0].protocol, Protocol::Http);

        let e = refused(&with_listener("protocol = \"udp\""));
        assert!(
            e.contains("listener[0].protocol: unknown protocol \"udp\"; use \"http\" or \"tcp\""),
            "{e}"
        );
        let e = refused(&with_listener(
            "proxy_protocol = \"v3\"\nprotocol = \"tcp\"",
        ));
        assert!(
            e.contains(
                "listener[0].proxy_protocol: expected true, false, \"v1\" or \"v2\", not the string \"v3\""
            ),
            "{e}"
        );
        {
            let e = refused(&with_listener("proxy_protocol = true"));
            assert!(
                e.contains("only a TCP listener reads it: add protocol = \"tcp\""),
                "{e}"
            );
        }
        let e = refused(&with_listener("protocol = \"tcp\"\nidle_timeout = \"0s\""));
        assert!(
            e.contains("listener[0].idle_timeout: must be more than 0"),
            "{e}"
        );

        // HTTP's own limits do nothing on a TCP listener: said, not refused.
        let c = ok(&with_listener("protocol = \"tcp\"\nmax_body_bytes = 10"));
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(
            c.warnings[0]
                .contains("t.toml:8: listener[0].max_body_bytes: does nothing on a TCP listener"),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn a_tcp_listener_cannot_hash_what_a_connection_lacks() {
        let text = with_algorithm("hash", "hash_key = \"header:X-User\"");
        let e = refused(&text.replace(
            "upstream = \"web\"\n",
            "upstream = \"web\"\nprotocol = \"tcp\"\n",
        ));
        assert!(e.contains("t.toml:6:12: listener[0].upstream: upstream \"web\" hashes hash_key = \"header:X-User\", which a TCP connection does not have"), "{e}");
        // The client address it has.
        let text = with_algorithm("maglev", "hash_key = \"client_ip\"");
        ok(&text.replace(
            "upstream = \"web\"\n",
            "upstream = \"web\"\nprotocol = \"tcp\"\n",
        ));
    }

    #[test]
    fn upgrade_protocols_and_the_tunnels_idle_timeout() {
        let c = ok(&with_listener(
            "upgrade = [\"WebSocket\"]\nidle_timeout = \"5m\"",
        ));
        let l = &c.proxy.listeners[0];
        assert_eq!(l.upgrade, ["websocket"]);
        assert_eq!(l.idle_timeout, std::time::Duration::from_secs(300));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert!(ok(GOOD).proxy.listeners[0].upgrade.is_empty());
        let e = refused(&with_listener("upgrade = [\"websocket/13\", \"\"]"));
        assert!(
            e.contains("listener[0].upgrade[0]: \"websocket/13\" is not a protocol name"),
            "{e}"
        );
        assert!(
            e.contains("listener[0].upgrade[1]: \"\" is not a protocol name"),
            "{e}"
        );
        let c = ok(&with_listener("idle_timeout = \"5m\""));
        assert!(
            c.warnings[0].contains("only for upgraded connections, and upgrade is not set"),
            "{:?}",
            c.warnings
        );
        let c = ok(&with_listener(
            "protocol = \"tcp\"\nupgrade = [\"websocket\"]",
        ));
        assert!(
            c.warnings[0].contains("listener[0].upgrade: does nothing on a TCP listener"),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn http2_and_its_limits() {
        assert_eq!(ok(GOOD).proxy.listeners[0].http2, None);
        let c = ok(&with_listener("http2 = true"));
        assert_eq!(
            c.proxy.listeners[0].http2,
            Some(proxy::Http2Settings::default())
        );
        let c = ok(&with_listener(
            "http2 = true\nhttp2_max_concurrent_streams = 10\nhttp2_max_resets_per_second = 5\nhttp2_idle_timeout = \"5s\"",
        ));
        let h2 = c.proxy.listeners[0].http2.unwrap();
        assert_eq!(
            (
                h2.max_concurrent_streams,
                h2.max_resets_per_second,
                h2.idle_timeout
            ),
            (10, 5, std::time::Duration::from_secs(5))
        );
        let e = refused(&with_listener("protocol = \"tcp\"\nhttp2 = true"));
        assert!(
            e.contains("listener[0].http2: a TCP listener (protocol = \"tcp\") relays bytes and cannot speak HTTP/2"),
            "{e}"
        );
        let e = refused(&with_listener(
            "http2 = true\nhttp2_max_concurrent_streams = 0",
        ));
        assert!(
            e.contains("listener[0].http2_max_concurrent_streams: must be between 1 and 10000"),
            "{e}"
        );
        let c = ok(&with_listener("http2_max_concurrent_streams = 10"));
        assert!(
            c.warnings
                .iter()
                .any(|w| w.contains("does nothing without http2 = true")),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn proxy_protocol_from_the_front_needs_trusted_peers() {
        let e = refused(&with_listener("accept_proxy_protocol = true"));
        assert!(
            e.contains("listener[0].accept_proxy_protocol: needs trusted_proxies"),
            "{e}"
        );
        let c = ok(&with_listener(
            "protocol = \"tcp\"\naccept_proxy_protocol = true\ntrusted_proxies = [\"127.0.0.0/8\"]",
        ));
        assert!(c.proxy.listeners[0].accept_proxy_protocol);
        assert!(
            c.warnings.is_empty(),
            "trusted_proxies is read: {:?}",
            c.warnings
        );
    }

    /// Defect 1 of issue 10: zero timeouts passed `check`, then nothing could be served.
    #[test]
    fn zero_timeouts_are_refused() {
        for key in [
            "client_header_timeout",
            "client_body_timeout",
            "send_timeout",
        ] {
            let e = refused(&with_listener(&format!("{key} = \"0s\"")));
            assert!(
                e.contains(&format!(
                    "t.toml:7:{}: listener[0].{key}: must be more than 0: ",
                    key.len() + 4
                )),
                "{e}"
            );
        }
        let c = ok(&with_listener("send_timeout = \"1ms\""));
        assert_eq!(
            c.proxy.listeners[0].send_timeout,
            std::time::Duration::from_millis(1)
        );
    }

    /// Defect 1 of issue 10: `max_connections = 4611686018427387904` passed `check` and made
    /// tokio's semaphore panic at start; every size now has a documented bound.
    #[test]
    fn sizes_run_cannot_honour_are_refused() {
        let huge = "4611686018427387904";
        for (line, want) in [
            (
                format!("max_connections = {huge}"),
                "listener[0].max_connections: must be between 1 and 1000000",
            ),
            (
                "max_connections = 0".to_owned(),
                "listener[0].max_connections: must be between 1 and 1000000",
            ),
            (
                format!("max_header_bytes = {huge}"),
                "listener[0].max_header_bytes: must be between 1024 and 1048576",
            ),
            (
                "max_header_bytes = 100".to_owned(),
                "listener[0].max_header_bytes: must be between 1024 and 1048576",
            ),
            (
                "max_headers = 257".to_owned(),
                "listener[0].max_headers: must be between 1 and 256",
            ),
            (
                format!("max_body_bytes = {huge}"),
                "listener[0].max_body_bytes: must be between 1 and 1073741824",
            ),
            (
                "max_body_bytes = 0".to_owned(),
                "listener[0].max_body_bytes: must be between 1 and 1073741824 (bodies are held in memory",
            ),
            (
                "max_body_bytes = 99999999999999999999999".to_owned(),
                "listener[0].max_body_bytes: must be between 1 and 1073741824",
            ),
        ] {
            let e = refused(&with_listener(&line));
            assert!(e.contains(want), "{line}: {e}");
        }
        let c = ok(&with_listener(
            "max_connections = 1000000\nmax_headers = 256\nmax_header_bytes = 1048576\nmax_body_bytes = 1073741824",
        ));
        let l = &c.proxy.listeners[0];
        assert_eq!(
            (
                l.max_connections,
                l.max_headers,
                l.max_header_bytes,
                l.max_body_bytes
            ),
            (Some(1_000_000), 256, 1 << 20, 1 << 30)
        );
    }

    /// Defect 7 of issue 10: `trusted_proxies`, addresses and CIDR ranges.
    #[test]
    fn trusted_proxies_are_read_into_the_settings() {
        let c = ok(&with_listener(
            r#"trusted_proxies = ["10.0.0.0/8", "192.168.1.5", "::1"]"#,
        ));
        let nets: Vec<String> = c.proxy.listeners[0]
            .trusted_proxies
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(nets, ["10.0.0.0/8", "192.168.1.5/32", "::1/128"]);
        assert!(c.warnings.is_empty());
        assert!(ok(GOOD).proxy.listeners[0].trusted_proxies.is_empty());

        let e = refused(&with_listener(
            r#"trusted_proxies = ["10.0.0.0/33", "10.0.0.1", 7, "proxy.internal"]"#,
        ));
        assert!(
            e.contains("t.toml:7:20: listener[0].trusted_proxies[0]: \"10.0.0.0/33\": the prefix length after / must be a number from 0 to 32"),
            "{e}"
        );
        assert!(
            e.contains("t.toml:7:47: listener[0].trusted_proxies[2]: expected an address such as \"10.0.0.0/8\", not the number 7"),
            "{e}"
        );
        assert!(
            e.contains("listener[0].trusted_proxies[3]: \"proxy.internal\" is not an IP address"),
            "{e}"
        );
        assert!(!e.contains("trusted_proxies[1]"), "{e}");
        assert!(e.contains("3 problems"), "{e}");

        let e = refused(&with_listener(r#"trusted_proxies = "10.0.0.0/8""#));
        assert!(
            e.contains("listener[0].trusted_proxies: expected a list of addresses such as [\"10.0.0.0/8\"], not the string \"10.0.0.0/8\""),
            "{e}"
        );

        let c = ok(&with_listener(r#"trusted_proxies = ["10.1.2.3/8"]"#));
        assert_eq!(
            c.proxy.listeners[0].trusted_proxies[0].to_string(),
            "10.0.0.0/8"
        );
        assert!(
            c.warnings[0].contains("listener[0].trusted_proxies[0]: \"10.1.2.3/8\" has bits set past its prefix; it means 10.0.0.0/8"),
            "{:?}",
            c.warnings
        );
    }

    /// Defect 6 of issue 10: a Unix socket was "invalid port value".
    #[test]
    fn unix_socket_listeners_are_plainly_unsupported() {
        for path in ["unix:/run/fulcrum.sock", "/run/fulcrum.sock"] {
            let e = refused(&GOOD.replace("127.0.0.1:8080", path));
            assert!(
                e.contains(
                    "t.toml:5:10: listener[0].listen: Unix-socket listeners are not supported (yet): \
                     write an IP address and port, such as \"127.0.0.1:8080\""
                ),
                "{e}"
            );
        }
    }

    #[test]
    fn listener_to_missing_upstream() {
        let e = refused(&GOOD.replace("upstream = \"web\"", "upstream = \"api\""));
        assert!(
            e.contains(
                "t.toml:6:12: listener[0].upstream: no upstream is named \"api\"; defined: web"
            ),
            "{e}"
        );
    }

    #[test]
    fn listen_address_twice() {
        let text = GOOD.replace(
            "[[upstream]]",
            "[[listener]]\nlisten = \"127.0.0.1:8080\"\nupstream = \"web\"\n\n[[upstream]]",
        );
        let e = refused(&text);
        assert!(
            e.contains("t.toml:9:10: listener[1].listen: 127.0.0.1:8080 is already used by the listener at line 5"),
            "{e}"
        );
        ok(&text.replace("127.0.0.1:8080", "127.0.0.1:0"));
    }

    #[test]
    fn bad_listen_address() {
        let e = refused(&GOOD.replace("127.0.0.1:8080", "localhost"));
        assert!(
            e.contains("listener[0].listen: \"localhost\" is not an IP address and port"),
            "{e}"
        );
    }
}
