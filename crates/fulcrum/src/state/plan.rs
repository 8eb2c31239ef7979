//! Overrides against a configuration file, with no I/O: which still hold and how they change
//! the file's settings ([`plan`]), and how a change through the admin API becomes a record
//! ([`changed`]).
//!
//! The rule is HAProxy's `server-state-file` one, made per item: what the operator set at
//! runtime is applied again after a reload or a restart, unless the file itself changed that
//! item since — then the file wins (an edit of the file is the newer decision), and the
//! override is dropped with a line saying so. An item's base is the file's value when the
//! override was made; "the file changed it" is: its value now differs from the base.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;

use proxy::settings::Pin;
use proxy::{AdminState, BackendSettings, ProxySettings, UpstreamSettings};

use super::record::{
    Added, AlgorithmRecord, BackendRecord, Balancing, Item, Key, Record, Records, State,
};

/// Each upstream's balancing options as its file writes them, by upstream name.
pub type Written = BTreeMap<String, serde_json::Map<String, serde_json::Value>>;

/// What the configuration file says of one upstream.
#[derive(Debug, Clone)]
pub struct FileUpstream {
    /// Its settings as the file gives them, no override applied.
    pub settings: UpstreamSettings,
    /// Its algorithm and balancing options as written.
    pub balancing: Balancing,
}

impl FileUpstream {
    /// The file's backend at `addr`; one DNS discovery found is not the file's (its base is
    /// "not in the file", so that a reload keeps what the operator set on it).
    pub fn backend(&self, addr: SocketAddr) -> Option<&BackendSettings> {
        self.settings
            .backends
            .iter()
            .find(|b| b.addr == addr && b.discovered.is_none())
    }

    /// The file's state of `addr` (`down = true`: disabled); `None`: not in the file.
    pub fn state(&self, addr: SocketAddr) -> Option<State> {
        self.backend(addr).map(|b| {
            State(if b.down {
                AdminState::Disabled
            } else {
                AdminState::Up
            })
        })
    }

    pub fn weight(&self, addr: SocketAddr) -> Option<u32> {
        self.backend(addr).map(|b| b.weight)
    }
}

/// The file's upstreams by name.
pub type Files = BTreeMap<String, FileUpstream>;

/// The file's upstreams: `proxy`'s settings (no override applied yet) with each one's
/// options as written (`written`, by upstream name: see [`crate::config::balancing::written`]).
pub fn files(proxy: &ProxySettings, written: &Written) -> Files {
    proxy
        .upstreams
        .iter()
        .map(|u| {
            let balancing = Balancing {
                algorithm: u.algorithm.name().to_owned(),
                options: written.get(&u.name).cloned().unwrap_or_default(),
            };
            (
                u.name.clone(),
                FileUpstream {
                    settings: u.clone(),
                    balancing,
                },
            )
        })
        .collect()
}

/// An override the file won over (or that no longer fits it), for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub key: String,
    pub upstream: String,
    pub backend: Option<SocketAddr>,
    /// `state`, `weight`, `added`, `removed`, `algorithm`.
    pub item: &'static str,
    /// The override's value.
    pub value: String,
    /// The file's value when the override was made, and now (empty: the file is not why).
    pub file_was: String,
    pub file_now: String,
    /// Why, in an operator's words.
    pub why: String,
}

impl fmt::Display for Dropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "upstream \"{}\"", self.upstream)?;
        if let Some(b) = self.backend {
            write!(f, " backend {b}")?;
        }
        write!(
            f,
            ": {} override {} dropped: {}",
            self.item, self.value, self.why
        )?;
        match self.file_was.is_empty() {
            true => Ok(()),
            false => write!(
                f,
                " (the file had {}, it now has {})",
                self.file_was, self.file_now
            ),
        }
    }
}

/// An override applied to the file's settings, for the log and the reload's answer.
pub type Applied = String;

/// The overrides that hold against a file, and what became of the others.
#[derive(Debug, Default)]
pub struct Plan {
    pub records: Records,
    pub applied: Vec<Applied>,
    pub dropped: Vec<Dropped>,
}

const FILE_CHANGED: &str =
    "the configuration file changed this item since the override was made; the file wins";

fn shown<T: fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "not in the file".to_owned(), |v| v.to_string())
}

/// Applies `records` to `upstreams` (the settings of the file in `files`, as read): backends
/// added and removed, states and weights as pins, algorithms through
/// [`crate::config::balancing::apply`] (the API's own check). Overrides of items the file
/// changed since, of upstreams the file no longer has, and those that no longer fit it are
/// dropped.
pub fn plan(records: &Records, upstreams: &mut [UpstreamSettings], files: &Files) -> Plan {
    let mut plan = Plan::default();
    // Backends first: an algorithm is checked against the backends it will balance.
    let (backends, algorithms): (Vec<_>, Vec<_>) = records
        .iter()
        .partition(|(_, r)| matches!(r, Record::Backend(_)));
    for (key, record) in backends.into_iter().chain(algorithms) {
        plan_one(key, record, upstreams, files, &mut plan);
    }
    for u in upstreams.iter_mut() {
        u.pins = pins(&plan.records, &u.name);
    }
    plan
}

/// Applies one more record to `upstreams`, beside those `plan` holds already (see [`plan`]):
/// what a record from the fleet is checked by, after the records in force.
pub fn plan_one(
    key: &str,
    record: &Record,
    upstreams: &mut [UpstreamSettings],
    files: &Files,
    plan: &mut Plan,
) {
    let Some(k) = Key::parse(key) else { return };
    let file = files.get(k.upstream());
    let settings = upstreams.iter_mut().find(|u| u.name == k.upstream());
    let (Some(file), Some(settings)) = (file, settings) else {
        plan.dropped.push(Dropped {
            key: key.to_owned(),
            upstream: k.upstream().to_owned(),
            backend: match k {
                Key::Backend { addr, .. } => Some(addr),
                Key::Algorithm { .. } => None,
            },
            item: "every",
            value: record.to_json().to_string(),
            file_was: "the upstream".to_owned(),
            file_now: "no such upstream".to_owned(),
            why: "the configuration file no longer has this upstream".to_owned(),
        });
        return;
    };
    let kept = match (record, k) {
        (Record::Backend(r), Key::Backend { addr, .. }) => {
            backend(key, addr, r, file, settings, plan).map(Record::Backend)
        }
        (Record::Algorithm(r), Key::Algorithm { .. }) => {
            algorithm(key, r, file, settings, plan).map(Record::Algorithm)
        }
        _ => None,
    };
    if let Some(kept) = kept {
        plan.records.insert(key.to_owned(), kept);
    }
    settings.pins = pins(&plan.records, &settings.name);
}

/// The total weight of `settings`' backends with their pinned weights (the records `plan`
/// kept), and backend `addr` at `weight` (`None`: as it is; a backend not there joining).
fn ring_total(settings: &UpstreamSettings, addr: SocketAddr, weight: Option<u32>) -> u64 {
    let mut present = false;
    let mut total: u64 = 0;
    for b in &settings.backends {
        let pinned = settings.pins.get(&b.addr).and_then(|p| p.weight);
        let w = match (b.addr == addr, weight) {
            (true, Some(w)) => {
                present = true;
                w
            }
            _ => pinned.unwrap_or(b.weight),
        };
        total += u64::from(w);
    }
    if !present && let Some(w) = weight {
        total += u64::from(w);
    }
    total
}

/// One backend's overrides against the file: those that hold, applied to `settings`'
/// backends (the state and weight go in as pins, see [`pins`]).
fn backend(
    key: &str,
    addr: SocketAddr,
    r: &BackendRecord,
    file: &FileUpstream,
    settings: &mut UpstreamSettings,
    plan: &mut Plan,
) -> Option<BackendRecord> {
    let name = &settings.name;
    let mut drop = |item, value: String, was: String, now: String, why: &str| {
        plan.dropped.push(Dropped {
            key: key.to_owned(),
            upstream: name.clone(),
            backend: Some(addr),
            item,
            value,
            file_was: was,
            file_now: now,
            why: why.to_owned(),
        });
    };
    let mut kept = r.clone();
    if let Some(s) = r.state
        && s.file != file.state(addr)
    {
        drop(
            "state",
            s.value.to_string(),
            shown(s.file),
            shown(file.state(addr)),
            FILE_CHANGED,
        );
        kept.state = None;
    }
    if let Some(w) = r.weight
        && w.file != file.weight(addr)
    {
        drop(
            "weight",
            w.value.to_string(),
            shown(w.file),
            shown(file.weight(addr)),
            FILE_CHANGED,
        );
        kept.weight = None;
    }
    if let Some(a) = r.added
        && let Some(b) = file.backend(addr)
    {
        let now = format!("it, with weight {}", b.weight);
        drop(
            "added",
            format!("(weight {})", a.weight),
            "not in the file".into(),
            now,
            FILE_CHANGED,
        );
        kept.added = None;
    }
    if r.removed && file.backend(addr).is_none() {
        drop(
            "removed",
            "removed".into(),
            "it".into(),
            "not in the file".into(),
            FILE_CHANGED,
        );
        kept.removed = false;
    }
    if kept.removed {
        let rest: Vec<BackendSettings> = settings
            .backends
            .iter()
            .filter(|b| b.addr != addr)
            .cloned()
            .collect();
        // An upstream with DNS discovery may lose its last static primary, as through the API:
        // its discovered backends are not in `settings` yet (they join after the reload).
        if settings.discovery.is_empty() && rest.iter().all(|b| b.backup) {
            drop(
                "removed",
                "removed".into(),
                "it".into(),
                "it as the last primary backend".into(),
                "an upstream needs a primary backend, and the others the file has are backups",
            );
            kept.removed = false;
        } else {
            settings.backends = rest;
            plan.applied.push(format!("{name} {addr} removed"));
        }
    }
    // A weight the ring could not be built for is never applied (the admin API refuses it).
    for (item, w) in [
        ("weight", kept.weight.map(|w| w.value)),
        ("added", kept.added.map(|a| a.weight)),
    ] {
        let Some(w) = w else { continue };
        if let Err(e) = settings.check_ring_weight(ring_total(settings, addr, Some(w))) {
            let value = match item {
                "weight" => w.to_string(),
                _ => format!("(weight {w})"),
            };
            drop(item, value, String::new(), String::new(), &e);
            match item {
                "weight" => kept.weight = None,
                _ => kept.added = None,
            }
        }
    }
    if let Some(a) = kept.added {
        settings.backends.push(joining(settings, addr, a));
        plan.applied
            .push(format!("{name} {addr} added (weight {})", a.weight));
    }
    if let Some(s) = kept.state {
        plan.applied
            .push(format!("{name} {addr} state {}", s.value));
    }
    if let Some(w) = kept.weight {
        plan.applied
            .push(format!("{name} {addr} weight {}", w.value));
    }
    (!kept.is_empty()).then_some(kept)
}

/// A backend the admin API added, as it adds one: the passive-health and slow-start settings
/// of the upstream's first backend.
pub fn joining(settings: &UpstreamSettings, addr: SocketAddr, a: Added) -> BackendSettings {
    let mut backend = BackendSettings::new(addr);
    if let Some(first) = settings.backends.first() {
        backend.max_fails = first.max_fails;
        backend.fail_timeout = first.fail_timeout;
        backend.slow_start = first.slow_start;
    }
    backend.weight = a.weight;
    backend.backup = a.backup;
    backend
}

/// One upstream's algorithm override against the file: applied if it holds and the file's
/// backends still take it.
fn algorithm(
    key: &str,
    r: &AlgorithmRecord,
    file: &FileUpstream,
    settings: &mut UpstreamSettings,
    plan: &mut Plan,
) -> Option<AlgorithmRecord> {
    let dropped = |why: String| Dropped {
        key: key.to_owned(),
        upstream: settings.name.clone(),
        backend: None,
        item: "algorithm",
        value: r.value.to_string(),
        file_was: r.file.to_string(),
        file_now: file.balancing.to_string(),
        why,
    };
    if r.file != file.balancing {
        plan.dropped.push(dropped(FILE_CHANGED.to_owned()));
        return None;
    }
    // Checked with the weights the backends' records set, which the file's settings carry
    // as pins only.
    let mut weighted = settings.clone();
    for b in &mut weighted.backends {
        if let Some(w) = settings.pins.get(&b.addr).and_then(|p| p.weight) {
            b.weight = w;
        }
    }
    match crate::config::balancing::apply(&weighted, &r.value.algorithm, &r.value.options).map(
        |s| UpstreamSettings {
            backends: std::mem::take(&mut settings.backends),
            ..s
        },
    ) {
        Ok(s) => {
            plan.applied
                .push(format!("{} algorithm {}", settings.name, r.value));
            *settings = s;
            Some(r.clone())
        }
        Err(e) => {
            plan.dropped.push(dropped(format!(
                "the upstream as the file has it does not take it: {e}"
            )));
            None
        }
    }
}

/// The pins of `upstream`'s backends: the state and weight each record sets.
pub fn pins(records: &Records, upstream: &str) -> HashMap<SocketAddr, Pin> {
    records
        .iter()
        .filter_map(|(key, r)| match (Key::parse(key), r) {
            (Some(Key::Backend { upstream: u, addr }), Record::Backend(b)) if u == upstream => {
                let pin = Pin {
                    state: b.state.map(|s| s.value.0),
                    weight: b.weight.map(|w| w.value).or(b.added.map(|a| a.weight)),
                };
                (pin != Pin::default()).then_some((addr, pin))
            }
            _ => None,
        })
        .collect()
}

/// A change through the admin API, as data (see [`admin::Change`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    State(AdminState),
    Weight(u32),
    Added(Added),
    Removed,
    Algorithm(Balancing),
}

/// The record of `key` after `change`, made through the API on the running upstream of the
/// file's `file` (`None` if the file has no such upstream): `None` when the change put every
/// item back to the file's value (setting an item to the file's value clears its override).
pub fn changed(
    old: Option<&Record>,
    key: &Key,
    file: Option<&FileUpstream>,
    change: Change,
) -> Option<Record> {
    match (key, change) {
        (Key::Algorithm { .. }, Change::Algorithm(value)) => {
            let base = file.map(|f| f.balancing.clone());
            match base {
                Some(base) if base == value => None,
                Some(base) => Some(Record::Algorithm(AlgorithmRecord { value, file: base })),
                // No file's value to compare with, nor to go back to: nothing to keep.
                None => None,
            }
        }
        (Key::Backend { addr, .. }, change) => {
            let old = match old {
                Some(Record::Backend(b)) => b.clone(),
                _ => BackendRecord::default(),
            };
            let new = backend_changed(old, *addr, file, change);
            (!new.is_empty()).then_some(Record::Backend(new))
        }
        (Key::Algorithm { .. }, _) => old.cloned(),
    }
}

fn backend_changed(
    mut r: BackendRecord,
    addr: SocketAddr,
    file: Option<&FileUpstream>,
    change: Change,
) -> BackendRecord {
    let file_state = file.and_then(|f| f.state(addr));
    let file_weight = file.and_then(|f| f.weight(addr));
    match change {
        Change::State(s) => {
            // A backend the file does not have is up unless set otherwise.
            let base = file_state.unwrap_or(State(AdminState::Up));
            r.state = (s != base.0).then_some(Item {
                value: State(s),
                file: file_state,
            });
        }
        Change::Weight(w) => match &mut r.added {
            Some(a) => a.weight = w,
            None => {
                r.weight = (Some(w) != file_weight).then_some(Item {
                    value: w,
                    file: file_weight,
                });
            }
        },
        Change::Added(a) => {
            r = BackendRecord::default();
            match file_weight {
                // One the file has, added back: no longer removed; its weight, if other.
                Some(fw) => {
                    r.weight = (a.weight != fw).then_some(Item {
                        value: a.weight,
                        file: Some(fw),
                    });
                }
                None => r.added = Some(a),
            }
        }
        Change::Removed => {
            r = BackendRecord {
                removed: file_weight.is_some(),
                ..BackendRecord::default()
            };
        }
        Change::Algorithm(_) => {}
    }
    r
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// `web` over 9001 (weight `w1`) and 9002, with `extra` lines in its section.
    fn file(w1: u32, extra: &str) -> (Vec<UpstreamSettings>, Files) {
        let text = format!(
            "[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n\n[[upstream]]\nname = \"web\"\n{extra}\n  [[upstream.backend]]\n  addr = \"127.0.0.1:9001\"\n  weight = {w1}\n  [[upstream.backend]]\n  addr = \"127.0.0.1:9002\"\n"
        );
        let cfg = crate::config::parse(Path::new("t.toml"), &text).unwrap();
        let files = files(&cfg.proxy, &crate::config::balancing::written(&text));
        (cfg.proxy.upstreams, files)
    }

    fn a(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn backend_key(port: u16) -> Key {
        Key::Backend {
            upstream: "web".into(),
            addr: a(port),
        }
    }

    /// The records after `changes` through the API, against `files`.
    fn made(files: &Files, changes: Vec<(Key, Change)>) -> Records {
        let mut records = Records::new();
        for (key, change) in changes {
            let text = match &key {
                Key::Backend { addr, .. } => Key::backend("web", *addr),
                Key::Algorithm { .. } => Key::algorithm("web"),
            };
            match changed(records.get(&text), &key, files.get("web"), change) {
                Some(r) => records.insert(text, r),
                None => records.remove(&text),
            };
        }
        records
    }

    #[test]
    fn the_files_value_clears_an_override() {
        let (_, files) = file(1, "");
        let records = made(
            &files,
            vec![
                (backend_key(9001), Change::Weight(3)),
                (backend_key(9001), Change::State(AdminState::Drain)),
                (backend_key(9001), Change::Weight(1)),
            ],
        );
        let only = Record::parse(
            "upstreams/web/backends/127.0.0.1:9001",
            br#"{"state":{"value":"drain","file":"up"}}"#,
        )
        .unwrap();
        assert_eq!(records.values().collect::<Vec<_>>(), vec![&only]);
        let records = made(
            &files,
            vec![
                (
                    backend_key(9003),
                    Change::Added(Added {
                        weight: 2,
                        backup: false,
                    }),
                ),
                (backend_key(9003), Change::Weight(5)),
                (backend_key(9002), Change::Removed),
            ],
        );
        assert_eq!(records.len(), 2);
        let records = made(
            &files,
            vec![
                (
                    backend_key(9003),
                    Change::Added(Added {
                        weight: 2,
                        backup: false,
                    }),
                ),
                (backend_key(9003), Change::Removed),
                (backend_key(9002), Change::Removed),
                (
                    backend_key(9002),
                    Change::Added(Added {
                        weight: 1,
                        backup: false,
                    }),
                ),
                (backend_key(9001), Change::State(AdminState::Drain)),
                (backend_key(9001), Change::State(AdminState::Up)),
            ],
        );
        assert!(records.is_empty(), "{records:?}");
    }

    #[test]
    fn an_item_the_file_changed_is_dropped_and_the_others_applied() {
        let (_, files) = file(1, "");
        let records = made(
            &files,
            vec![
                (backend_key(9001), Change::Weight(3)),
                (backend_key(9001), Change::State(AdminState::Drain)),
                (backend_key(9002), Change::Removed),
                (
                    backend_key(9003),
                    Change::Added(Added {
                        weight: 2,
                        backup: false,
                    }),
                ),
                (
                    Key::Algorithm {
                        upstream: "web".into(),
                    },
                    Change::Algorithm(Balancing {
                        algorithm: "least_conn".into(),
                        options: Default::default(),
                    }),
                ),
            ],
        );
        // The same file: everything applies.
        let (mut upstreams, files) = file(1, "");
        let p = plan(&records, &mut upstreams, &files);
        assert!(p.dropped.is_empty(), "{:?}", p.dropped);
        assert_eq!(p.records, records);
        let web = &upstreams[0];
        let addrs: Vec<SocketAddr> = web.backends.iter().map(|b| b.addr).collect();
        assert_eq!(addrs, vec![a(9001), a(9003)]);
        assert_eq!(web.pinned(&web.backends[0]), (AdminState::Drain, 3));
        assert_eq!(web.algorithm, balance::Algorithm::LeastConn);
        // The file's weight of 9001 and its algorithm's options changed: those two dropped.
        let (mut upstreams, files) = file(2, "algorithm = \"maglev\"\ntable_size = 65537");
        let p = plan(&records, &mut upstreams, &files);
        let dropped: Vec<String> = p.dropped.iter().map(ToString::to_string).collect();
        assert_eq!(dropped.len(), 2, "{dropped:#?}");
        assert!(dropped[0].starts_with("upstream \"web\" backend 127.0.0.1:9001: weight override 3 dropped: the configuration file changed this item since the override was made; the file wins (the file had 1, it now has 2)"), "{dropped:#?}");
        assert!(
            dropped[1].contains("algorithm override least_conn dropped"),
            "{dropped:#?}"
        );
        assert!(
            dropped[1].contains("it now has maglev {\"table_size\":65537}"),
            "{dropped:#?}"
        );
        let web = &upstreams[0];
        assert_eq!(web.pinned(&web.backends[0]), (AdminState::Drain, 2));
        assert_eq!(web.algorithm, balance::Algorithm::Maglev);
    }

    #[test]
    fn the_last_primary_is_not_removed() {
        let (_, files) = file(1, "");
        let records = made(
            &files,
            vec![
                (backend_key(9001), Change::Removed),
                (backend_key(9002), Change::Removed),
            ],
        );
        let (mut upstreams, files) = file(1, "");
        let p = plan(&records, &mut upstreams, &files);
        assert_eq!(p.dropped.len(), 1, "{:?}", p.dropped);
        assert_eq!(upstreams[0].backends.len(), 1);
        // With DNS discovery the last static primary may go, as through the API (the
        // discovered backends join after the reload): both removals hold.
        let (mut upstreams, files) = file(1, "");
        let mut source = proxy::DiscoverySettings {
            query: proxy::DiscoveryQuery {
                kind: proxy::RecordKind::A,
                name: "api.fulcrum.test".into(),
                port: Some(80),
            },
            resolvers: Vec::new(),
            ipv6: true,
            min_interval: std::time::Duration::from_secs(1),
            max_interval: std::time::Duration::from_secs(60),
            template: BackendSettings::new(a(80)),
        };
        source.template.weight = 1;
        upstreams[0].discovery = vec![source];
        let p = plan(&records, &mut upstreams, &files);
        assert!(p.dropped.is_empty(), "{:?}", p.dropped);
        assert!(upstreams[0].backends.is_empty());
    }
}
