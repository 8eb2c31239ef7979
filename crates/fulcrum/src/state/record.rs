//! One override as data: its key, its JSON value, and what the configuration file said of
//! the item when the override was made (its base), so that a later file that changed the item
//! can be told from one that did not.
//!
//! Keys are relative and name one thing an operator changes through the admin API:
//! `upstreams/{upstream}/backends/{addr}` (that backend's state, weight, and whether it was
//! added or removed, one JSON object) and `upstreams/{upstream}/algorithm` (the algorithm with
//! its options). The state file and etcd store exactly these keys and values.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use proxy::AdminState;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What a key names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Backend { upstream: String, addr: SocketAddr },
    Algorithm { upstream: String },
}

impl Key {
    pub fn backend(upstream: &str, addr: SocketAddr) -> String {
        format!("upstreams/{upstream}/backends/{addr}")
    }

    pub fn algorithm(upstream: &str) -> String {
        format!("upstreams/{upstream}/algorithm")
    }

    /// Reads a key; `None` for one of another form. An upstream's name may hold a `/`: the
    /// backend's address, which cannot, is what follows the last `/backends/`. A backend on
    /// port 0 is none (nothing can be connected to there: the file and the API refuse it).
    pub fn parse(key: &str) -> Option<Key> {
        let rest = key.strip_prefix("upstreams/")?;
        if let Some(upstream) = rest.strip_suffix("/algorithm")
            && !upstream.is_empty()
        {
            return Some(Key::Algorithm {
                upstream: upstream.to_owned(),
            });
        }
        let (upstream, addr) = rest.rsplit_once("/backends/")?;
        let addr: SocketAddr = addr.parse().ok()?;
        (!upstream.is_empty() && addr.port() != 0).then(|| Key::Backend {
            upstream: upstream.to_owned(),
            addr,
        })
    }

    pub fn upstream(&self) -> &str {
        match self {
            Key::Backend { upstream, .. } | Key::Algorithm { upstream } => upstream,
        }
    }
}

/// An operator's state as written in a record: `"up"`, `"drain"`, `"disabled"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct State(pub AdminState);

impl TryFrom<String> for State {
    type Error = String;

    fn try_from(s: String) -> Result<State, String> {
        s.parse().map(State)
    }
}

impl From<State> for String {
    fn from(s: State) -> String {
        s.0.name().to_owned()
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name())
    }
}

impl std::fmt::Display for Balancing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.algorithm)?;
        if !self.options.is_empty() {
            write!(f, " {}", serde_json::Value::Object(self.options.clone()))?;
        }
        Ok(())
    }
}

/// One overridden value and the file's value of it when the override was made (`None`: the
/// file did not have the backend).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Item<T> {
    pub value: T,
    pub file: Option<T>,
}

/// A backend the admin API added that the file does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Added {
    pub weight: u32,
    #[serde(default)]
    pub backup: bool,
}

/// The overrides of one backend (`upstreams/{upstream}/backends/{addr}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Item<State>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<Item<u32>>,
    /// Added by the API (its base: not in the file); its weight is this one's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added: Option<Added>,
    /// Removed by the API (its base: in the file).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
}

impl BackendRecord {
    /// Itself if every weight it sets is one the admin API would take (1 to
    /// [`proxy::MAX_WEIGHT`]): a state file or an etcd key written by hand passes the same
    /// check as a call, so no value from either can build a pool the API would refuse.
    fn weights_in_range(self) -> Result<BackendRecord, String> {
        let weights = self
            .weight
            .map(|w| w.value)
            .into_iter()
            .chain(self.added.map(|a| a.weight));
        for w in weights {
            if !(1..=proxy::MAX_WEIGHT).contains(&w) {
                return Err(format!(
                    "a weight is from 1 to {}, not {w}",
                    proxy::MAX_WEIGHT
                ));
            }
        }
        Ok(self)
    }

    /// Whether it overrides nothing (then it is no record at all).
    pub fn is_empty(&self) -> bool {
        *self == BackendRecord::default()
    }
}

/// An algorithm and its options as written: in the file (`algorithm` and the balancing keys
/// of an `[[upstream]]`, valued as TOML's JSON counterparts) or sent to
/// `PATCH /api/upstreams/{upstream}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Balancing {
    pub algorithm: String,
    #[serde(default)]
    pub options: Map<String, Value>,
}

/// The algorithm of one upstream (`upstreams/{upstream}/algorithm`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlgorithmRecord {
    pub value: Balancing,
    pub file: Balancing,
}

/// One record's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Backend(BackendRecord),
    Algorithm(AlgorithmRecord),
}

impl Record {
    /// Reads the value of `key`; an error says what is wrong.
    pub fn parse(key: &str, value: &[u8]) -> Result<Record, String> {
        match Key::parse(key) {
            None => Err(format!(
                "{key:?} is not a key of an override: upstreams/NAME/backends/ADDR (an IP address and a port from 1 to 65535) or upstreams/NAME/algorithm"
            )),
            Some(Key::Backend { .. }) => serde_json::from_slice::<BackendRecord>(value)
                .map_err(|e| format!("{key}: {e}"))
                .and_then(|r| match r.is_empty() {
                    true => Err(format!("{key}: an override of nothing")),
                    false => r.weights_in_range().map_err(|e| format!("{key}: {e}")),
                })
                .map(Record::Backend),
            Some(Key::Algorithm { .. }) => serde_json::from_slice(value)
                .map(Record::Algorithm)
                .map_err(|e| format!("{key}: {e}")),
        }
    }

    pub fn to_json(&self) -> Value {
        let v = match self {
            Record::Backend(b) => serde_json::to_value(b),
            Record::Algorithm(a) => serde_json::to_value(a),
        };
        v.unwrap_or(Value::Null)
    }

    /// The value as stored (in etcd): its fields in the order written here.
    pub fn to_bytes(&self) -> Vec<u8> {
        let bytes = match self {
            Record::Backend(b) => serde_json::to_vec(b),
            Record::Algorithm(a) => serde_json::to_vec(a),
        };
        bytes.unwrap_or_default()
    }
}

/// Every override, by key.
pub type Records = BTreeMap<String, Record>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_out_of_range_are_refused() {
        let key = "upstreams/web/backends/127.0.0.1:9001";
        for bad in [
            r#"{"weight":{"value":0,"file":1}}"#,
            r#"{"weight":{"value":4294967295,"file":1}}"#,
            r#"{"added":{"weight":1000001}}"#,
        ] {
            let e = Record::parse(key, bad.as_bytes()).unwrap_err();
            assert!(e.contains("a weight is from 1 to 1000000"), "{bad}: {e}");
        }
        assert!(Record::parse(key, br#"{"added":{"weight":1000000}}"#).is_ok());
    }

    #[test]
    fn keys_read_back() {
        let addr: SocketAddr = "127.0.0.1:9001".parse().unwrap();
        let k = Key::backend("web", addr);
        assert_eq!(k, "upstreams/web/backends/127.0.0.1:9001");
        assert_eq!(
            Key::parse(&k),
            Some(Key::Backend {
                upstream: "web".into(),
                addr
            })
        );
        let v6: SocketAddr = "[::1]:80".parse().unwrap();
        assert_eq!(
            Key::parse(&Key::backend("a/backends/b", v6)),
            Some(Key::Backend {
                upstream: "a/backends/b".into(),
                addr: v6
            })
        );
        assert_eq!(
            Key::parse("upstreams/web/algorithm"),
            Some(Key::Algorithm {
                upstream: "web".into()
            })
        );
        for bad in [
            "",
            "upstreams//algorithm",
            "upstreams/web/backends/nope",
            "upstreams/web/backends/127.0.0.9:0",
            "upstreams/web/backends/[::1]:0",
            "web/algorithm",
        ] {
            assert_eq!(Key::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn records_are_the_documented_json() {
        let key = "upstreams/web/backends/127.0.0.1:9001";
        let text = br#"{"state":{"value":"drain","file":"up"},"weight":{"value":5,"file":1}}"#;
        let r = Record::parse(key, text).unwrap();
        let Record::Backend(b) = &r else {
            panic!("{r:?}")
        };
        assert_eq!(b.state.unwrap().value, State(AdminState::Drain));
        assert_eq!(b.weight.unwrap().file, Some(1));
        assert_eq!(r.to_bytes(), text.to_vec());
        let added =
            br#"{"added":{"weight":2,"backup":false},"state":{"value":"drain","file":null}}"#;
        assert!(Record::parse(key, added).is_ok());
        for bad in [
            &br#"{"state":{"value":"sleeping","file":"up"}}"#[..],
            br#"{"weight":{"value":"5","file":1}}"#,
            br#"{"colour":"red"}"#,
            br#"{}"#,
            b"not json",
        ] {
            let e = Record::parse(key, bad).unwrap_err();
            assert!(e.starts_with(key), "{e}");
        }
        let alg = br#"{"value":{"algorithm":"maglev","options":{"table_size":65537}},"file":{"algorithm":"round_robin","options":{}}}"#;
        let r = Record::parse("upstreams/web/algorithm", alg).unwrap();
        assert_eq!(r.to_bytes(), alg.to_vec());
        assert!(Record::parse("elsewhere", alg).is_err());
    }
}
