//! The configuration file: TOML, read strictly, checked as a whole, and turned into the
//! proxy's settings.
//!
//! `fulcrum check` must refuse everything `fulcrum run` could not honour, and say so in the
//! words of `docs/configuration.md`: every problem is reported as
//! `file:line:column: key.path: what is wrong`, with the offending line shown and what would
//! be accepted, and all problems of a file are reported at once. So the file is not
//! deserialized in one go (serde stops at the first wrong value and speaks Rust): it is parsed
//! into a spanned TOML document, and each section reads its keys from it one by one, checking
//! each value where it is read.
//!
//! # Layout
//!
//! * [`file`]: the top level (`workers`, `access_log`, `shutdown_timeout`) and what ties the
//!   sections together (unique names, listeners to existing upstreams).
//! * [`listener`], [`upstream`], [`backend`]: one module per section, each holding its keys
//!   and their checks side by side; [`algorithm`]: an upstream's algorithm and its options.
//! * [`tls`]: a listener's `[[listener.tls]]` certificates, read and checked as `run` would
//!   read them.
//! * [`admin`]: the admin listener and its token.
//! * [`cluster`]: the etcd a fleet shares its admin-API changes through.
//! * [`log`]: `log_level` and `log_format`, fulcrum's own log.
//! * [`balancing`]: an algorithm and its options from the admin API, checked as in a file.
//! * [`address`]: how listen, backend and trusted-proxy addresses are written.
//! * [`duration`]: `"250ms"`, the one-year bound, and what 0 means per key.
//! * [`table`]: one TOML table read key by key, in the docs' words; unknown keys with a
//!   suggestion.
//! * [`report`]: problems collected and shown with their line; [`ConfigError`].
//! * [`settings`]: the one place a checked file becomes [`proxy::ProxySettings`].

mod access;
mod address;
pub mod admin;
mod algorithm;
mod backend;
pub mod balancing;
mod cluster;
mod discovery;
mod duration;
mod file;
mod header_rules;
mod health;
mod limits;
mod listener;
pub mod log;
mod report;
mod route;
mod settings;
mod sticky;
mod table;
mod tls;
mod upstream;

use std::path::Path;

use proxy::ProxySettings;
use toml::de::DeTable;

pub use report::ConfigError;
use report::Report;

/// A configuration ready to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub proxy: ProxySettings,
    /// The admin listener, when the file has an `[admin]`.
    pub admin: Option<admin::Admin>,
    /// The etcd shared by a fleet, when the file has a `[cluster]`.
    pub cluster: Option<crate::cluster::ClusterSettings>,
    /// Things that are allowed but probably not meant, as `file:line: message`.
    pub warnings: Vec<String>,
    /// `state_file`: where the admin API's changes are kept across restarts.
    pub state_file: Option<std::path::PathBuf>,
    /// `log_level` and `log_format`: fulcrum's own log.
    pub log: log::Log,
}

/// Reads and checks a configuration file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        path: path.to_owned(),
        problems: vec![format!(
            "{}: cannot read the configuration file: {e}",
            path.display()
        )],
    })?;
    parse(path, &text)
}

/// Checks configuration text; `path` is only used in messages.
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let mut report = Report::new(path, text);
    match DeTable::parse(text) {
        // A syntax error leaves the rest of the file unreadable: it is the one problem shown.
        Err(e) => {
            let message = e.message().replace('\n', " ");
            match e.span() {
                Some(span) => report.error(span, "", message.trim()),
                None => report.error_in_file("", message.trim()),
            }
            Err(report.into_error())
        }
        Ok(doc) => {
            let mut file = file::read(&mut report, &doc);
            let warnings = report.finish()?;
            let admin = file.admin.take();
            let cluster = file.cluster.take();
            let state_file = file.state_file.take();
            let log = std::mem::take(&mut file.log);
            Ok(Config {
                proxy: settings::proxy(file),
                admin,
                cluster,
                warnings,
                state_file,
                log,
            })
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A small valid file and ways to vary it, for the tests of every section.

    use std::path::Path;

    use super::{Config, parse};

    pub(crate) const GOOD: &str = r#"
workers = 2

[[listener]]
listen = "127.0.0.1:8080"
upstream = "web"

[[upstream]]
name = "web"
algorithm = "least_conn"
connect_timeout = "250ms"

  [[upstream.backend]]
  addr = "127.0.0.1:9001"
  weight = 3

  [[upstream.backend]]
  addr = "127.0.0.1:9002"
  backup = true
"#;

    /// The configuration `text` makes; panics with the problems if there are any.
    pub(crate) fn ok(text: &str) -> Config {
        match parse(Path::new("t.toml"), text) {
            Ok(c) => c,
            Err(e) => panic!("expected a valid configuration:\n{e}"),
        }
    }

    /// The problems with `text`, as printed; panics if there are none.
    pub(crate) fn refused(text: &str) -> String {
        match parse(Path::new("t.toml"), text) {
            Ok(_) => panic!("expected problems, the configuration passed:\n{text}"),
            Err(e) => e.to_string(),
        }
    }

    /// GOOD with `algorithm` and extra upstream lines in place of `connect_timeout`.
    pub(crate) fn with_algorithm(algorithm: &str, lines: &str) -> String {
        GOOD.replace("least_conn", algorithm)
            .replace("connect_timeout = \"250ms\"", lines)
    }

    /// GOOD with extra listener lines.
    pub(crate) fn with_listener(lines: &str) -> String {
        GOOD.replace(
            "upstream = \"web\"\n",
            &format!("upstream = \"web\"\n{lines}\n"),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use balance::Algorithm;

    use super::testing::*;

    #[test]
    fn good_config() {
        let c = ok(GOOD);
        assert_eq!(c.proxy.workers, 2);
        let u = &c.proxy.upstreams[0];
        assert_eq!(u.algorithm, Algorithm::LeastConn);
        assert_eq!(u.connect_timeout, Duration::from_millis(250));
        assert_eq!(u.backends[0].weight, 3);
        assert!(u.backends[1].backup);
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn toml_syntax_error_has_line() {
        let e = refused("workers = \n[[listener]]\n");
        assert!(e.starts_with("t.toml:1:"), "{e}");
    }

    /// Defect 4 of issue 10: only the first type error was reported.
    #[test]
    fn every_type_and_validation_error_at_once() {
        let text = GOOD
            .replace("workers = 2", "workers = \"2\"")
            .replace("weight = 3", "weight = \"3\"")
            .replace("\"250ms\"", "2")
            .replace("backup = true", "backup = \"yes\"")
            .replace("least_conn", "fastest");
        let e = refused(&text);
        let mut at = 0;
        for want in [
            "t.toml:2:11: workers: expected an integer",
            "t.toml:10:13: upstream[0].algorithm: unknown algorithm \"fastest\"",
            "t.toml:11:19: upstream[0].connect_timeout: expected a duration",
            "t.toml:15:12: upstream[0].backend[0].weight: expected an integer",
            "t.toml:19:12: upstream[0].backend[1].backup: expected true or false",
            "5 problems in t.toml",
        ] {
            let found = e[at..].find(want);
            assert!(found.is_some(), "{want:?} not in order in:\n{e}");
            at += found.unwrap_or(0);
        }
    }

    #[test]
    fn missing_sections_and_keys() {
        let e = refused("workers = 1\n");
        assert!(e.contains("t.toml: listener: no [[listener]]"), "{e}");
        assert!(e.contains("t.toml: upstream: no [[upstream]]"), "{e}");
        let e = refused("listener = []\nupstream = []\n");
        assert!(e.contains("2 problems"), "{e}");
        let e = refused(&GOOD.replace("name = \"web\"\n", ""));
        assert!(
            e.starts_with("t.toml:8:1: upstream[0].name: missing: every [[upstream]] needs one, like name = \"web\""),
            "{e}"
        );
        let e = refused(&GOOD.replace("  addr = \"127.0.0.1:9002\"\n", ""));
        assert!(
            e.contains("t.toml:17:3: upstream[0].backend[1].addr: missing: every [[upstream.backend]] needs one"),
            "{e}"
        );
        let e = refused(&GOOD.replace("[[listener]]", "[listener]"));
        assert!(
            e.contains("listener: write [[listener]] with two brackets"),
            "{e}"
        );
    }

    /// Nothing reachable from the file may panic: every key of every section, set to values
    /// of every form and at every edge, under the algorithms that use the options.
    #[test]
    fn no_value_makes_check_panic() {
        const VALUES: &[&str] = &[
            "\"\"",
            "\"0s\"",
            "\"1y\"",
            "\"2y\"",
            "\"abc\"",
            "\"unix:/x\"",
            "\"10.0.0.0/8\"",
            "0",
            "-1",
            "1",
            "3",
            "65537",
            "9223372036854775807",
            "-9223372036854775808",
            "0x7fffffffffffffff",
            "1.5",
            "nan",
            "-inf",
            "true",
            "1979-05-27",
            "[]",
            "[1, \"a\", []]",
            "{}",
            "{ addr = \"127.0.0.1:1\" }",
        ];
        // The three sections of a minimal file; a key is set by replacing its line in its
        // section, or by adding one.
        const PARTS: [&str; 3] = [
            "[[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\n",
            "[[upstream]]\nname = \"web\"\nalgorithm = \"ALGORITHM\"\n",
            "[[upstream.backend]]\naddr = \"127.0.0.1:1\"\n",
        ];
        let set = |part: &str, key: &str, line: &str| {
            let mut lines: Vec<&str> = part
                .lines()
                .filter(|l| !l.starts_with(&format!("{key} = ")))
                .collect();
            lines.push(line);
            lines.join("\n") + "\n"
        };
        let sections: [(Option<usize>, &[&str]); 4] = [
            (None, super::file::SECTION.keys),
            (Some(0), super::listener::SECTION.keys),
            (Some(1), super::upstream::SECTION.keys),
            (Some(2), super::backend::SECTION.keys),
        ];
        let algorithms = [
            "weighted_round_robin",
            "hash",
            "new_hash",
            "maglev",
            "bounded_load",
            "latency",
        ];
        let mut passed = 0;
        for algorithm in algorithms {
            for (part, keys) in &sections {
                for key in *keys {
                    for value in VALUES {
                        let line = format!("{key} = {value}");
                        let mut parts = PARTS.map(str::to_owned);
                        let mut text = String::new();
                        match part {
                            None => text = format!("{line}\n"),
                            Some(i) => parts[*i] = set(PARTS[*i], key, &line),
                        }
                        text.push_str(&parts.join("\n").replace("ALGORITHM", algorithm));
                        // Ok or Err, never a panic.
                        if super::parse(std::path::Path::new("t.toml"), &text).is_ok() {
                            passed += 1;
                        }
                    }
                }
            }
        }
        // The edges within bounds pass: the file around them is valid.
        assert!(passed > 100, "{passed}");
    }

    #[test]
    fn example_file_is_valid() {
        let text = include_str!("../../../../examples/fulcrum.toml");
        ok(text);
    }
}
