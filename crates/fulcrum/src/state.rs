//! Runtime state that survives: every change made through the admin API (a backend's state
//! or weight, a backend added or removed, an upstream's algorithm) is an override of the
//! configuration file, kept here, applied again after a reload or a restart unless the file
//! itself changed that item since (then the file wins and the log says which override was
//! dropped and why), written to `state_file` when there is one, and shared with a fleet
//! through [`StateStore::local_changes`] and [`StateStore::apply_remote`] (etcd).
//!
//! HAProxy's `server-state-file` is the model (server states kept across reloads); unlike it,
//! each override remembers the file's value it replaced, so that an edit of the file is never
//! silently undone.
//!
//! # Layout
//!
//! * [`record`]: an override as data: its key, its JSON value, its base;
//! * [`plan`]: overrides against a file, without I/O: which hold, and the settings they make;
//!   a change through the API as a record;
//! * [`file`]: the state file: atomic replace, and a bad file set aside;
//! * this file: [`StateStore`], which ties them to the running proxy.

pub mod file;
pub mod plan;
pub mod record;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use proxy::{Keep, ProxyHandle, ProxySettings, Upstream};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use plan::{Change, FileUpstream, Files};
use record::{Added, BackendRecord, Balancing, Key, Record, Records};

/// What [`StateStore::local_changes`] hands on: a key and its new value (`None`: cleared).
pub type LocalChange = (String, Option<Vec<u8>>);

/// Every override, the file they override, and where they go: the state file, the running
/// proxy, the fleet. Cloned freely (one store behind an `Arc`).
#[derive(Debug, Clone)]
pub struct StateStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// `state_file`; `None`: kept in memory only (across reloads, not restarts).
    path: Option<PathBuf>,
    data: Mutex<Data>,
    /// The running proxy, once it runs: where remote changes are applied.
    proxy: OnceLock<ProxyHandle>,
    local: Mutex<Local>,
    writes: Mutex<Writes>,
}

/// How the state file's writes went: for `/metrics` and the admin API's answers.
#[derive(Debug, Default)]
struct Writes {
    failures: u64,
    /// Why the last write failed (`None`: it succeeded, or none was needed yet).
    failing: Option<String>,
}

#[derive(Debug, Default)]
struct Data {
    records: Records,
    /// The configuration file's upstreams, as last loaded (no override applied).
    files: Files,
    /// Whether the state file may be written: not while a bad one could not be set aside.
    keep_out: bool,
    /// Changes made so far, and the last one of each key: a reload prepared before a change
    /// does not undo it.
    edits: u64,
    edited: BTreeMap<String, u64>,
    /// Keys changed here that etcd has not acknowledged yet (kept in the state file, so that
    /// a restart before etcd is back still sends them); only with `[cluster]`.
    unsynced: std::collections::BTreeSet<String>,
    /// Whether the overrides are shared through etcd (`[cluster]`): only then are the
    /// unsynced keys kept.
    fleet: bool,
    /// The etcd revision of this instance's last acknowledged write of each key (since the
    /// last snapshot): a change of the key at or below it is that write or older.
    acked: BTreeMap<String, i64>,
    /// For an unsynced key: the newest change from the fleet seen meanwhile, with its
    /// revision (`None`: cleared). Whether it is newer than this instance's write is known
    /// once etcd acknowledges the write ([`StateStore::synced`]): then it applies, or not.
    held: BTreeMap<String, (i64, Option<Record>)>,
}

#[derive(Debug)]
struct Local {
    tx: mpsc::UnboundedSender<LocalChange>,
    /// Held until the one subscriber takes it: changes made before are kept for it.
    rx: Option<mpsc::UnboundedReceiver<LocalChange>>,
}

/// A reload's (or the start's) overrides made ready: applied once the proxy took the
/// settings ([`StateStore::commit`]).
#[derive(Debug)]
pub struct Prepared {
    plan: plan::Plan,
    files: Files,
    edits: u64,
}

/// What a reload did with the overrides, for its log and answer.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub applied: Vec<String>,
    pub dropped: Vec<String>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl StateStore {
    /// A store with the overrides of the state file at `path` (none without one). A file that
    /// cannot be read or parsed is logged and set aside; the store starts empty. One with
    /// entries that cannot be used is kept as it was beside it and written again without them.
    pub fn open(path: Option<PathBuf>) -> StateStore {
        let mut data = Data::default();
        // A file with entries dropped is written again at once without them (its copy as it
        // was kept first), so no later start reads them, warns and keeps a copy again.
        let mut rewrite = false;
        if let Some(p) = &path {
            match file::read(p) {
                file::Read::Missing => {
                    tracing::info!(state_file = %p.display(), "no state file yet: no overrides to apply");
                }
                file::Read::Found(parsed) => {
                    tracing::info!(state_file = %p.display(), overrides = parsed.records.len(), "state file read");
                    dropped_entries(p, &parsed);
                    rewrite = matches!(parsed.copy, Some(Ok(_)));
                    data.records = parsed.records;
                    data.unsynced = parsed.unsynced;
                }
                file::Read::Bad { why, aside } => {
                    data.keep_out = aside.is_err();
                    bad_state_file(p, &why, &aside);
                }
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let store = StateStore {
            inner: Arc::new(Inner {
                path,
                data: Mutex::new(data),
                proxy: OnceLock::new(),
                local: Mutex::new(Local { tx, rx: Some(rx) }),
                writes: Mutex::new(Writes::default()),
            }),
        };
        if rewrite {
            store.save();
        }
        store
    }

    /// Applies the overrides to `proxy`, the settings of a configuration whose upstreams'
    /// balancing options are as `written` (`Config::written`): those that hold become pins,
    /// backends and algorithms in `proxy`; the others are noted to be dropped. Nothing
    /// changes here until [`StateStore::commit`].
    pub fn prepare(&self, proxy: &mut ProxySettings, written: &plan::Written) -> Prepared {
        let files = plan::files(proxy, written);
        let data = lock(&self.inner.data);
        let plan = plan::plan(&data.records, &mut proxy.upstreams, &files);
        Prepared {
            plan,
            files,
            edits: data.edits,
        }
    }

    /// The proxy took the settings [`StateStore::prepare`] made: the overrides that hold are
    /// the store's, the dropped ones are logged (WARN), cleared for the fleet and in the
    /// state file. A change made meanwhile stays, applied to the running proxy again.
    pub fn commit(&self, prepared: Prepared) -> Summary {
        let Prepared { plan, files, edits } = prepared;
        let mut raced = Vec::new();
        let mut cleared = Vec::new();
        {
            let mut data = lock(&self.inner.data);
            let mut records = plan.records;
            for (key, &at) in &data.edited {
                if at > edits {
                    let planned = records.remove(key);
                    if let Some(now) = data.records.get(key) {
                        records.insert(key.clone(), now.clone());
                    }
                    raced.push((key.clone(), planned));
                }
            }
            for d in &plan.dropped {
                if !records.contains_key(&d.key) && data.records.contains_key(&d.key) {
                    cleared.push((d.key.clone(), None));
                }
            }
            for (key, r) in &records {
                if plan.dropped.iter().any(|d| &d.key == key) {
                    cleared.push((key.clone(), Some(r.to_bytes())));
                }
            }
            data.records = records;
            data.files = files;
            if data.fleet {
                data.unsynced.extend(cleared.iter().map(|(k, _)| k.clone()));
            }
        }
        for d in &plan.dropped {
            tracing::warn!(
                key = %d.key,
                upstream = %d.upstream,
                backend = %d.backend.map_or_else(String::new, |b| b.to_string()),
                item = d.item,
                override_value = %d.value,
                file_was = %d.file_was,
                file_now = %d.file_now,
                "override dropped: {d}"
            );
        }
        if !plan.applied.is_empty() {
            tracing::info!(applied = ?plan.applied, "overrides applied again");
        }
        for (key, planned) in raced {
            let now = lock(&self.inner.data).records.get(&key).cloned();
            self.enforce(&key, planned.as_ref(), now.as_ref());
        }
        cleared.sort();
        cleared.dedup();
        for c in cleared {
            self.send_local(c);
        }
        if !plan.dropped.is_empty() {
            self.save();
        }
        Summary {
            applied: plan.applied,
            dropped: plan.dropped.iter().map(ToString::to_string).collect(),
        }
    }

    /// `state_file`, if there is one.
    pub fn path(&self) -> Option<&std::path::Path> {
        self.inner.path.as_deref()
    }

    /// From now on the overrides are shared through etcd: the keys changed here are kept as
    /// unsynced (in the state file too) until [`StateStore::synced`]. Returns those a former
    /// run left unsynced, with their values now (`None`: cleared), to write to etcd before
    /// anything is read from it.
    pub fn share_with_fleet(&self) -> BTreeMap<String, Option<Vec<u8>>> {
        let mut data = lock(&self.inner.data);
        data.fleet = true;
        data.unsynced
            .iter()
            .map(|k| (k.clone(), data.records.get(k).map(Record::to_bytes)))
            .collect()
    }

    /// etcd acknowledged this instance's write of `key` (`value`: what was written, `None` a
    /// delete) at `revision`. If it is the key's value here now, the key is synced: changes
    /// from the fleet above `revision` apply (one seen meanwhile applies now), those at or
    /// below do not. An older write's acknowledgement (changed here again since) changes
    /// nothing: the newer one's follows.
    pub fn synced(&self, key: &str, value: Option<&[u8]>, revision: i64) {
        let (was, held) = {
            let mut data = lock(&self.inner.data);
            let ours = data.records.get(key).map(Record::to_bytes);
            if ours.as_deref() != value {
                return;
            }
            let was = data.unsynced.remove(key);
            data.acked.insert(key.to_owned(), revision);
            let held = data.held.remove(key).filter(|(at, _)| *at > revision);
            (was, held)
        };
        let applied = held.is_some_and(|(at, record)| self.set_remote(key, record, at));
        if was || applied {
            self.save();
        }
    }

    /// The running proxy: remote changes are applied to it from now on.
    pub fn attach(&self, proxy: ProxyHandle) {
        let _ = self.inner.proxy.set(proxy);
    }

    /// Local changes (made through this instance's admin API, and overrides a reload
    /// dropped), in order: (key, Some(JSON bytes)) for a set override, (key, None) for a
    /// cleared one. One subscriber: a second call takes over from the first.
    pub fn local_changes(&self) -> mpsc::UnboundedReceiver<LocalChange> {
        let mut local = lock(&self.inner.local);
        match local.rx.take() {
            Some(rx) => rx,
            None => {
                let (tx, rx) = mpsc::unbounded_channel();
                local.tx = tx;
                rx
            }
        }
    }

    /// A change from elsewhere (another instance, through etcd, at `revision`): applied to the
    /// running proxy as the admin API would apply it, kept in the state file; not sent to
    /// [`StateStore::local_changes`]. A value that does not parse is logged and ignored; an
    /// override of an item this instance's file changed since is dropped, as at a reload.
    pub fn apply_remote(&self, key: &str, value: Option<&[u8]>, revision: i64) {
        let record = match value.map(|v| Record::parse(key, v)) {
            None => None,
            Some(Ok(r)) => Some(r),
            Some(Err(e)) => {
                tracing::warn!(key, error = %e, "a shared override is not one this fulcrum reads: ignored");
                return;
            }
        };
        if self.set_remote(key, record, revision) {
            self.save();
        }
    }

    /// The whole set from elsewhere (an etcd snapshot at `revision`): every override replaced
    /// by these (those not in it cleared, the running proxy put back to the file's values for
    /// them), but for the keys changed here that etcd has not acknowledged yet.
    pub fn replace_all(&self, records: BTreeMap<String, Vec<u8>>, revision: i64) {
        let mut keys: Vec<String> = {
            let mut data = lock(&self.inner.data);
            // The snapshot is etcd's state from its revision on (perhaps another etcd's, whose
            // revisions are not comparable with those remembered): it is the base now.
            data.acked.clear();
            data.records.keys().cloned().collect()
        };
        keys.extend(records.keys().cloned());
        keys.sort();
        keys.dedup();
        let mut any = false;
        for key in keys {
            let record = match records.get(&key).map(|v| Record::parse(&key, v)) {
                None => None,
                Some(Ok(r)) => Some(r),
                Some(Err(e)) => {
                    tracing::warn!(key, error = %e, "a shared override is not one this fulcrum reads: ignored");
                    continue;
                }
            };
            any |= self.set_remote(&key, record, revision);
        }
        if any {
            self.save();
        }
    }

    /// Every override now, keyed.
    pub fn records(&self) -> BTreeMap<String, Vec<u8>> {
        lock(&self.inner.data)
            .records
            .iter()
            .map(|(k, r)| (k.clone(), r.to_bytes()))
            .collect()
    }

    /// Sets `key` to `record` from elsewhere (etcd's change at `revision`), checked against
    /// this instance's file, and applies it to the running proxy; whether anything changed.
    fn set_remote(&self, key: &str, record: Option<Record>, revision: i64) -> bool {
        let (old, new) = {
            let mut data = lock(&self.inner.data);
            // A key changed here that etcd has not acknowledged yet keeps the local value for
            // now: what etcd says of it is older than the local write (its own echo, say), or
            // newer (another instance wrote after it). Which, the acknowledgement's revision
            // tells: the newest change seen is held until then.
            if data.unsynced.contains(key) {
                if data.held.get(key).is_none_or(|(at, _)| *at < revision) {
                    data.held.insert(key.to_owned(), (revision, record));
                }
                return false;
            }
            // This instance's acknowledged write, or older: etcd holds the local value or a
            // newer one, whose change follows.
            if data.acked.get(key).is_some_and(|&at| revision <= at) {
                return false;
            }
            let new = record.and_then(|r| holding(key, r, &data.records, &data.files));
            let old = data.records.get(key).cloned();
            if old == new {
                return false;
            }
            set(&mut data, key, new.clone());
            (old, new)
        };
        tracing::info!(key, value = %new.as_ref().map_or(serde_json::Value::Null, Record::to_json), "override set by another instance");
        self.enforce(key, old.as_ref(), new.as_ref());
        true
    }

    /// Makes the running proxy show `new` for `key` instead of `old` (`None`: the file's
    /// values), as the admin API would, and gives its upstream the pins of every record.
    fn enforce(&self, key: &str, old: Option<&Record>, new: Option<&Record>) {
        let Some(k) = Key::parse(key) else { return };
        let Some(u) = self.running(k.upstream()) else {
            return;
        };
        let file = lock(&self.inner.data).files.get(k.upstream()).cloned();
        match k {
            Key::Backend { addr, .. } => {
                let b = |r: Option<&Record>| match r {
                    Some(Record::Backend(b)) => Some(b.clone()),
                    _ => None,
                };
                enforce_backend(&u, addr, file.as_ref(), b(old).as_ref(), b(new).as_ref());
            }
            Key::Algorithm { .. } => enforce_algorithm(&u, file.as_ref(), new),
        }
        self.pin(&u);
    }

    /// Gives `u` the pins of its records now.
    fn pin(&self, u: &Upstream) {
        let pins = plan::pins(&lock(&self.inner.data).records, u.name());
        u.set_pins(pins);
    }

    fn running(&self, upstream: &str) -> Option<Arc<Upstream>> {
        self.inner
            .proxy
            .get()?
            .upstreams()
            .into_iter()
            .find(|u| u.name() == upstream)
    }

    fn send_local(&self, change: LocalChange) {
        let _ = lock(&self.inner.local).tx.send(change);
    }

    /// Writes the state file, if there is one and it may be written; a failure is logged (the
    /// overrides stay in force, in memory).
    fn save(&self) {
        let Some(path) = &self.inner.path else { return };
        let text = {
            let mut data = lock(&self.inner.data);
            // Until the bad file that could not be set aside is moved away.
            data.keep_out &= path.exists();
            if data.keep_out {
                drop(data);
                tracing::error!(state_file = %path.display(), "the state file is not written: a bad one is still there (see the error at start); move it away, and the next change writes a new one");
                self.wrote(Err(format!(
                    "the state file {} is not written: a bad one is still there; move it away",
                    path.display()
                )));
                return;
            }
            // Without a fleet, a former run's unsynced keys are let go; but the start's write
            // (overrides it dropped) comes before the proxy is attached and the fleet, if
            // any, is told (`share_with_fleet`): they are kept for it until then.
            if !data.fleet && self.inner.proxy.get().is_some() {
                data.unsynced.clear();
            }
            file::text(&data.records, &data.unsynced)
        };
        match file::write(path, &text) {
            Ok(()) => self.wrote(Ok(())),
            Err(e) => {
                let advice = write_advice(path, &e);
                tracing::error!(state_file = %path.display(), error = %e, "cannot write the state file: the overrides stay in force but would not survive a restart; {advice} (the next change written saves them all)");
                self.wrote(Err(format!(
                    "the change is applied, but the state file {} could not be written ({e}): it would not survive a restart; {advice}",
                    path.display()
                )));
            }
        }
    }

    /// Notes how a write of the state file went.
    fn wrote(&self, result: Result<(), String>) {
        let mut w = lock(&self.inner.writes);
        match result {
            Ok(()) => {
                if w.failing.take().is_some()
                    && let Some(path) = &self.inner.path
                {
                    tracing::info!(state_file = %path.display(), "the state file is written again: the overrides in force are saved");
                }
            }
            Err(why) => {
                w.failures += 1;
                w.failing = Some(why);
            }
        }
    }

    /// Records a change the admin API made (see [`admin::Overrides::changed`]).
    fn record(&self, upstream: &str, key: &Key, change: Change) {
        let key_text = match key {
            Key::Backend { addr, .. } => Key::backend(upstream, *addr),
            Key::Algorithm { .. } => Key::algorithm(upstream),
        };
        let new = {
            let mut data = lock(&self.inner.data);
            let old = data.records.get(&key_text);
            let new = plan::changed(old, key, data.files.get(upstream), change);
            if old == new.as_ref() {
                return;
            }
            set(&mut data, &key_text, new.clone());
            if data.fleet {
                data.unsynced.insert(key_text.clone());
            }
            new
        };
        if let Some(u) = self.running(upstream) {
            self.pin(&u);
        }
        self.save();
        self.send_local((key_text, new.map(|r| r.to_bytes())));
    }
}

/// What to do about a failed write of the state file at `path`, by its error.
fn write_advice(path: &std::path::Path, e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    let dir = file::directory(path).display();
    match e.kind() {
        K::StorageFull | K::QuotaExceeded => {
            format!("the filesystem of {dir} is full: free space there")
        }
        K::ReadOnlyFilesystem => format!(
            "{dir} is on a read-only filesystem: remount it read-write, or set state_file elsewhere (a restart)"
        ),
        K::PermissionDenied => format!("make {dir} writable by fulcrum's user"),
        K::NotFound | K::NotADirectory => format!("{dir} is not a directory (any more): create it"),
        _ => format!("check {dir} and the filesystem it is on"),
    }
}

/// Logs each entry of a state file that could not be used (a WARN each: what, where, what
/// to do); the others are applied.
fn dropped_entries(path: &std::path::Path, parsed: &file::Parsed) {
    let kept = match &parsed.copy {
        Some(Ok(copy)) => format!("the file as it was is kept as {}", copy.display()),
        Some(Err(e)) => format!("the file as it was could not be kept ({e})"),
        None => String::new(),
    };
    for why in &parsed.dropped {
        tracing::warn!(
            state_file = %path.display(),
            "a state file entry cannot be used and is dropped ({why}); the other overrides are applied, and {kept}: make this change again through the admin API if it is still wanted"
        );
    }
}

/// Logs a state file that could not be used: what, where, and what to do.
fn bad_state_file(path: &std::path::Path, why: &str, aside: &Result<PathBuf, String>) {
    match aside {
        Ok(aside) => tracing::error!(
            state_file = %path.display(),
            set_aside = %aside.display(),
            "the state file cannot be used ({why}): it was moved to {} and fulcrum starts on its configuration alone, without the overrides made through the admin API; read it to make them again, or delete it",
            aside.display()
        ),
        Err(e) => tracing::error!(
            state_file = %path.display(),
            "the state file cannot be used ({why}), nor set aside ({e}): fulcrum starts on its configuration alone and will not write it while it is there; move it away (read it to make its overrides again)"
        ),
    }
}

/// Sets `key` to `record` in `data` (`None`: cleared), noting the change.
fn set(data: &mut Data, key: &str, record: Option<Record>) {
    data.edits += 1;
    let at = data.edits;
    data.edited.insert(key.to_owned(), at);
    match record {
        Some(r) => data.records.insert(key.to_owned(), r),
        None => data.records.remove(key),
    };
}

/// The part of a remote `record` that holds against this instance's `files` (its items of
/// which the file's value is still their base); what does not is logged as a reload would.
fn holding(key: &str, record: Record, records: &Records, files: &Files) -> Option<Record> {
    let k = Key::parse(key)?;
    let mut scratch: Vec<proxy::UpstreamSettings> = files
        .get(k.upstream())
        .map(|f| f.settings.clone())
        .into_iter()
        .collect();
    // Checked after the records in force, as the admin API checks a change against the
    // running upstream (a weight the ring could not take beside the others is not applied).
    let others: Records = records
        .iter()
        .filter(|(k, _)| k.as_str() != key)
        .map(|(k, r)| (k.clone(), r.clone()))
        .collect();
    let mut p = plan::plan(&others, &mut scratch, files);
    let before = p.dropped.len();
    plan::plan_one(key, &record, &mut scratch, files, &mut p);
    for d in &p.dropped[before..] {
        tracing::warn!(key, "shared override not applied: {d}");
    }
    p.records.remove(key)
}

/// Puts backend `addr` of `u` where `new` says (`None`: where the file has it), from where
/// `old` put it.
fn enforce_backend(
    u: &Upstream,
    addr: SocketAddr,
    file: Option<&FileUpstream>,
    old: Option<&BackendRecord>,
    new: Option<&BackendRecord>,
) {
    let in_file = file.and_then(|f| f.backend(addr)).cloned();
    let running = u.runtime_settings();
    let present = running.backends.iter().any(|b| b.addr == addr);
    let was_added = old.is_some_and(|o| o.added.is_some());
    let wanted = match new {
        Some(r) if r.removed => false,
        Some(r) if r.added.is_some() => true,
        _ => in_file.is_some() || (present && !was_added),
    };
    let mut settings = running;
    if present && !wanted {
        settings.backends.retain(|b| b.addr != addr);
        if settings.backends.iter().all(|b| b.backup) {
            tracing::warn!(upstream = %u.name(), backend = %addr, "a shared override removes the last primary backend: not applied");
            return;
        }
        u.reconfigure(settings, Keep::Runtime);
        return;
    }
    if wanted && !present {
        let added = new.and_then(|r| r.added);
        let backend = match (&in_file, added) {
            (Some(b), _) => b.clone(),
            (None, Some(a)) => plan::joining(&settings, addr, a),
            (None, None) => plan::joining(
                &settings,
                addr,
                Added {
                    weight: 1,
                    backup: false,
                },
            ),
        };
        settings.backends.push(backend);
        u.reconfigure(settings, Keep::Runtime);
    }
    let state = new
        .and_then(|r| r.state.map(|s| s.value))
        .or(file.and_then(|f| f.state(addr)))
        .map_or(proxy::AdminState::Up, |s| s.0);
    let _ = u.set_state(addr, state);
    let weight = new
        .and_then(|r| r.weight.map(|w| w.value).or(r.added.map(|a| a.weight)))
        .or(in_file.map(|b| b.weight));
    if let Some(w) = weight
        && !u.weights_from_reports()
    {
        match u.set_static_weight(addr, u64::from(w)) {
            Ok(_) => {}
            // An address that is not a backend now (DNS does not give it): its override is
            // kept and applies when it comes back.
            Err(proxy::ChangeError::NoSuchBackend { .. }) => {}
            Err(e) => {
                tracing::warn!(upstream = %u.name(), backend = %addr, error = %e, "a shared weight is not applied")
            }
        }
    }
}

/// Gives `u` the algorithm `new` says (`None`: the file's).
fn enforce_algorithm(u: &Upstream, file: Option<&FileUpstream>, new: Option<&Record>) {
    let running = u.runtime_settings();
    let settings = match (new, file) {
        (Some(Record::Algorithm(r)), _) => {
            match crate::config::balancing::apply(&running, &r.value.algorithm, &r.value.options) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(upstream = %u.name(), error = %e, "a shared algorithm override does not fit this upstream: not applied");
                    return;
                }
            }
        }
        (_, Some(f)) => proxy::UpstreamSettings {
            algorithm: f.settings.algorithm,
            hash_key: f.settings.hash_key.clone(),
            options: f.settings.options.clone(),
            ..running
        },
        (_, None) => return,
    };
    u.reconfigure(settings, Keep::Runtime);
}

impl admin::Overrides for StateStore {
    fn changed(&self, change: admin::Change<'_>) {
        use admin::Change as C;
        let (upstream, addr, change) = match change {
            C::State {
                upstream,
                addr,
                state,
            } => (upstream, Some(addr), Change::State(state)),
            C::Weight {
                upstream,
                addr,
                weight,
            } => (upstream, Some(addr), Change::Weight(weight)),
            C::Added {
                upstream,
                addr,
                weight,
                backup,
            } => (
                upstream,
                Some(addr),
                Change::Added(Added { weight, backup }),
            ),
            C::Removed { upstream, addr } => (upstream, Some(addr), Change::Removed),
            C::Algorithm {
                upstream,
                algorithm,
                options,
            } => {
                // Its canonical name, as the file's is compared.
                let algorithm = self.running(upstream).map_or_else(
                    || algorithm.to_owned(),
                    |u| u.settings().algorithm.name().to_owned(),
                );
                let value = Balancing {
                    algorithm,
                    options: options.clone(),
                };
                (upstream, None, Change::Algorithm(value))
            }
        };
        let key = match addr {
            Some(addr) => Key::Backend {
                upstream: upstream.to_owned(),
                addr,
            },
            None => Key::Algorithm {
                upstream: upstream.to_owned(),
            },
        };
        self.record(upstream, &key, change);
    }

    fn backend(&self, upstream: &str, addr: SocketAddr) -> Value {
        match lock(&self.inner.data)
            .records
            .get(&Key::backend(upstream, addr))
        {
            Some(r) => r.to_json(),
            None => json!({}),
        }
    }

    fn upstream(&self, upstream: &str) -> Value {
        let data = lock(&self.inner.data);
        let mut shown = serde_json::Map::new();
        if let Some(r) = data.records.get(&Key::algorithm(upstream)) {
            shown.insert("algorithm".into(), r.to_json());
        }
        let removed: Vec<String> = data
            .records
            .iter()
            .filter_map(|(k, r)| match (Key::parse(k), r) {
                (Some(Key::Backend { upstream: u, addr }), Record::Backend(b))
                    if u == upstream && b.removed =>
                {
                    Some(addr.to_string())
                }
                _ => None,
            })
            .collect();
        if !removed.is_empty() {
            shown.insert("removed".into(), json!(removed));
        }
        // Overrides kept for addresses that are not backends now (DNS gave them once): they
        // apply if the address comes back; `DELETE .../backends/ADDR` clears them.
        let members: Vec<SocketAddr> = self
            .running(upstream)
            .map(|u| u.snapshot().iter().map(|b| b.addr).collect())
            .unwrap_or_default();
        let absent: serde_json::Map<String, Value> = data
            .records
            .iter()
            .filter_map(|(k, r)| match (Key::parse(k), r) {
                (Some(Key::Backend { upstream: u, addr }), Record::Backend(b))
                    if u == upstream && !b.removed && !members.contains(&addr) =>
                {
                    Some((addr.to_string(), r.to_json()))
                }
                _ => None,
            })
            .collect();
        if !absent.is_empty() {
            shown.insert("absent".into(), Value::Object(absent));
        }
        Value::Object(shown)
    }

    fn forget(&self, upstream: &str, addr: SocketAddr) -> bool {
        let key = Key::backend(upstream, addr);
        {
            let mut data = lock(&self.inner.data);
            match data.records.get(&key) {
                Some(Record::Backend(b)) if !b.removed => {}
                _ => return false,
            }
            set(&mut data, &key, None);
            if data.fleet {
                data.unsynced.insert(key.clone());
            }
        }
        if let Some(u) = self.running(upstream) {
            self.pin(&u);
        }
        self.save();
        self.send_local((key, None));
        true
    }

    fn unsaved(&self) -> Option<String> {
        lock(&self.inner.writes).failing.clone()
    }

    fn writes(&self) -> Option<admin::StateFileWrites> {
        self.inner.path.as_ref()?;
        let w = lock(&self.inner.writes);
        Some(admin::StateFileWrites {
            last_successful: w.failing.is_none(),
            failures: w.failures,
        })
    }
}

#[cfg(test)]
mod tests {
    //! The contract the fleet (etcd) codes against, on a bound proxy that serves nothing.

    use std::path::Path;

    use admin::Overrides as _;

    use super::*;

    const FILE: &str = r#"
[[listener]]
listen = "127.0.0.1:0"
upstream = "web"

[[upstream]]
name = "web"
algorithm = "weighted_round_robin"
  [[upstream.backend]]
  addr = "127.0.0.1:9001"
  [[upstream.backend]]
  addr = "127.0.0.1:9002"
"#;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// A store over a proxy bound from [`FILE`] with the store's overrides.
    async fn started(store: &StateStore) -> (proxy::Proxy, Arc<Upstream>) {
        let mut cfg = crate::config::parse(Path::new("t.toml"), FILE).unwrap();
        let prepared = store.prepare(&mut cfg.proxy, &cfg.written);
        store.commit(prepared);
        let proxy = proxy::Proxy::bind(cfg.proxy).await.unwrap();
        store.attach(proxy.handle());
        let web = proxy.upstreams().remove(0);
        (proxy, web)
    }

    fn state_of(u: &Upstream, a: SocketAddr) -> Option<(proxy::AdminState, u32)> {
        u.snapshot()
            .iter()
            .find(|b| b.addr == a)
            .map(|b| (b.state, b.static_weight))
    }

    #[tokio::test]
    async fn local_changes_are_told_remote_ones_applied_and_not_told() {
        let store = StateStore::open(None);
        let (_proxy, web) = started(&store).await;
        let mut local = store.local_changes();
        // A change through the API: told once, with its key and value.
        assert!(web.set_state(addr(9001), proxy::AdminState::Drain).is_ok());
        store.changed(admin::Change::State {
            upstream: "web",
            addr: addr(9001),
            state: proxy::AdminState::Drain,
        });
        let key = "upstreams/web/backends/127.0.0.1:9001";
        let (k, v) = local.try_recv().unwrap();
        assert_eq!(k, key);
        assert_eq!(v.unwrap(), br#"{"state":{"value":"drain","file":"up"}}"#);
        assert_eq!(store.records().len(), 1);
        // Back to the file's value: cleared, and told as cleared.
        assert!(web.set_state(addr(9001), proxy::AdminState::Up).is_ok());
        store.changed(admin::Change::State {
            upstream: "web",
            addr: addr(9001),
            state: proxy::AdminState::Up,
        });
        assert_eq!(local.try_recv().unwrap(), (key.to_owned(), None));
        assert!(store.records().is_empty());

        // From elsewhere: applied to the running upstream, not told.
        let other = "upstreams/web/backends/127.0.0.1:9002";
        store.apply_remote(
            other,
            Some(br#"{"weight":{"value":4,"file":1},"state":{"value":"drain","file":"up"}}"#),
            1,
        );
        assert_eq!(
            state_of(&web, addr(9002)),
            Some((proxy::AdminState::Drain, 4))
        );
        assert_eq!(web.settings().pins[&addr(9002)].weight, Some(4));
        // A value that does not parse, or made against another file: nothing changes.
        store.apply_remote(key, Some(b"{\"state\": 3}"), 2);
        store.apply_remote(key, Some(br#"{"weight":{"value":4,"file":7}}"#), 3);
        assert_eq!(state_of(&web, addr(9001)), Some((proxy::AdminState::Up, 1)));
        assert_eq!(store.records().len(), 1);
        // Cleared from elsewhere: the file's values again.
        store.apply_remote(other, None, 4);
        assert_eq!(state_of(&web, addr(9002)), Some((proxy::AdminState::Up, 1)));
        assert!(web.settings().pins.is_empty());
        assert!(local.try_recv().is_err(), "remote changes are not told");
    }

    /// Shared through etcd: this instance's own earlier write coming back after a newer local
    /// change (drain, then up; the drain's echo arrives late) does not undo the newer one,
    /// nor does a snapshot; once etcd acknowledged the newer value, remote changes apply again.
    #[tokio::test]
    async fn an_echo_older_than_a_local_change_does_not_undo_it() {
        let store = StateStore::open(None);
        let (_proxy, web) = started(&store).await;
        assert!(store.share_with_fleet().is_empty());
        let key = "upstreams/web/backends/127.0.0.1:9001";
        let drain = br#"{"state":{"value":"drain","file":"up"}}"#;
        for state in [proxy::AdminState::Drain, proxy::AdminState::Up] {
            assert!(web.set_state(addr(9001), state).is_ok());
            store.changed(admin::Change::State {
                upstream: "web",
                addr: addr(9001),
                state,
            });
        }
        // The drain was written at revision 5, its clearing at 6.
        store.apply_remote(key, Some(drain), 5);
        store.replace_all([(key.to_owned(), drain.to_vec())].into(), 5);
        assert_eq!(state_of(&web, addr(9001)), Some((proxy::AdminState::Up, 1)));
        assert!(store.records().is_empty());
        // etcd acknowledged the clearing: what it says from now on is newer.
        store.synced(key, None, 6);
        assert_eq!(state_of(&web, addr(9001)), Some((proxy::AdminState::Up, 1)));
        store.apply_remote(key, Some(drain), 7);
        assert_eq!(
            state_of(&web, addr(9001)),
            Some((proxy::AdminState::Drain, 1))
        );
    }

    /// Another instance's write that lands between this instance's write and etcd's
    /// acknowledgement of it (a higher revision) is the newer: it applies once the
    /// acknowledgement says so, whichever of the two this instance hears first; this
    /// instance's own echo and older changes do not, and an acknowledgement of a value
    /// changed here since leaves the key unsynced.
    #[tokio::test]
    async fn a_fleet_write_newer_than_an_unacknowledged_local_one_wins() {
        let store = StateStore::open(None);
        let (_proxy, web) = started(&store).await;
        assert!(store.share_with_fleet().is_empty());
        let key = "upstreams/web/backends/127.0.0.1:9001";
        let drain = br#"{"state":{"value":"drain","file":"up"}}"#;
        let disabled = br#"{"state":{"value":"disabled","file":"up"}}"#;
        let weighted = br#"{"weight":{"value":3,"file":1}}"#;
        let local = |state| {
            assert!(web.set_state(addr(9001), state).is_ok());
            store.changed(admin::Change::State {
                upstream: "web",
                addr: addr(9001),
                state,
            });
        };
        // Drained here, written at 10; another instance disables it at 11. The watch brings
        // both before the acknowledgement: the drain holds meanwhile, then the newer wins.
        local(proxy::AdminState::Drain);
        store.apply_remote(key, Some(drain), 10);
        store.apply_remote(key, Some(disabled), 11);
        assert_eq!(
            state_of(&web, addr(9001)).unwrap().0,
            proxy::AdminState::Drain
        );
        store.synced(key, Some(drain), 10);
        assert_eq!(
            state_of(&web, addr(9001)).unwrap().0,
            proxy::AdminState::Disabled
        );
        assert_eq!(store.records()[key], disabled.to_vec());

        // Drained again here, written at 20 and acknowledged first: the echo (20) and an older
        // change (19) do not apply, a newer one (21) does.
        local(proxy::AdminState::Drain);
        store.synced(key, Some(drain), 20);
        store.apply_remote(key, Some(disabled), 19);
        store.apply_remote(key, Some(drain), 20);
        assert_eq!(
            state_of(&web, addr(9001)).unwrap().0,
            proxy::AdminState::Drain
        );
        store.apply_remote(key, Some(weighted), 21);
        assert_eq!(state_of(&web, addr(9001)), Some((proxy::AdminState::Up, 3)));

        // Disabled here, then up again before etcd acknowledged the first: that
        // acknowledgement leaves the key unsynced (a change from the fleet is held), the
        // second's applies what is newer than it.
        local(proxy::AdminState::Disabled);
        let first = store.records()[key].clone();
        local(proxy::AdminState::Up);
        let second = store.records()[key].clone();
        assert_eq!(second, weighted.to_vec());
        store.synced(key, Some(&first), 30);
        store.apply_remote(key, Some(drain), 32);
        assert_eq!(state_of(&web, addr(9001)), Some((proxy::AdminState::Up, 3)));
        store.synced(key, Some(&second), 31);
        assert_eq!(
            state_of(&web, addr(9001)).unwrap().0,
            proxy::AdminState::Drain
        );
    }

    /// A change made while a reload is under way (between its prepare and its commit) is
    /// neither lost by the store nor undone on the running upstream.
    #[tokio::test]
    async fn a_change_during_a_reload_stays() {
        let store = StateStore::open(None);
        let (proxy, web) = started(&store).await;
        let mut cfg = crate::config::parse(Path::new("t.toml"), FILE).unwrap();
        let prepared = store.prepare(&mut cfg.proxy, &cfg.written);
        assert!(web.set_state(addr(9002), proxy::AdminState::Drain).is_ok());
        store.changed(admin::Change::State {
            upstream: "web",
            addr: addr(9002),
            state: proxy::AdminState::Drain,
        });
        proxy.handle().reload(cfg.proxy).await.unwrap();
        store.commit(prepared);
        assert_eq!(store.records().len(), 1);
        assert_eq!(
            state_of(&web, addr(9002)),
            Some((proxy::AdminState::Drain, 1))
        );
        assert_eq!(
            web.settings().pins[&addr(9002)].state,
            Some(proxy::AdminState::Drain)
        );
    }

    /// A weight from the fleet that the ring of a `hash` upstream with `consistent` could not
    /// be built for (10,000 in all) is not applied, alone or beside one in force, by a key or
    /// in a snapshot; one within the bound is.
    #[tokio::test]
    async fn a_shared_weight_past_the_rings_bound_is_not_applied() {
        let store = StateStore::open(None);
        let ring = FILE.replace(
            "algorithm = \"weighted_round_robin\"",
            "algorithm = \"hash\"\nconsistent = true",
        );
        let mut cfg = crate::config::parse(Path::new("t.toml"), &ring).unwrap();
        let prepared = store.prepare(&mut cfg.proxy, &cfg.written);
        store.commit(prepared);
        let proxy = proxy::Proxy::bind(cfg.proxy).await.unwrap();
        store.attach(proxy.handle());
        let web = proxy.upstreams().remove(0);
        let key = "upstreams/web/backends/127.0.0.1:9002";
        let other = "upstreams/web/backends/127.0.0.1:9001";
        store.apply_remote(key, Some(br#"{"weight":{"value":100000,"file":1}}"#), 7);
        assert_eq!(state_of(&web, addr(9002)), Some((proxy::AdminState::Up, 1)));
        assert!(store.records().is_empty());
        let heavy = br#"{"weight":{"value":6000,"file":1}}"#;
        store.apply_remote(other, Some(heavy), 8);
        store.apply_remote(key, Some(heavy), 9);
        assert_eq!(
            state_of(&web, addr(9001)),
            Some((proxy::AdminState::Up, 6000))
        );
        assert_eq!(state_of(&web, addr(9002)), Some((proxy::AdminState::Up, 1)));
        assert_eq!(store.records().len(), 1);
        store.replace_all(
            [(
                key.to_owned(),
                br#"{"weight":{"value":10001,"file":1}}"#.to_vec(),
            )]
            .into(),
            101,
        );
        assert_eq!(state_of(&web, addr(9001)), Some((proxy::AdminState::Up, 1)));
        assert_eq!(state_of(&web, addr(9002)), Some((proxy::AdminState::Up, 1)));
        assert!(store.records().is_empty());
        store.apply_remote(key, Some(br#"{"weight":{"value":9999,"file":1}}"#), 10);
        assert_eq!(
            state_of(&web, addr(9002)),
            Some((proxy::AdminState::Up, 9999))
        );
    }

    #[tokio::test]
    async fn a_snapshot_replaces_every_override() {
        let store = StateStore::open(None);
        let (_proxy, web) = started(&store).await;
        store.apply_remote(
            "upstreams/web/backends/127.0.0.1:9001",
            Some(br#"{"weight":{"value":3,"file":1}}"#),
            11,
        );
        assert_eq!(state_of(&web, addr(9001)), Some((proxy::AdminState::Up, 3)));
        let added = "upstreams/web/backends/127.0.0.1:9003";
        let removed = "upstreams/web/backends/127.0.0.1:9002";
        let algorithm = "upstreams/web/algorithm";
        let snapshot: BTreeMap<String, Vec<u8>> = [
            (added.to_owned(), br#"{"added":{"weight":2,"backup":false}}"#.to_vec()),
            (removed.to_owned(), br#"{"removed":true}"#.to_vec()),
            (
                algorithm.to_owned(),
                br#"{"value":{"algorithm":"least_conn","options":{}},"file":{"algorithm":"weighted_round_robin","options":{}}}"#.to_vec(),
            ),
        ]
        .into();
        store.replace_all(snapshot.clone(), 102);
        assert_eq!(store.records(), snapshot);
        // 9001 back to the file's weight, 9002 gone, 9003 in, the algorithm changed.
        assert_eq!(state_of(&web, addr(9001)), Some((proxy::AdminState::Up, 1)));
        assert_eq!(state_of(&web, addr(9002)), None);
        assert_eq!(state_of(&web, addr(9003)), Some((proxy::AdminState::Up, 2)));
        assert_eq!(web.settings().algorithm, balance::Algorithm::LeastConn);
        // An empty snapshot puts everything back as the file has it.
        store.replace_all(BTreeMap::new(), 103);
        assert!(store.records().is_empty());
        let addrs: Vec<SocketAddr> = web.snapshot().iter().map(|b| b.addr).collect();
        assert_eq!(addrs, vec![addr(9001), addr(9002)]);
        assert_eq!(
            web.settings().algorithm,
            balance::Algorithm::WeightedRoundRobin
        );
    }

    /// The overrides a start drops (the file changed their base, or no longer has their
    /// upstream) cost only themselves: the keys a former run left unsynced are still written
    /// to etcd first, and the state file still lists them. (The start's write of the state
    /// file, before the store knew it shares with a fleet, used to clear them.)
    #[tokio::test]
    async fn a_start_that_drops_an_override_keeps_the_unsynced_keys() {
        let dir =
            std::env::temp_dir().join(format!("fulcrum-state-unsynced-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.json");
        let key = "upstreams/web/backends/127.0.0.1:9001";
        std::fs::write(
            &path,
            format!(
                r#"{{"version": 1, "overrides": {{
                    "{key}": {{"state": {{"value": "drain", "file": "up"}}}},
                    "upstreams/gone/backends/127.0.0.1:9001": {{"state": {{"value": "drain", "file": "up"}}}}
                }}, "unsynced": ["{key}"]}}"#
            ),
        )
        .unwrap();
        let store = StateStore::open(Some(path.clone()));
        let (_proxy, web) = started(&store).await;
        assert_eq!(
            state_of(&web, addr(9001)).map(|s| s.0),
            Some(proxy::AdminState::Drain)
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("gone"), "{text}");
        assert!(text.contains("\"unsynced\""), "{text}");
        let unsynced = store.share_with_fleet();
        assert_eq!(unsynced.keys().collect::<Vec<_>>(), vec![key]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
