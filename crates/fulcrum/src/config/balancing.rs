//! An upstream's algorithm and options as the admin API takes them (`PATCH
//! /api/upstreams/{upstream}` with `{"algorithm": ..., "options": {...}}`), checked by the very
//! code that checks them in a file: the change is written as an `[[upstream]]` section with
//! the running upstream's backends and timeouts, and read by [`super::parse`]. So the API
//! refuses exactly what `fulcrum check` would, in the same words.

use std::collections::BTreeMap;
use std::path::Path;

use proxy::UpstreamSettings;
use serde_json::Value;

use super::algorithm::balancing_keys;

/// `current` with the algorithm `algorithm` and the balancing options `options` (the keys of
/// [`balancing_keys`], valued as in the file: `"30s"`, `true`, `65537`...); options not given
/// take their defaults. An error says what is wrong, in `fulcrum check`'s words.
pub fn apply(
    current: &UpstreamSettings,
    algorithm: &str,
    options: &serde_json::Map<String, Value>,
) -> Result<UpstreamSettings, String> {
    let text = as_file(current, algorithm, options)?;
    let parsed = super::parse(Path::new("the request"), &text).map_err(|e| {
        // Each problem without its line (the file is ours, not the caller's).
        e.problems
            .iter()
            .filter_map(|p| p.lines().next())
            .map(|line| {
                line.split_once("upstream[0].")
                    .map_or(line, |(_, rest)| rest)
                    .to_owned()
            })
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    let checked = &parsed.proxy.upstreams[0];
    let mut settings = current.clone();
    settings.algorithm = checked.algorithm;
    settings.hash_key = checked.hash_key.clone();
    settings.options = checked.options.clone();
    Ok(settings)
}

/// Each `[[upstream]]`'s balancing options (the keys of [`balancing_keys`]) as the file
/// `text` writes them, by upstream name, valued as in `PATCH /api/upstreams/{upstream}`: what
/// an algorithm override is compared with, so that a file that changed them can be told from
/// one that did not. A file that does not parse has none (it is checked elsewhere).
pub fn written(text: &str) -> BTreeMap<String, serde_json::Map<String, Value>> {
    let Ok(file) = text.parse::<toml::Table>() else {
        return BTreeMap::new();
    };
    let keys = balancing_keys();
    let upstreams = file.get("upstream").and_then(toml::Value::as_array);
    upstreams
        .into_iter()
        .flatten()
        .filter_map(toml::Value::as_table)
        .filter_map(|u| {
            let name = u.get("name")?.as_str()?.to_owned();
            let options = u
                .iter()
                .filter(|(k, _)| keys.contains(&k.as_str()))
                .filter_map(|(k, v)| Some((k.clone(), serde_json::to_value(v).ok()?)))
                .collect();
            Some((name, options))
        })
        .collect()
}

/// The change as a configuration file: one listener, and one `[[upstream]]` with the
/// algorithm, the options, and the running upstream's read timeout and backends.
fn as_file(
    current: &UpstreamSettings,
    algorithm: &str,
    options: &serde_json::Map<String, Value>,
) -> Result<String, String> {
    let mut upstream = toml::Table::new();
    upstream.insert("name".into(), "api".into());
    upstream.insert("algorithm".into(), algorithm.into());
    let keys = balancing_keys();
    for (key, value) in options {
        if !keys.contains(&key.as_str()) {
            return Err(format!(
                "options: {key:?} is not a balancing option; these are: {}",
                keys.join(", ")
            ));
        }
        upstream.insert(key.clone(), option_value(key, value)?);
    }
    // The penalty's default (the read timeout) and the options that depend on the number of
    // backends are checked against the running upstream's.
    upstream.insert(
        "read_timeout".into(),
        format!("{}ms", current.read_timeout.as_millis().max(1)).into(),
    );
    let backends: Vec<toml::Value> = current
        .backends
        .iter()
        .map(|b| {
            let mut t = toml::Table::new();
            t.insert("addr".into(), b.addr.to_string().into());
            t.insert("weight".into(), i64::from(b.weight.max(1)).into());
            t.insert("backup".into(), b.backup.into());
            toml::Value::Table(t)
        })
        .collect();
    upstream.insert("backend".into(), toml::Value::Array(backends));
    // An upstream with DNS discovery may have no backend yet: its first source stands in, as
    // in its file.
    if let Some(d) = current.discovery.first() {
        let mut t = toml::Table::new();
        t.insert("type".into(), d.query.kind.name().into());
        t.insert("name".into(), d.query.name.clone().into());
        if let Some(port) = d.query.port {
            t.insert("port".into(), i64::from(port).into());
        }
        upstream.insert("discovery".into(), toml::Value::Table(t));
    }
    let mut listener = toml::Table::new();
    listener.insert("listen".into(), "127.0.0.1:0".into());
    listener.insert("upstream".into(), "api".into());
    let mut file = toml::Table::new();
    file.insert(
        "listener".into(),
        toml::Value::Array(vec![toml::Value::Table(listener)]),
    );
    file.insert(
        "upstream".into(),
        toml::Value::Array(vec![toml::Value::Table(upstream)]),
    );
    toml::to_string(&file).map_err(|e| format!("options: {e}"))
}

/// An option's JSON value as the TOML value the file would hold: a string, a number or a
/// flag.
fn option_value(key: &str, value: &Value) -> Result<toml::Value, String> {
    match value {
        Value::Bool(b) => Ok(toml::Value::Boolean(*b)),
        Value::String(s) => Ok(toml::Value::String(s.clone())),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(toml::Value::Integer(i)),
            (None, Some(f)) => Ok(toml::Value::Float(f)),
            _ => Err(format!("options: {key}: {n} is not a number fulcrum reads")),
        },
        other => Err(format!(
            "options: {key}: write a string, a number or true/false, not {other}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proxy::BackendSettings;

    fn current() -> UpstreamSettings {
        let backends = (1..=3)
            .map(|p| BackendSettings::new(([127, 0, 0, 1], 9000 + p).into()))
            .collect();
        UpstreamSettings::new("web", balance::Algorithm::RoundRobin, backends)
    }

    fn options(json: &str) -> serde_json::Map<String, Value> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn options_are_checked_as_in_a_file() {
        let s = apply(&current(), "maglev", &options(r#"{"table_size": 65537}"#)).unwrap();
        assert_eq!(s.algorithm, balance::Algorithm::Maglev);
        assert_eq!(s.name, "web", "the rest stays");
        assert_eq!(s.backends.len(), 3);
        let s = apply(
            &current(),
            "hash",
            &options(r#"{"hash_key": "header:X-User"}"#),
        )
        .unwrap();
        assert_eq!(s.hash_key, proxy::HashKey::Header("X-User".into()));
        // The file's words.
        let e = apply(&current(), "maglev", &options(r#"{"table_size": 10}"#)).unwrap_err();
        assert!(e.starts_with("table_size: "), "{e}");
        let e = apply(
            &current(),
            "round_robin",
            &options(r#"{"table_size": 65537}"#),
        )
        .unwrap_err();
        assert!(
            e.contains("maglev"),
            "an option of another algorithm names it: {e}"
        );
        let e = apply(&current(), "fastest", &options("{}")).unwrap_err();
        assert!(e.contains("fastest"), "{e}");
        let e = apply(&current(), "hash", &options(r#"{"backend": []}"#)).unwrap_err();
        assert!(e.contains("not a balancing option"), "{e}");
    }

    #[test]
    fn options_as_written() {
        let text = "[[upstream]]\nname = \"web\"\nalgorithm = \"maglev\"\ntable_size = 65537\nretries = 2\n\n[[upstream]]\nname = \"api\"\n";
        let w = written(text);
        assert_eq!(w["web"], options(r#"{"table_size": 65537}"#));
        assert!(w["api"].is_empty());
        assert!(written("not toml [").is_empty());
    }

    #[test]
    fn an_upstream_dns_has_given_nothing_yet_changes_its_algorithm() {
        let mut empty = current();
        empty.backends.clear();
        empty.discovery = vec![proxy::DiscoverySettings {
            query: proxy::DiscoveryQuery {
                kind: proxy::RecordKind::Srv,
                name: "_http._tcp.api.service.consul".into(),
                port: None,
            },
            resolvers: Vec::new(),
            ipv6: true,
            min_interval: std::time::Duration::from_secs(1),
            max_interval: std::time::Duration::from_secs(60),
            template: BackendSettings::new(([0, 0, 0, 0], 0).into()),
        }];
        let s = apply(&empty, "least_conn", &options("{}")).unwrap();
        assert_eq!(s.algorithm, balance::Algorithm::LeastConn);
        assert!(s.backends.is_empty() && s.discovery.len() == 1);
    }
}
