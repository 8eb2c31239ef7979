//! `[[upstream.backend]]`: one server of an upstream (nginx's `server` line in an `upstream`
//! block), and the passive-health keys it shares with its upstream.

use std::net::SocketAddr;
use std::time::Duration;

use balance::Algorithm;
use proxy::LoadSource;
use toml::Spanned;

use super::address;
use super::algorithm::{self, Chosen};
use super::duration::Zero;
use super::report::Report;
use super::table::{Section, Table};

pub(super) const SECTION: Section = Section {
    title: "[[upstream.backend]]",
    keys: &[
        "addr",
        "weight",
        "backup",
        "down",
        "max_fails",
        "fail_timeout",
        "slow_start",
        "max_conns",
        "agent",
        "node_exporter",
        "memcached",
        "agent_check",
        "probe",
    ],
    not_yet: &[],
};

/// The largest weight. Weights are relative, so a million gives any ratio worth expressing;
/// the ring of `hash consistent` and `bounded_load` bounds their total further (see
/// `upstream::MAX_RING_WEIGHT`).
pub(super) const MAX_WEIGHT: i64 = 1_000_000;

/// The largest `max_fails`: more failures than this within one `fail_timeout` is passive
/// health turned off in all but name (write 0 for that).
const MAX_FAILS: i64 = 1_000_000;

/// The largest `max_conns`: more requests in flight on one backend than a process has
/// descriptors is no limit at all (write nothing for that).
const MAX_CONNS: i64 = 1_000_000;

/// A checked backend.
#[derive(Debug)]
pub(super) struct Backend {
    /// An address, or a host name and port (a source of DNS discovery).
    pub addr: Spanned<address::Target>,
    /// The address as written (a host name stays a host name: rings place it by this).
    pub name: String,
    pub weight: u32,
    pub backup: bool,
    pub down: bool,
    /// `None`: the upstream's.
    pub max_fails: Option<u32>,
    /// `None`: the upstream's.
    pub fail_timeout: Option<Duration>,
    /// `None`: the upstream's (`Some(0)` opts out of it).
    pub slow_start: Option<Duration>,
    /// Requests in flight on it at most (0: no limit).
    pub max_conns: u32,
    /// Where its load reports come from.
    pub load_source: Option<LoadSource>,
    /// Where `prequal` probes it (`None`: the backend itself).
    pub probe: Option<SocketAddr>,
}

/// The algorithms that read load reports (`balance::Algorithm::reads_load_reports`), named for
/// a message: "dynamic_wrr, dwlc, capacity_weighted and utilization_wrr".
fn load_report_algorithms() -> String {
    let names: Vec<&str> = Algorithm::ALL
        .iter()
        .filter(|a| a.reads_load_reports())
        .map(|a| a.name())
        .collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// How a source key's address becomes a [`LoadSource`].
type MakeSource = fn(std::net::SocketAddr) -> LoadSource;

/// The backend's load source, one at most: `agent = "host:port"` (a `fulcrum agent`),
/// `node_exporter = "host:port"` or `memcached = "host:port"` (where agents push); only for
/// algorithms that use load reports (anywhere else it would be polled for nothing).
fn load_source(r: &mut Report<'_>, t: &Table<'_>, algorithm: &Chosen) -> Option<LoadSource> {
    let keys: [(&str, &str, MakeSource); 4] = [
        ("agent", "127.0.0.1:9101", LoadSource::Agent),
        ("node_exporter", "127.0.0.1:9100", LoadSource::NodeExporter),
        ("memcached", "127.0.0.1:11211", LoadSource::Memcached),
        ("agent_check", "127.0.0.1:9102", LoadSource::AgentCheck),
    ];
    let given = keys
        .iter()
        .filter_map(|&(key, example, make)| {
            t.text(r, key, "an address", example)
                .map(|value| (key, value, make))
        })
        .collect::<Vec<_>>();
    // Every address is checked, whatever else is wrong with the backend.
    let mut sources = Vec::new();
    for (key, value, make) in &given {
        match address::backend(value.get_ref()) {
            Ok(addr) => sources.push(Some(make(addr))),
            Err(why) => {
                r.error(value.span(), &t.key(key), why);
                sources.push(None);
            }
        }
    }
    if given.len() > 1 {
        let (key, value, _) = &given[1];
        r.error(
            value.span(),
            &t.key(key),
            "a backend has one load source: keep one of agent, node_exporter, memcached and agent_check",
        );
        return None;
    }
    let (key, value, _) = given.first()?;
    if *key == "agent_check" {
        // HAProxy's agent-check sets weights itself: not for an algorithm whose model does.
        if algorithm.reads_load_reports() {
            r.error(
                value.span(),
                &t.key(key),
                format!(
                    "agent_check sets the weight itself, as in HAProxy, while {algorithm} computes it from load reports: use agent, node_exporter or memcached with {algorithm}, or another algorithm with agent_check"
                ),
            );
            return None;
        }
    } else if !algorithm.reads_load_reports() {
        r.error(
            value.span(),
            &t.key(key),
            format!(
                "load reports are used by {}, not by {algorithm}: choose one of those or remove {key}",
                load_report_algorithms()
            ),
        );
        return None;
    }
    sources.pop().flatten()
}

/// Reads one backend of an upstream balanced by `algorithm`; `None` when its address is
/// missing or wrong (the other keys are still checked).
pub(super) fn read(r: &mut Report<'_>, t: &Table<'_>, algorithm: &Chosen) -> Option<Backend> {
    let addr = t.required_text(r, "addr", "an address", "127.0.0.1:9001");
    let addr = addr.and_then(|a| match address::backend_target(a.get_ref()) {
        Ok(target) => Some((Spanned::new(a.span(), target), a.get_ref().to_string())),
        Err(why) => {
            r.error(a.span(), &t.key("addr"), why);
            None
        }
    });
    let weight = t.integer(
        r,
        "weight",
        1..=MAX_WEIGHT,
        " (to take a backend out of rotation, use down = true)",
    );
    let backup = t.flag(r, "backup");
    let down = t.flag(r, "down");
    let max_fails = max_fails(r, t);
    let fail_timeout = fail_timeout(r, t);
    let slow_start = algorithm::slow_start(r, t, algorithm);
    let max_conns = t.integer(
        r,
        "max_conns",
        0..=MAX_CONNS,
        " (0, the default, is no limit)",
    );
    let load_source = load_source(r, t, algorithm);
    let probe = probe(r, t, algorithm);
    let (addr, name) = addr?;
    Some(Backend {
        addr,
        name,
        weight: weight.unwrap_or(1),
        backup: backup.unwrap_or(false),
        down: down.unwrap_or(false),
        max_fails,
        fail_timeout,
        slow_start,
        max_conns: max_conns.unwrap_or(0),
        load_source,
        probe,
    })
}

/// `probe = "host:port"`: where `prequal` sends its `GET /probe` for this backend (a
/// `fulcrum agent --probe-target`, or another port of the backend); only for `prequal`.
fn probe(r: &mut Report<'_>, t: &Table<'_>, algorithm: &Chosen) -> Option<SocketAddr> {
    let value = t.text(r, "probe", "an address", "127.0.0.1:9101")?;
    if algorithm.algorithm != Algorithm::Prequal {
        r.error(
            value.span(),
            &t.key("probe"),
            format!(
                "only prequal probes its backends, not {algorithm}: remove probe or write algorithm = \"prequal\""
            ),
        );
        return None;
    }
    match address::backend(value.get_ref()) {
        Ok(addr) => Some(addr),
        Err(why) => {
            r.error(value.span(), &t.key("probe"), why);
            None
        }
    }
}

/// `max_fails`, on an upstream or a backend; 0 turns passive health off (nginx's meaning).
pub(super) fn max_fails(r: &mut Report<'_>, t: &Table<'_>) -> Option<u32> {
    t.integer(
        r,
        "max_fails",
        0..=MAX_FAILS,
        " (0 turns passive health off)",
    )
}

/// `fail_timeout`, on an upstream or a backend. 0 would take a failing backend out for no
/// time at all, which is `max_fails = 0` in disguise: refused, pointing there.
pub(super) fn fail_timeout(r: &mut Report<'_>, t: &Table<'_>) -> Option<Duration> {
    t.duration(
        r,
        "fail_timeout",
        Zero::Refused(
            "a failed backend would be back at once; to turn passive health off, write max_fails = 0",
        ),
    )
}

#[cfg(test)]
mod tests {
    use crate::config::testing::*;

    #[test]
    fn bad_backend_addresses() {
        let e = refused(&GOOD.replace("127.0.0.1:9001", "127.0.0.1"));
        assert!(
            e.contains("t.toml:14:10: upstream[0].backend[0].addr: \"127.0.0.1\" has no port"),
            "{e}"
        );
        let e = refused(&GOOD.replace("127.0.0.1:9001", "http://127.0.0.1:9001/"));
        assert!(
            e.contains("upstream[0].backend[0].addr: write the address without \"http://\""),
            "{e}"
        );
    }

    /// Defect 6 of issue 10: `addr = "unix:/run/app.sock"` was "invalid port value".
    #[test]
    fn unix_socket_backends_are_plainly_unsupported() {
        for path in ["unix:/run/app.sock", "/run/app.sock"] {
            let e = refused(&GOOD.replace("127.0.0.1:9001", path));
            assert!(
                e.contains(
                    "t.toml:14:10: upstream[0].backend[0].addr: Unix-socket backends are not \
                     supported (yet): write an IP address and port, such as \"127.0.0.1:9001\""
                ),
                "{e}"
            );
            assert!(!e.contains("invalid port"), "{e}");
        }
    }

    /// Defect 1 of issue 10: `fail_timeout = "0s"` would never take a failing backend out.
    #[test]
    fn passive_health_keys() {
        let e = refused(&GOOD.replace("weight = 3", "weight = 3\n  fail_timeout = \"0s\""));
        assert!(
            e.contains("upstream[0].backend[0].fail_timeout: must be more than 0: a failed backend would be back at once; to turn passive health off, write max_fails = 0"),
            "{e}"
        );
        let e = refused(&GOOD.replace("weight = 3", "weight = 3\n  max_fails = -1"));
        assert!(
            e.contains("upstream[0].backend[0].max_fails: must be between 0 and 1000000"),
            "{e}"
        );
        let text = with_algorithm("least_conn", "max_fails = 3\nfail_timeout = \"30s\"")
            .replace("weight = 3", "weight = 3\n  max_fails = 0");
        let u = &ok(&text).proxy.upstreams[0];
        assert_eq!(u.backends[0].max_fails, 0);
        assert_eq!(u.backends[1].max_fails, 3);
        assert_eq!(
            u.backends[1].fail_timeout,
            std::time::Duration::from_secs(30)
        );
    }

    #[test]
    fn one_load_source_and_only_for_load_models() {
        let e = refused(&GOOD.replace("weight = 3", "weight = 3\n  agent = \"127.0.0.1:9101\""));
        assert!(
            e.contains("agent: load reports are used by dynamic_wrr, dwlc, capacity_weighted and utilization_wrr"),
            "{e}"
        );
        let text = with_algorithm("dwlc", "").replace(
            "weight = 3",
            "weight = 3\n  agent = \"127.0.0.1:9101\"\n  node_exporter = \"127.0.0.1:9100\"",
        );
        let e = refused(&text);
        assert!(e.contains("a backend has one load source"), "{e}");
        let text = with_algorithm("dwlc", "poll_interval = \"500ms\"").replace(
            "weight = 3",
            "weight = 3\n  node_exporter = \"127.0.0.1:9100\"",
        );
        let u = &ok(&text).proxy.upstreams[0];
        assert_eq!(
            u.backends[0].load_source,
            Some(proxy::LoadSource::NodeExporter(
                ([127, 0, 0, 1], 9100).into()
            ))
        );
        // Unset, poll_timeout follows a short poll_interval.
        assert_eq!(u.poll_timeout, std::time::Duration::from_millis(500));
    }
}
