//! `[upstream.discovery]`: backends found in DNS (A/AAAA with a port, or SRV), re-resolved at
//! the answer's TTL within `min_interval` and `max_interval` (NGINX Plus's `server ...
//! resolve` and `service=`, HAProxy's `server-template` with `resolvers`); and `resolvers`,
//! the DNS servers it asks, which an `[[upstream]]` may also give for its backends written
//! with a host name.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use proxy::{DiscoveryQuery, DiscoverySettings, RecordKind};

use super::duration::Zero;
use super::report::Report;
use super::table::{Section, Table};
use super::{algorithm, backend};

pub(super) const SECTION: Section = Section {
    title: "[upstream.discovery]",
    keys: &[
        "type",
        "name",
        "port",
        "resolvers",
        "ipv6",
        "min_interval",
        "max_interval",
        "weight",
        "max_fails",
        "fail_timeout",
        "slow_start",
        "max_conns",
    ],
    not_yet: &[],
};

/// The longest a name may be (RFC 1035 §2.3.4: 255 octets on the wire, 253 written).
const MAX_NAME: usize = 253;

/// A checked `[upstream.discovery]`: its settings but for what the upstream gives (the
/// default resolvers, `max_fails` and `fail_timeout`).
#[derive(Debug)]
pub(super) struct Discovery {
    pub query: DiscoveryQuery,
    /// `None`: the upstream's `resolvers`, or the system's.
    pub resolvers: Option<Vec<SocketAddr>>,
    /// `None`: the upstream's `ipv6`.
    pub ipv6: Option<bool>,
    pub min_interval: Duration,
    pub max_interval: Duration,
    pub weight: u32,
    /// `None`: the upstream's.
    pub max_fails: Option<u32>,
    pub fail_timeout: Option<Duration>,
    pub slow_start: Option<Duration>,
    pub max_conns: u32,
}

impl Discovery {
    /// Its settings, the upstream's `resolvers`, `ipv6`, `max_fails` and `fail_timeout` filled
    /// in.
    pub(super) fn settings(
        self,
        resolvers: &[SocketAddr],
        ipv6: bool,
        max_fails: Option<u32>,
        fail_timeout: Option<Duration>,
    ) -> DiscoverySettings {
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        let mut template = proxy::BackendSettings::new(unspecified);
        template.weight = self.weight;
        template.max_fails = self
            .max_fails
            .or(max_fails)
            .unwrap_or(proxy::BackendSettings::DEFAULT_MAX_FAILS);
        template.fail_timeout = self
            .fail_timeout
            .or(fail_timeout)
            .unwrap_or(proxy::BackendSettings::DEFAULT_FAIL_TIMEOUT);
        template.slow_start = self.slow_start;
        template.max_conns = self.max_conns;
        DiscoverySettings {
            query: self.query,
            resolvers: self.resolvers.unwrap_or_else(|| resolvers.to_vec()),
            ipv6: self.ipv6.unwrap_or(ipv6),
            min_interval: self.min_interval,
            max_interval: self.max_interval,
            template,
        }
    }
}

/// Reads `[upstream.discovery]` of an upstream balanced by `algorithm`; `None` when it is
/// wrong (every problem reported).
pub(super) fn read(
    r: &mut Report<'_>,
    t: &Table<'_>,
    algorithm: &algorithm::Chosen,
) -> Option<Discovery> {
    let kind = t
        .required_text(r, "type", "a record type", "a")
        .and_then(|k| match *k.get_ref() {
            "a" | "A" => Some(RecordKind::A),
            "srv" | "SRV" => Some(RecordKind::Srv),
            other => {
                t.error(
                    r,
                    "type",
                    format!(
                        "unknown type \"{other}\": use \"a\" (A and AAAA records, with port) or \"srv\" (SRV records, which give the port)"
                    ),
                );
                None
            }
        });
    let name = t
        .required_text(r, "name", "a DNS name", "api.service.consul")
        .and_then(|n| match dns_name(n.get_ref()) {
            // A trailing dot stays: it makes the name absolute (no search list).
            Ok(()) => Some((*n.get_ref()).to_owned()),
            Err(why) => {
                t.error(r, "name", why);
                None
            }
        });
    let port: Option<u16> = t.integer(r, "port", 1..=65535, "");
    let resolvers = t.value("resolvers").map(|_| resolvers(r, t));
    let ipv6 = t.flag(r, "ipv6");
    let (min_interval, max_interval) = intervals(r, t);
    let weight = t.integer(r, "weight", 1..=backend::MAX_WEIGHT, "");
    let max_fails = backend::max_fails(r, t);
    let fail_timeout = backend::fail_timeout(r, t);
    let slow_start = algorithm::slow_start(r, t, algorithm);
    let max_conns = t.integer(
        r,
        "max_conns",
        0..=1_000_000,
        " (0, the default, is no limit)",
    );
    let kind = kind?;
    match kind {
        RecordKind::A if port.is_none() => {
            r.error(
                t.span(),
                &t.key("port"),
                "missing: type \"a\" needs the backends' port, like port = 8080",
            );
            return None;
        }
        RecordKind::Srv if port.is_some() => {
            t.error(
                r,
                "port",
                "SRV records give each backend's port: remove port (or use type = \"a\")",
            );
            return None;
        }
        RecordKind::Srv if weight.is_some() => {
            t.error(
                r,
                "weight",
                "SRV records give each backend's weight: remove weight (or use type = \"a\")",
            );
            return None;
        }
        _ => {}
    }
    Some(Discovery {
        query: DiscoveryQuery {
            kind,
            name: name?,
            port,
        },
        resolvers,
        ipv6,
        min_interval,
        max_interval,
        weight: weight.unwrap_or(1),
        max_fails,
        fail_timeout,
        slow_start,
        max_conns: max_conns.unwrap_or(0),
    })
}

/// `min_interval` and `max_interval` (defaults 1 s and 60 s), the first at most the second.
fn intervals(r: &mut Report<'_>, t: &Table<'_>) -> (Duration, Duration) {
    let min = t.duration(
        r,
        "min_interval",
        Zero::Refused("the DNS server would be asked without pause"),
    );
    let max = t.duration(
        r,
        "max_interval",
        Zero::Refused("the DNS server would be asked without pause"),
    );
    let min_d = min.unwrap_or(DiscoverySettings::DEFAULT_MIN_INTERVAL);
    let max_d = max.unwrap_or(DiscoverySettings::DEFAULT_MAX_INTERVAL);
    if min_d > max_d {
        let key = if max.is_some() {
            "max_interval"
        } else {
            "min_interval"
        };
        t.error(
            r,
            key,
            format!(
                "min_interval ({min_d:?}) is longer than max_interval ({max_d:?}): the TTL is clamped between them, so the first must be at most the second"
            ),
        );
        return (min_d, min_d);
    }
    (min_d, max_d)
}

/// `resolvers = ["127.0.0.1:8600", "10.0.0.2"]`: IP addresses of DNS servers, with a port
/// (53 when left out). An empty list is refused: leave the key out for the system's.
pub(super) fn resolvers(r: &mut Report<'_>, t: &Table<'_>) -> Vec<SocketAddr> {
    let entries = t.strings(
        r,
        "resolvers",
        ("an address", "addresses"),
        "127.0.0.1:8600",
    );
    if entries.is_empty() && t.value("resolvers").is_some() {
        t.error(
            r,
            "resolvers",
            "an empty list would ask no server: leave resolvers out for the system's (/etc/resolv.conf)",
        );
    }
    let mut out = Vec::new();
    for (key, entry) in entries {
        let text = entry.get_ref().trim();
        let parsed = text
            .parse::<SocketAddr>()
            .or_else(|_| text.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)));
        match parsed {
            Ok(addr) => out.push(addr),
            Err(_) => r.error(
                entry.span(),
                &key,
                format!(
                    "\"{text}\" is not an IP address with an optional port, like \"127.0.0.1:8600\" or \"10.0.0.2\" (port 53): a resolver is named by its address"
                ),
            ),
        }
    }
    out
}

/// Whether `name` can be a DNS name: labels of letters, digits, `-` and `_` (SRV's
/// `_http._tcp`), each 1 to 63 long, 253 at most in all (RFC 1035 §2.3.4).
pub(super) fn dns_name(name: &str) -> Result<(), String> {
    let bare = name.strip_suffix('.').unwrap_or(name);
    let good_label = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if bare.is_empty() || bare.len() > MAX_NAME || !bare.split('.').all(good_label) {
        return Err(format!(
            "\"{name}\" is not a DNS name: labels of letters, digits, - and _ separated by dots, like \"api.service.consul\" or \"_http._tcp.api.service.consul\""
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proxy::RecordKind;

    use crate::config::testing::*;

    /// An upstream with no static backend and `[upstream.discovery]` of these lines.
    fn discovered(lines: &str) -> String {
        format!(
            "[[listener]]\nlisten = \"127.0.0.1:8080\"\nupstream = \"api\"\n\n[[upstream]]\nname = \"api\"\nmax_fails = 4\n\n  [upstream.discovery]\n{lines}\n"
        )
    }

    #[test]
    fn an_upstream_may_have_only_discovery() {
        let c = ok(&discovered(
            "  type = \"srv\"\n  name = \"_http._tcp.api.service.consul\"\n  resolvers = [\"127.0.0.1:8600\", \"10.0.0.2\"]\n  min_interval = \"2s\"\n  max_interval = \"30s\"\n  slow_start = \"0s\"",
        ));
        let u = &c.proxy.upstreams[0];
        assert!(u.backends.is_empty());
        let d = &u.discovery[0];
        assert_eq!(d.query.kind, RecordKind::Srv);
        assert_eq!(d.query.name, "_http._tcp.api.service.consul");
        assert_eq!(d.query.port, None);
        assert_eq!(
            d.resolvers,
            vec![
                "127.0.0.1:8600".parse().unwrap(),
                "10.0.0.2:53".parse().unwrap()
            ]
        );
        assert_eq!(
            (d.min_interval, d.max_interval),
            (Duration::from_secs(2), Duration::from_secs(30))
        );
        assert_eq!(d.template.max_fails, 4, "the upstream's max_fails");
    }

    /// `ipv6` (nginx's `resolver ... ipv6=`): true unless set; the upstream's is the default
    /// of its discovery and its host-name backends, and `[upstream.discovery]` may set its own.
    #[test]
    fn ipv6_is_on_unless_set_off_and_the_upstream_s_is_the_default() {
        let a = "  type = \"a\"\n  name = \"api.fulcrum.test\"\n  port = 80";
        let c = ok(&discovered(a));
        assert!(c.proxy.upstreams[0].discovery[0].ipv6, "on by default");
        let c = ok(&discovered(&format!("{a}\n  ipv6 = false")));
        assert!(!c.proxy.upstreams[0].discovery[0].ipv6);
        let off = discovered(a).replace("max_fails = 4\n", "max_fails = 4\nipv6 = false\n");
        let off = off.replace(
            "  [upstream.discovery]",
            "  [[upstream.backend]]\n  addr = \"app.fulcrum.test:8080\"\n\n  [upstream.discovery]",
        );
        let c = ok(&off);
        let sources = &c.proxy.upstreams[0].discovery;
        assert_eq!(sources.len(), 2, "{sources:?}");
        assert!(
            sources.iter().all(|s| !s.ipv6),
            "the upstream's: {sources:?}"
        );
        let on_here = ok(&off.replace("port = 80", "port = 80\n  ipv6 = true"));
        let ipv6: Vec<bool> = on_here.proxy.upstreams[0]
            .discovery
            .iter()
            .map(|s| s.ipv6)
            .collect();
        assert!(ipv6.contains(&true) && ipv6.contains(&false), "{ipv6:?}");
        let e = refused(&discovered(&format!("{a}\n  ipv6 = \"off\"")));
        assert!(e.contains("ipv6"), "{e}");
    }

    /// A name written with a trailing dot is absolute (the search list never applies to
    /// it): the dot stays for the resolver to see.
    #[test]
    fn a_trailing_dot_stays() {
        let c = ok(&discovered(
            "  type = \"a\"\n  name = \"api.fulcrum.test.\"\n  port = 80",
        ));
        assert_eq!(
            c.proxy.upstreams[0].discovery[0].query.name,
            "api.fulcrum.test."
        );
        let c = ok(&discovered(
            "  type = \"a\"\n  name = \"api.fulcrum.test\"\n  port = 80",
        ));
        assert_eq!(
            c.proxy.upstreams[0].discovery[0].query.name,
            "api.fulcrum.test"
        );
    }

    #[test]
    fn type_a_needs_a_port_and_srv_refuses_one() {
        let e = refused(&discovered("  type = \"a\"\n  name = \"app.internal\""));
        assert!(
            e.contains("upstream[0].discovery.port: missing: type \"a\" needs the backends' port"),
            "{e}"
        );
        let e = refused(&discovered(
            "  type = \"srv\"\n  name = \"_http._tcp.app\"\n  port = 80",
        ));
        assert!(
            e.contains(
                "t.toml:12:10: upstream[0].discovery.port: SRV records give each backend's port"
            ),
            "{e}"
        );
        let e = refused(&discovered("  type = \"mx\"\n  name = \"app\""));
        assert!(e.contains("unknown type \"mx\""), "{e}");
        let e = refused(&discovered(
            "  type = \"a\"\n  name = \"app..x\"\n  port = 80",
        ));
        assert!(e.contains("is not a DNS name"), "{e}");
        let e = refused(&discovered(
            "  type = \"a\"\n  name = \"app\"\n  port = 80\n  min_interval = \"10s\"\n  max_interval = \"5s\"",
        ));
        assert!(e.contains("upstream[0].discovery.max_interval: min_interval (10s) is longer than max_interval (5s)"), "{e}");
        let e = refused(&discovered(
            "  type = \"a\"\n  name = \"app\"\n  port = 80\n  resolvers = [\"dns.google\"]",
        ));
        assert!(
            e.contains("upstream[0].discovery.resolvers[0]: \"dns.google\" is not an IP address"),
            "{e}"
        );
    }

    #[test]
    fn a_backend_written_with_a_host_name_is_a_source_of_type_a() {
        let text = GOOD.replace("127.0.0.1:9002", "app.internal:8080").replace(
            "connect_timeout = \"250ms\"",
            "resolvers = [\"127.0.0.1:5353\"]",
        );
        let c = ok(&text);
        let u = &c.proxy.upstreams[0];
        assert_eq!(u.backends.len(), 1, "the address stays a backend");
        let d = &u.discovery[0];
        assert_eq!(d.query.kind, RecordKind::A);
        assert_eq!(
            (d.query.name.as_str(), d.query.port),
            ("app.internal", Some(8080))
        );
        assert!(d.template.backup, "the backend's own options");
        assert_eq!(d.resolvers, vec!["127.0.0.1:5353".parse().unwrap()]);
    }
}
