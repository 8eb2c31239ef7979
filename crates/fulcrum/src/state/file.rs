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
//! overwritten, and fulcrum starts on its configuration alone.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::record::{Record, Records};

/// The form written; a file of another version is refused (set aside) rather than misread.
const VERSION: u64 = 1;

/// What reading the state file found.
#[derive(Debug)]
pub enum Read {
    /// No file yet: no overrides.
    Missing,
    /// The overrides, and the keys etcd has not acknowledged yet.
    Found(Records, BTreeSet<String>),
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
        Ok((records, unsynced)) => Read::Found(records, unsynced),
        Err(why) => Read::Bad {
            why,
            aside: set_aside(path),
        },
    }
}

/// The records of a state file's text, and its unsynced keys; an error says what is wrong.
pub fn parse(text: &[u8]) -> Result<(Records, BTreeSet<String>), String> {
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
    let mut records = BTreeMap::new();
    for (key, value) in overrides {
        let bytes = serde_json::to_vec(value).unwrap_or_default();
        records.insert(key.clone(), Record::parse(key, &bytes)?);
    }
    let unsynced = match doc.get("unsynced") {
        None => BTreeSet::new(),
        Some(Value::Array(keys)) => keys
            .iter()
            .map(|k| {
                k.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("\"unsynced\" holds {k}, not a key"))
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(format!("its \"unsynced\" is {other}, not a list of keys")),
    };
    Ok((records, unsynced))
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
            Read::Found(back, unsynced) => assert_eq!((back, unsynced.len()), (records.clone(), 0)),
            other => panic!("{other:?}"),
        }
        // The keys etcd has not acknowledged are kept with them.
        let unsynced: BTreeSet<String> = [key.to_owned()].into();
        write(&path, &text(&records, &unsynced)).unwrap();
        match read(&path) {
            Read::Found(back, kept) => assert_eq!((back, kept), (records, unsynced)),
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
            b"{\"version\": 1, \"overrides\": {\"upstreams/web/backends/x\": {}}}",
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
}
