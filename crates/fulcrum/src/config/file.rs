//! The file as a whole: its top-level keys, its sections, and what ties sections together —
//! upstream names are unique, every listener sends to an upstream that exists, and no address
//! is listened on twice (by two listeners, or a listener and the admin listener). A problem
//! between two places is shown at the later one, naming the other; an address is checked
//! against the others' even when the rest of its listener is wrong.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use proxy::access_log::{Destination, Format, Template};

use super::admin::{self, Admin};
use super::cluster;
use super::duration::Zero;
use super::listener::{self, Listener};
use super::report::Report;
use super::table::{Section, Table};
use super::upstream::{self, Upstream};

pub(super) const SECTION: Section = Section {
    title: "the top level",
    keys: &[
        "workers",
        "access_log",
        "access_log_format",
        "shutdown_timeout",
        "state_file",
        "log_level",
        "log_format",
        "listener",
        "upstream",
        "admin",
        "cluster",
        "include",
    ],
    not_yet: &[],
};

/// The most worker threads. Each is a thread with its own runtime and its own descriptor per
/// listener; beyond the number of cores more workers only take turns, and the largest
/// servers have a few hundred cores.
pub(super) const MAX_WORKERS: i64 = 1024;

/// A checked file: every section that could be read, each checked.
#[derive(Debug)]
pub(super) struct File {
    /// `None`: one per core (see `settings`).
    pub workers: Option<usize>,
    /// `None`: to stderr, the default.
    pub access_log: Option<Option<Destination>>,
    pub access_log_format: Option<Format>,
    pub shutdown_timeout: Option<Duration>,
    /// Where the admin API's changes are kept across restarts (`None`: in memory only).
    pub state_file: Option<std::path::PathBuf>,
    /// `log_level` and `log_format`.
    pub log: super::log::Log,
    pub listeners: Vec<Listener>,
    pub upstreams: Vec<Upstream>,
    /// `None`: no `[admin]`, no admin listener.
    pub admin: Option<Admin>,
    /// `None`: no `[cluster]`, the admin API's changes stay on this instance.
    pub cluster: Option<crate::cluster::ClusterSettings>,
}

/// Reads and checks the whole document; every problem goes to `r`. Sections are read, and
/// their problems found, in the same order as ever: problems with the file as a whole come
/// last, in the order they were found.
pub(super) fn read<'a>(r: &mut Report<'_>, doc: &'a Spanned<DeTable<'a>>) -> File {
    let top = Table::new(r, String::new(), doc.span(), doc.get_ref(), &SECTION);
    let workers = top.integer(
        r,
        "workers",
        1..=MAX_WORKERS,
        " (or leave it out: one per core)",
    );
    let access_log = access_log(r, &top);
    let access_log_format = access_log_format(r, &top);
    // 0: close what is open at once, without a grace period.
    let shutdown_timeout = top.duration(r, "shutdown_timeout", Zero::Allowed);
    let state_file = state_file(r, &top);
    let log = super::log::read(r, &top);
    let upstreams = Upstreams::read(r, &top);
    let listeners = Listeners::read(r, &top, upstreams.names().as_deref());
    tcp_upstreams(r, &listeners.read, &upstreams.read);
    h2_upstreams(r, &listeners.read, &upstreams.read);
    if top.no_items("listener") {
        r.error_in_file(
            "listener",
            "no [[listener]]: add one, e.g. listen = \"127.0.0.1:8080\" and upstream = \"web\"",
        );
    }
    // A file whose listeners only redirect or answer themselves (routes without upstreams)
    // needs none; any listener read without routes has an upstream, reported if missing.
    let routes_only = !listeners.read.is_empty()
        && listeners
            .read
            .iter()
            .all(|l| l.upstream.is_none() && !l.routes.is_empty());
    if top.no_items("upstream") && !routes_only {
        r.error_in_file(
            "upstream",
            "no [[upstream]]: add one with at least one [[upstream.backend]]",
        );
    }
    let admin = top.section(r, "admin", &admin::SECTION).and_then(|t| {
        let at = t.span_of("listen").unwrap_or_else(|| t.span());
        admin::read(r, &t).map(|a| (a, at))
    });
    if let Some((a, at)) = &admin {
        listeners.check_admin_port(r, a, at.clone());
    }
    let admin = admin.map(|(a, _)| a);
    let cluster = top
        .section(r, "cluster", &cluster::SECTION)
        .and_then(|t| cluster::read(r, &t));
    File {
        workers,
        access_log,
        access_log_format,
        shutdown_timeout,
        state_file,
        log,
        listeners: listeners.read,
        upstreams: upstreams.read,
        admin,
        cluster,
    }
}

/// `access_log_format`: `"combined"`, `"json"`, or a template of nginx's variables
/// (`'$remote_addr "$request" $status'`), compiled here once.
fn access_log_format(r: &mut Report<'_>, top: &Table<'_>) -> Option<Format> {
    top.text(r, "access_log_format", "a format", "combined")
        .and_then(|f| match *f.get_ref() {
            "combined" => Some(Format::Combined),
            "json" => Some(Format::Json),
            template if template.contains('$') => match Template::parse(template) {
                Ok(t) => Some(Format::Template(std::sync::Arc::new(t))),
                Err(e) => {
                    r.error(f.span(), "access_log_format", e.to_string());
                    None
                }
            },
            other => {
                r.error(
                    f.span(),
                    "access_log_format",
                    format!("\"{other}\" is not a format: write \"combined\" (nginx's, with fulcrum's fields after it), \"json\" (one object a line), or a template of nginx's variables such as '$remote_addr \"$request\" $status $body_bytes_sent'"),
                );
                None
            }
        })
}

/// The `[[upstream]]`s that could be read, and their names, which must be unique.
struct Upstreams {
    read: Vec<Upstream>,
    /// Where each name is first defined.
    first_defined: HashMap<String, std::ops::Range<usize>>,
    /// Whether some upstream's name could not be read.
    unnamed: bool,
}

impl Upstreams {
    fn read(r: &mut Report<'_>, top: &Table<'_>) -> Upstreams {
        let mut upstreams = Upstreams {
            read: Vec::new(),
            first_defined: HashMap::new(),
            unnamed: false,
        };
        let tables = top.sections(r, "upstream", &upstream::SECTION);
        for t in &tables {
            let Some(u) = upstream::read(r, t) else {
                upstreams.unnamed = true;
                continue;
            };
            let name = u.name.get_ref();
            if let Some(first) = upstreams.first_defined.get(name) {
                let first = r.place(first, &u.name.span());
                r.error(
                    u.name.span(),
                    &t.key("name"),
                    format!(
                        "upstream \"{name}\" is already defined at {first}: names must be unique"
                    ),
                );
            } else {
                upstreams.first_defined.insert(name.clone(), u.name.span());
            }
            upstreams.read.push(u);
        }
        upstreams
    }

    /// The names defined, sorted; `None` when some upstream's name could not be read (then
    /// any name a listener gives may be right).
    fn names(&self) -> Option<Vec<&str>> {
        let mut defined: Vec<&str> = self.first_defined.keys().map(String::as_str).collect();
        defined.sort_unstable();
        (!self.unnamed).then_some(defined)
    }
}

/// The `[[listener]]`s that could be read, and the addresses they take.
struct Listeners {
    read: Vec<Listener>,
    /// Where the listener on each address says so (the last, when two share one); listeners
    /// on port 0 are left out: each gets a free port of its own.
    at: HashMap<SocketAddr, (std::ops::Range<usize>, String)>,
}

impl Listeners {
    /// Reads every listener; `upstreams`: the names it may send to (see [`listener::read`]).
    /// An address is checked for its uniqueness even when the rest of its listener is wrong.
    fn read(r: &mut Report<'_>, top: &Table<'_>, upstreams: Option<&[&str]>) -> Listeners {
        let mut listeners = Listeners {
            read: Vec::new(),
            at: HashMap::new(),
        };
        let tables = top.sections(r, "listener", &listener::SECTION);
        for t in &tables {
            let (listen, l) = listener::read(r, t, upstreams);
            // Port 0 asks the system for a free port: several such listeners never collide.
            if let Some(listen) = listen
                && listen.get_ref().port() != 0
                && let Some((first, _)) = listeners
                    .at
                    .insert(*listen.get_ref(), (listen.span(), t.key("listen")))
            {
                let place = r.place(&first, &listen.span());
                r.error(
                    listen.span(),
                    &t.key("listen"),
                    format!(
                        "{} is already used by the listener at {place}",
                        listen.get_ref()
                    ),
                );
            }
            listeners.read.extend(l);
        }
        listeners
    }

    /// Refuses an admin listener on a listener's address: at the later of the two, naming
    /// the other; `admin` is where the admin listener's address is written (its `[admin]`
    /// header when the address is the default).
    fn check_admin_port(&self, r: &mut Report<'_>, a: &Admin, admin: std::ops::Range<usize>) {
        if a.listen.port() == 0 {
            return;
        }
        let Some((listener, key)) = self.at.get(&a.listen) else {
            return;
        };
        if admin.start > listener.start {
            let place = r.place(listener, &admin);
            r.error(
                admin,
                "admin.listen",
                format!(
                    "{} is already used by the listener at {place}: give the admin listener its own port",
                    a.listen
                ),
            );
        } else {
            let place = r.place(&admin, listener);
            r.error(
                listener.clone(),
                key,
                format!(
                    "{} is already used by the admin listener at {place}: give the admin listener its own port",
                    a.listen
                ),
            );
        }
    }
}

/// A TCP listener's upstream may hash only the client's address: a connection has no header,
/// cookie or URI to hash, nor a cookie to stick by; and it may not speak TLS to its backends
/// (not built for TCP yet).
fn tcp_upstreams(r: &mut Report<'_>, listeners: &[Listener], upstreams: &[Upstream]) {
    for l in listeners
        .iter()
        .filter(|l| l.protocol == proxy::Protocol::Tcp)
    {
        let Some(name) = &l.upstream else {
            continue;
        };
        let Some(u) = upstreams.iter().find(|u| u.name.get_ref() == name) else {
            continue;
        };
        let b = &u.balancing;
        if b.algorithm.affinity() == Some(balance::Affinity::Key)
            && b.hash_key != proxy::HashKey::ClientIp
        {
            r.error(
                l.upstream_at.0.clone(),
                &l.upstream_at.1,
                format!(
                    "upstream \"{name}\" hashes hash_key = \"{}\", which a TCP connection does not have: give it hash_key = \"client_ip\", or give this listener an upstream of its own",
                    b.hash_key
                ),
            );
        }
        if u.sticky.is_some() {
            r.error(
                l.upstream_at.0.clone(),
                &l.upstream_at.1,
                format!(
                    "upstream \"{name}\" has sticky sessions, which need an HTTP cookie a TCP connection does not carry: give this listener an upstream without sticky (hash_key = \"client_ip\" with ip_hash or hash keeps a client's connections on one backend)"
                ),
            );
        }
        if u.tls.is_some() {
            r.error(
                l.upstream_at.0.clone(),
                &l.upstream_at.1,
                format!(
                    "upstream \"{name}\" has tls = true, which TCP listeners do not support yet (TLS to backends is built for HTTP): give this listener an upstream without tls"
                ),
            );
        }
    }
}

/// An upstream spoken to in HTTP/2 takes requests, not connections: a TCP listener has none
/// to give it, and an HTTP/1.1 upgrade (WebSocket) cannot be carried over HTTP/2 (RFC 9113
/// §8.6; RFC 8441's extended CONNECT is not built).
fn h2_upstreams(r: &mut Report<'_>, listeners: &[Listener], upstreams: &[Upstream]) {
    for (l, name) in listeners
        .iter()
        .flat_map(|l| l.upstream_names().map(move |n| (l, n)))
    {
        let Some(u) = upstreams.iter().find(|u| *u.name.get_ref() == name) else {
            continue;
        };
        let Some(protocol) = &u.backend_protocol else {
            continue;
        };
        if *protocol.get_ref() != proxy::BackendProtocol::H2 {
            continue;
        }
        let why = if l.protocol == proxy::Protocol::Tcp {
            "a TCP listener relays connections, not HTTP requests"
        } else if !l.upgrade.is_empty() {
            "this listener passes upgrades (upgrade = [...]), which HTTP/2 cannot carry to a backend"
        } else {
            continue;
        };
        let line = r.line_of(&protocol.span());
        r.error(
            l.upstream_at.0.clone(),
            &l.upstream_at.1,
            format!(
                "upstream \"{name}\" has backend_protocol = \"h2\" (line {line}), but {why}: give this listener an upstream with backend_protocol = \"http1\""
            ),
        );
    }
}

/// `state_file`: a file's path, relative ones read against the configuration's directory. A
/// directory fulcrum cannot write in is a warning: it starts, but the admin API's changes
/// would not survive a restart.
fn state_file(r: &mut Report<'_>, top: &Table<'_>) -> Option<std::path::PathBuf> {
    let f = top.text(
        r,
        "state_file",
        "a file's path",
        "/var/lib/fulcrum/state.json",
    )?;
    if f.get_ref().trim().is_empty() {
        r.error(
            f.span(),
            "state_file",
            "an empty path: give a file's path such as \"/var/lib/fulcrum/state.json\", or leave the key out to keep the admin API's changes in memory only",
        );
        return None;
    }
    let path = r.dir().join(f.get_ref());
    if let Err(why) = writable_directory(&path) {
        r.warn(
            &f.span(),
            format!("state_file: {why}: the admin API's changes would not survive a restart; create the directory, or make it writable by the user fulcrum runs as"),
        );
    }
    Some(path)
}

/// Whether a file can be made in `path`'s directory: tried with a scratch file, removed at
/// once (the permission bits alone do not say, for root or under ACLs).
fn writable_directory(path: &std::path::Path) -> Result<(), String> {
    let dir = crate::state::file::directory(path);
    let probe = dir.join(format!(".fulcrum-check-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(format!(
            "fulcrum cannot write in its directory {} ({e})",
            dir.display()
        )),
    }
}

/// `access_log`: `true` (stderr, the default), `false` (none), `"stderr"`, or a file's path.
fn access_log(r: &mut Report<'_>, top: &Table<'_>) -> Option<Option<Destination>> {
    let value = top.value("access_log")?;
    match value.get_ref() {
        DeValue::Boolean(true) => Some(Some(Destination::Stderr)),
        DeValue::Boolean(false) => Some(None),
        DeValue::String(s) if s.as_ref() == "stderr" => Some(Some(Destination::Stderr)),
        DeValue::String(s) if !s.trim().is_empty() => Some(Some(Destination::File(
            std::path::PathBuf::from(s.as_ref()),
        ))),
        other => {
            r.error(
                value.span(),
                "access_log",
                format!(
                    "expected true, false, \"stderr\" or a file's path such as \"/var/log/fulcrum/access.log\", not {}",
                    super::table::found(other)
                ),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::*;
    use proxy::access_log::{Destination, Format};

    /// Defect 1 of issue 10: `workers` had no upper bound (a huge value made the proxy try to
    /// allocate a socket list that size).
    #[test]
    fn workers_are_bounded() {
        for n in ["0", "1025", "4611686018427387904"] {
            let e = refused(&GOOD.replace("workers = 2", &format!("workers = {n}")));
            assert!(
                e.starts_with("t.toml:2:11: workers: must be between 1 and 1024 (or leave it out: one per core)"),
                "{e}"
            );
        }
        assert_eq!(
            ok(&GOOD.replace("workers = 2", "workers = 1024"))
                .proxy
                .workers,
            1024
        );
        let w = ok(&GOOD.replace("workers = 2", "")).proxy.workers;
        assert!((1..=1024).contains(&w), "{w}");
    }

    #[test]
    fn top_level_keys() {
        let c = ok(&GOOD.replace(
            "workers = 2",
            "workers = 2\naccess_log = false\nshutdown_timeout = \"0s\"",
        ));
        assert!(c.proxy.access_log.is_none());
        assert_eq!(c.proxy.shutdown_timeout, std::time::Duration::ZERO);
        let c = ok(GOOD);
        let log = c.proxy.access_log.unwrap();
        assert_eq!(log.destination, Destination::Stderr);
        assert_eq!(log.format, Format::Combined);
        let c = ok(&GOOD.replace(
            "workers = 2",
            "workers = 2\naccess_log = \"/var/log/fulcrum/access.log\"\naccess_log_format = \"json\"",
        ));
        let log = c.proxy.access_log.unwrap();
        assert_eq!(
            log.destination,
            Destination::File("/var/log/fulcrum/access.log".into())
        );
        assert_eq!(log.format, Format::Json);
        let e = refused(&GOOD.replace("workers = 2", "access_log = 3"));
        assert!(
            e.contains("access_log: expected true, false, \"stderr\" or a file's path"),
            "{e}"
        );
        let e = refused(&GOOD.replace("workers = 2", "access_log_format = \"common\""));
        assert!(e.contains("\"common\" is not a format"), "{e}");
        // A template: compiled; an unknown variable refused with its place and the known ones.
        let c = ok(&GOOD.replace(
            "workers = 2",
            "workers = 2\naccess_log_format = '$remote_addr \"$request\" $http_x_id'",
        ));
        match c.proxy.access_log.unwrap().format {
            Format::Template(t) => assert_eq!(t.source(), "$remote_addr \"$request\" $http_x_id"),
            other => panic!("{other:?}"),
        }
        let e = refused(&GOOD.replace("workers = 2", "access_log_format = '$status $remote_adr'"));
        assert!(
            e.contains("t.toml:2:21: access_log_format: at character 9 of the template: unknown variable \"$remote_adr\"; known: $remote_addr, $remote_user"),
            "{e}"
        );
        assert_eq!(c.proxy.shutdown_timeout, std::time::Duration::from_secs(10));
        let e = refused(&GOOD.replace("workers = 2", "shutdown_timeout = \"2y\""));
        assert!(
            e.contains("t.toml:2:20: shutdown_timeout: at most a year"),
            "{e}"
        );
    }

    #[test]
    fn state_file_is_a_path_in_a_writable_directory() {
        let c = ok(&GOOD.replace(
            "workers = 2",
            "workers = 2\nstate_file = \"/tmp/state.json\"",
        ));
        assert_eq!(c.state_file, Some("/tmp/state.json".into()));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(ok(GOOD).state_file, None);
        let c = ok(&GOOD.replace(
            "workers = 2",
            "workers = 2\nstate_file = \"/nonexistent-fulcrum-dir/state.json\"",
        ));
        assert!(
            c.warnings.iter().any(|w| w.starts_with("t.toml:3: state_file: fulcrum cannot write in its directory /nonexistent-fulcrum-dir")),
            "{:?}",
            c.warnings
        );
        let e = refused(&GOOD.replace("workers = 2", "state_file = \"\""));
        assert!(e.contains("state_file: an empty path"), "{e}");
        let e = refused(&GOOD.replace("workers = 2", "state_file = 3"));
        assert!(e.contains("state_file: expected a file's path"), "{e}");
    }

    #[test]
    fn a_listener_of_an_unnamed_upstream_is_not_blamed() {
        let e = refused(&GOOD.replace("name = \"web\"\n", ""));
        assert!(!e.contains("no upstream is named"), "{e}");
    }
}
