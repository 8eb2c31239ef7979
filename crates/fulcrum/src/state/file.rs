//! The state file (`state_file`): every override, written after each change by atomic
//! replace and read at start, as HAProxy's `server-state-file` keeps server states across
//! reloads.
//!
//! The form: `{"version": 1, "overrides": {KEY: VALUE, ...}, "unsynced": [KEY, ...]}`, keys
//! and values those of [`super::record`]; `unsynced` (left out when empty) lists the keys
//! changed here that etcd has not acknowledged yet (`[cluster]`): they are written to etcd
//! before anything is read from it, even after a restart. A write goes to a temporary file in the same directory, is synced,
//! renamed over the old one and the directory synced: a crash leaves the old file or the new
//! one, never half of one. A file that cannot be read is set aside under a new name, never
//! overwritten, and fulcrum starts on its configuration alone. One bad override in a good file
//! (a value written by hand, a field a newer fulcrum wrote) costs only itself: the others are
//! applied, and the file as it was is kept under a new name for the operator to read. A
//! dropped entry is never written to etcd: its key leaves `unsynced`, where with no record it
//! would be written as a delete of the fleet's value.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::record::{Key, Record, Records};

/// The form written; a file of another version is refused (set aside) rather than misread.
const VERSION: u64 = 1;

/// What reading the state file found.
#[derive(Debug)]
pub enum Read {
    /// No file yet: no overrides.
    Missing,
    /// The overrides, and the keys etcd has not acknowledged yet.
    Found(Parsed),
    /// It could not be read or parsed: why, and where it was set aside (`None`: it could not
    /// be, and stays where it is).
    Bad {
        why: String,
        aside: Result<PathBuf, String>,
    },
}

/// Reads the state file at `path`; a bad one is set aside.
pub fn read(path: &Path) -> Read {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Read::Missing,
        Err(e) => {
            return Read::Bad {
                why: format!("cannot read it: {e}"),
                aside: set_aside(path),
            };
        }
    };
    match parse(&text) {
        Ok(mut parsed) => {
            if !parsed.dropped.is_empty() {
                parsed.copy = Some(keep_copy(path, false));
            }
            Read::Found(parsed)
        }
        Err(why) => Read::Bad {
            why,
            aside: set_aside(path),
        },
    }
}

/// A state file's contents that could be used.
#[derive(Debug, Default)]
pub struct Parsed {
    pub records: Records,
    /// The keys etcd has not acknowledged yet.
    pub unsynced: BTreeSet<String>,
    /// The entries that could not be used, each with what is wrong (its key first).
    pub dropped: Vec<String>,
    /// With entries dropped: where the file as it was is kept (see [`read`]).
    pub copy: Option<Result<PathBuf, String>>,
}

/// The records of a state file's text, its unsynced keys, and what could not be used of
/// them, entry by entry; an error (the whole file unusable) says what is wrong.
pub fn parse(text: &[u8]) -> Result<Parsed, String> {
    let doc: Value = serde_json::from_slice(text).map_err(|e| format!("it is not JSON: {e}"))?;
    let version = doc.get("version").and_then(Value::as_u64);
    if version != Some(VERSION) {
        return Err(format!(
            "its \"version\" is {}, and this fulcrum reads version {VERSION}",
            doc.get("version")
                .map_or_else(|| "missing".to_owned(), Value::to_string)
        ));
    }
    let overrides = doc
        .get("overrides")
        .and_then(Value::as_object)
        .ok_or("it has no \"overrides\" object")?;
    let mut parsed = Parsed::default();
    // The keys of the entries dropped, with where each is told in `dropped`.
    let mut dropped_keys = Vec::new();
    for (key, value) in overrides {
        let bytes = serde_json::to_vec(value).unwrap_or_default();
        match Record::parse(key, &bytes) {
            Ok(r) => {
                parsed.records.insert(key.clone(), r);
            }
            Err(e) => {
                dropped_keys.push((key.as_str(), parsed.dropped.len()));
                parsed.dropped.push(e);
            }
        }
    }
    match doc.get("unsynced") {
        None => {}
        Some(Value::Array(keys)) => {
            for k in keys {
                match k.as_str() {
                    Some(k) => {
                        parsed.unsynced.insert(k.to_owned());
                    }
                    None => parsed
                        .dropped
                        .push(format!("\"unsynced\" holds {k}, not a key")),
                }
            }
        }
        Some(other) => parsed
            .dropped
            .push(format!("its \"unsynced\" is {other}, not a list of keys")),
    }
    // A dropped entry is never written to etcd: unsynced, with no record, it would be written
    // as a delete, clearing the fleet's value of the key on every instance.
    for (key, at) in dropped_keys {
        if parsed.unsynced.remove(key) {
            parsed.dropped[at].push_str(
                "; it is listed in \"unsynced\" and is not written to etcd either: etcd keeps the fleet's value of it",
            );
        }
    }
    let not_keys: Vec<String> = parsed
        .unsynced
        .iter()
        .filter(|k| Key::parse(k).is_none())
        .cloned()
        .collect();
    for k in not_keys {
        parsed.unsynced.remove(&k);
        parsed.dropped.push(format!(
            "\"unsynced\" holds {k:?}, not a key of an override (upstreams/NAME/backends/ADDR, an IP address and a port from 1 to 65535, or upstreams/NAME/algorithm): nothing is written to etcd for it"
        ));
    }
    Ok(parsed)
}

/// The text of a state file holding `records`, with the keys etcd has not acknowledged.
pub fn text(records: &Records, unsynced: &BTreeSet<String>) -> Vec<u8> {
    let overrides: serde_json::Map<String, Value> = records
        .iter()
        .map(|(k, r)| (k.clone(), r.to_json()))
        .collect();
    let mut doc = json!({"version": VERSION, "overrides": overrides});
    if !unsynced.is_empty() {
        doc["unsynced"] = json!(unsynced);
    }
    let mut text = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    text.push(b'\n');
    text
}

/// Writes `text` to `path` by atomic replace: a temporary file in the same directory,
/// synced, renamed over `path`, and the directory synced so the rename itself is durable.
pub fn write(path: &Path, text: &[u8]) -> std::io::Result<()> {
    let dir = directory(path);
    let name = path
        .file_name()
        .map_or_else(|| "state".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    std::fs::File::open(dir)?.sync_all()
}

/// The directory `path` is in (`.` for a bare name).
pub fn directory(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Moves a bad state file to `{path}.bad-{unix seconds}[-n]`, a name no file has: linked
/// there first (which fails rather than overwrite), then unlinked from its own name.
fn set_aside(path: &Path) -> Result<PathBuf, String> {
    keep_copy(path, true)
}

/// Links the state file to `{path}.bad-{unix seconds}[-n]`, a name no file has (linking fails
/// rather than overwrite), and unlinks it from its own name if `moved`. Without, the copy
/// stays as the file was: the next write replaces the file by a new one, never in place.
fn keep_copy(path: &Path, moved: bool) -> Result<PathBuf, String> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let base = format!("{}.bad-{secs}", path.display());
    for n in 0..100 {
        let aside = PathBuf::from(match n {
            0 => base.clone(),
            n => format!("{base}-{n}"),
        });
        match std::fs::hard_link(path, &aside) {
            Ok(()) if !moved => return Ok(aside),
            Ok(()) => {
                return match std::fs::remove_file(path) {
                    Ok(()) => Ok(aside),
                    Err(e) => Err(format!(
                        "cannot remove it after linking it to {}: {e}",
                        aside.display()
                    )),
                };
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot link it to {}: {e}", aside.display())),
        }
    }
    Err(format!("{base} and 99 more names are taken"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fulcrum-state-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn written_and_read_back() {
        let dir = scratch("rw");
        let path = dir.join("state.json");
        assert!(matches!(read(&path), Read::Missing));
        let key = "upstreams/web/backends/127.0.0.1:9001";
        let r = Record::parse(key, br#"{"state":{"value":"drain","file":"up"}}"#).unwrap();
        let records: Records = [(key.to_owned(), r)].into();
        write(&path, &text(&records, &BTreeSet::new())).unwrap();
        match read(&path) {
            Read::Found(p) => assert_eq!((p.records, p.unsynced.len()), (records.clone(), 0)),
            other => panic!("{other:?}"),
        }
        // The keys etcd has not acknowledged are kept with them.
        let unsynced: BTreeSet<String> = [key.to_owned()].into();
        write(&path, &text(&records, &unsynced)).unwrap();
        match read(&path) {
            Read::Found(p) => assert_eq!((p.records, p.unsynced), (records, unsynced)),
            other => panic!("{other:?}"),
        }
        // Nothing but the file itself is left in the directory.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.json")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bad_file_is_set_aside_never_overwritten() {
        let dir = scratch("bad");
        let path = dir.join("state.json");
        for (n, bad) in [
            &b"{\"version\": 1, \"overrides\": "[..],
            b"{\"version\": 7, \"overrides\": {}}",
            b"{\"version\": 1, \"overrides\": []}",
        ]
        .into_iter()
        .enumerate()
        {
            std::fs::write(&path, bad).unwrap();
            let Read::Bad { why, aside } = read(&path) else {
                panic!("{n}: read as good")
            };
            assert!(!why.is_empty());
            let aside = aside.unwrap();
            assert_eq!(std::fs::read(&aside).unwrap(), bad, "{n}: kept whole");
            assert!(!path.exists(), "{n}");
        }
        // Three set aside, under three names.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// One bad entry costs only itself: the good ones are read, each bad one is told with its
    /// key, and the file as it was is kept beside it (it stays where it is, to be rewritten).
    #[test]
    fn a_bad_entry_is_dropped_alone_and_the_file_kept() {
        let dir = scratch("entry");
        let path = dir.join("state.json");
        let good = "upstreams/web/backends/127.0.0.1:9001";
        let text = format!(
            r#"{{"version": 1, "overrides": {{
                "{good}": {{"state": {{"value": "drain", "file": "up"}}}},
                "upstreams/web/backends/127.0.0.1:9002": {{"weight": {{"value": 0, "file": 1}}}},
                "upstreams/web/backends/127.0.0.1:9003": {{"state": {{"value": "drain", "file": "up"}}, "colour": "red"}},
                "upstreams/web/backends/127.0.0.9:0": {{"added": {{"weight": 1}}}},
                "elsewhere": {{}}
            }}, "unsynced": ["{good}", 7, "upstreams/web/backends/127.0.0.1:9003",
                "upstreams/web/backends/127.0.0.9:0", "upstreams/web/backends/127.0.0.1:0"]}}"#
        );
        std::fs::write(&path, &text).unwrap();
        let Read::Found(p) = read(&path) else {
            panic!("a good file with bad entries read as bad")
        };
        assert_eq!(p.records.keys().collect::<Vec<_>>(), vec![good]);
        assert_eq!(p.unsynced, [good.to_owned()].into());
        // A dropped entry listed as unsynced is not: it would be written to etcd as a delete.
        assert_eq!(p.dropped.len(), 6, "{:?}", p.dropped);
        let told = |what: &str, why: &str| {
            p.dropped
                .iter()
                .any(|d| d.contains(what) && d.contains(why))
        };
        assert!(told("127.0.0.1:9002", "from 1"), "{:?}", p.dropped);
        assert!(told("127.0.0.1:9003", "colour"), "{:?}", p.dropped);
        assert!(told("elsewhere", "not a key"), "{:?}", p.dropped);
        assert!(told("unsynced", "7"), "{:?}", p.dropped);
        assert!(
            told("127.0.0.1:9003", "not written to etcd"),
            "{:?}",
            p.dropped
        );
        assert!(told("127.0.0.9:0", "port from 1"), "{:?}", p.dropped);
        assert!(
            told("127.0.0.9:0", "not written to etcd"),
            "{:?}",
            p.dropped
        );
        assert!(
            told("127.0.0.1:0", "nothing is written to etcd"),
            "{:?}",
            p.dropped
        );
        let copy = p.copy.unwrap().unwrap();
        assert_eq!(std::fs::read_to_string(&copy).unwrap(), text);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
