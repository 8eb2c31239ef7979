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
//! * [`source`]: the main file and the files it `include`s, merged into one document, with
//!   `${NAME}` replaced from the environment.
//! * [`report`]: problems collected and shown with their file and line; [`ConfigError`].
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
mod source;
mod sticky;
mod table;
mod tls;
mod upstream;

use std::path::Path;

use proxy::ProxySettings;

pub use report::ConfigError;
use report::Report;
use source::Sources;

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
    /// The files `include` read, in the order they were merged.
    pub included: Vec<std::path::PathBuf>,
    /// `log_level` and `log_format`: fulcrum's own log.
    pub log: log::Log,
    /// Each upstream's balancing options as written, in whichever file (see
    /// [`balancing::written`]): what the state file's algorithm overrides are compared with.
    pub written: std::collections::BTreeMap<String, serde_json::Map<String, serde_json::Value>>,
}

/// Reads and checks a configuration file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = source::read_main(path).map_err(|e| ConfigError {
        path: path.to_owned(),
        problems: vec![format!("{}: {e}", path.display())],
    })?;
    parse(path, &text)
}

/// Checks configuration text read from `path` (files it includes are read from disk, relative
/// to `path`'s directory; `${NAME}` is read from the environment).
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    parse_with(path, text, &|name| std::env::var(name).ok())
}

/// [`parse`], with environment variables looked up through `env`.
fn parse_with(
    path: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let mut sources = Sources::gather(path, text.to_owned(), env);
    let pending = sources.take_pending();
    let mut report = Report::new(&sources);
    for (span, key, message) in pending {
        report.error(span, &key, message);
    }
    // A syntax error leaves the rest of its file unreadable: the configuration is not checked
    // further (its missing parts would be reported as problems).
    if !sources.readable() {
        return Err(report.into_error());
    }
    let included = sources
        .files
        .iter()
        .skip(1)
        .map(|f| f.path.clone())
        .collect();
    // Each upstream is in one file (one named twice is refused): the union is the whole
    // configuration's.
    let written = sources
        .files
        .iter()
        .flat_map(|f| balancing::written(&f.text))
        .collect();
    let doc = sources.document(&mut report, env);
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
        included,
        log,
        written,
    })
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

    /// Issue 32's twelve kinds of problem in one file: each reported in one run, in the
    /// order of the file, each with its line:col (one of them hid others, named a value the
    /// user never wrote, or had no place).
    const TWELVE: &str = r#"workers = 0

[admin]
listen = "127.0.0.1:18081"

[[listener]]
listen = "127.0.0.1:18080"
upstream = "nosuch"

[[listener]]
listen = "127.0.0.1:18080"
upstream = "web"

[[listener]]
listen = "127.0.0.1:18081"
upstream = "web"

[[upstream]]
name = "web"
algorithm = "least_connections"
table_size = 65537
shutdown_timeout = "5s"

  [upstream.health_check]
  path = "/health"

  [[upstream.backend]]
  addr = "127.0.0.1:9001"
  weight = "x"
  agent = "127.0.0.1"
  agent_check = "127.0.0.1:9102"

  [[upstream.backend]]
  addr = "127.0.0.1:80800"
"#;

    #[test]
    fn twelve_problems_at_once_in_file_order() {
        let e = refused(TWELVE);
        let mut at = 0;
        for want in [
            "t.toml:1:11: workers: must be between 1 and 1024",
            "t.toml:8:12: listener[0].upstream: no upstream is named \"nosuch\"",
            "t.toml:11:10: listener[1].listen: 127.0.0.1:18080 is already used by the listener at line 7",
            "t.toml:15:10: listener[2].listen: 127.0.0.1:18081 is already used by the admin listener at line 4",
            "t.toml:20:13: upstream[0].algorithm: unknown algorithm \"least_connections\"; did you mean \"least_conn\"?",
            "t.toml:21:14: upstream[0].table_size: table_size is an option of maglev; algorithm \"least_connections\" does not use it",
            "t.toml:22:1: upstream[0].shutdown_timeout: `shutdown_timeout` is a top-level key: move it above the first [table] header",
            "t.toml:24:3: upstream[0].health_check: backend 127.0.0.1:9001 has agent_check",
            "t.toml:29:12: upstream[0].backend[0].weight: expected an integer",
            "t.toml:30:11: upstream[0].backend[0].agent: \"127.0.0.1\" has no port",
            "t.toml:31:17: upstream[0].backend[0].agent_check: a backend has one load source",
            "t.toml:34:10: upstream[0].backend[1].addr: \"127.0.0.1:80800\": the port 80800 is above 65535",
            "12 problems in t.toml",
        ] {
            let found = e[at..].find(want);
            assert!(found.is_some(), "{want:?} not in order in:\n{e}");
            at += found.unwrap_or(0);
        }
        assert!(
            !e.contains("weighted_round_robin"),
            "a value never written: {e}"
        );
        assert!(!e.contains("the keys of"), "no list of keys: {e}");
    }

    /// An admin listener after the listeners is blamed at its own line, naming theirs.
    #[test]
    fn an_admin_port_clash_has_a_place() {
        let e = refused(&format!("{GOOD}\n[admin]\nlisten = \"127.0.0.1:8080\"\n"));
        assert!(
            e.starts_with("t.toml:22:10: admin.listen: 127.0.0.1:8080 is already used by the listener at line 5: give the admin listener its own port"),
            "{e}"
        );
    }

    /// A TOML syntax error ends parsing; an unquoted value says to quote it, and the rest of
    /// the file is still checked with the value quoted.
    #[test]
    fn an_unquoted_value_is_to_be_quoted_and_the_rest_is_checked() {
        let text = GOOD
            .replace("\"127.0.0.1:8080\"", "127.0.0.1:8080")
            .replace("weight = 3", "weight = \"3\"");
        let e = refused(&text);
        assert!(
            e.starts_with("t.toml:5:10: listen: a value that is not a number, true or false is written in quotes: write listen = \"127.0.0.1:8080\"\n"),
            "{e}"
        );
        assert!(!e.contains("invalid float"), "{e}");
        assert!(
            e.contains("t.toml:15:12: upstream[0].backend[0].weight: expected an integer"),
            "{e}"
        );
        assert!(e.contains("2 problems in t.toml"), "{e}");
    }

    /// Warnings are listed in the order of the file, like problems.
    #[test]
    fn warnings_come_in_file_order() {
        let c = ok(&GOOD.replace("least_conn", "round_robin").replace(
            "upstream = \"web\"\n",
            "upstream = \"web\"\nidle_timeout = \"5s\"\n",
        ));
        assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
        assert!(
            c.warnings[0].starts_with("t.toml:7: listener[0].idle_timeout"),
            "{:?}",
            c.warnings
        );
        assert!(
            c.warnings[1].starts_with("t.toml:9: upstream \"web\": round_robin ignores weights"),
            "{:?}",
            c.warnings
        );
    }

    /// A directory of files for one test, removed after it.
    struct Files(std::path::PathBuf);

    impl Files {
        fn new(test: &str, files: &[(&str, &str)]) -> Files {
            let dir = std::env::temp_dir().join(format!("fulcrum-{test}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            for (name, text) in files {
                let path = dir.join(name);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, text).unwrap();
            }
            Files(dir)
        }

        fn parse(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<super::Config, String> {
            let main = self.0.join("main.toml");
            let text = std::fs::read_to_string(&main).unwrap();
            super::parse_with(&main, &text, env).map_err(|e| e.to_string())
        }

        fn path(&self, name: &str) -> String {
            self.0.join(name).display().to_string()
        }
    }

    impl Drop for Files {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    const WEB: &str =
        "[[upstream]]\nname = \"web\"\n\n  [[upstream.backend]]\n  addr = \"127.0.0.1:9001\"\n";
    const API: &str = "[[listener]]\nlisten = \"127.0.0.1:8081\"\nupstream = \"api\"\n\n[[upstream]]\nname = \"api\"\n\n  [[upstream.backend]]\n  addr = \"127.0.0.1:9002\"\n";
    const MAIN: &str = "workers = 2\ninclude = [\"conf.d/*.toml\"]\n\n[[listener]]\nlisten = \"127.0.0.1:8080\"\nupstream = \"web\"\n";

    /// `include`: a pattern's files in sorted order, merged after the including file; arrays
    /// of tables gather entries from every file; hidden files and other names do not match.
    #[test]
    fn included_files_are_merged_in_order() {
        let files = Files::new(
            "include-merge",
            &[
                ("main.toml", MAIN),
                ("conf.d/20-api.toml", API),
                ("conf.d/10-web.toml", WEB),
                ("conf.d/.30-hidden.toml", "workers = 3\n"),
                ("conf.d/40-old.toml.bak", "workers = 4\n"),
            ],
        );
        let c = files.parse(&no_env).unwrap();
        assert_eq!(c.proxy.workers, 2);
        let names: Vec<&str> = c.proxy.upstreams.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["web", "api"]);
        assert_eq!(c.proxy.listeners.len(), 2);
        // A pattern that matches nothing is no problem; a file named must exist.
        let files = Files::new(
            "include-none",
            &[("main.toml", &(MAIN.replace("conf.d/", "none.d/") + WEB))],
        );
        files.parse(&no_env).unwrap();
        let files = Files::new(
            "include-missing",
            &[(
                "main.toml",
                &(MAIN.replace("conf.d/*.toml", "web.toml") + WEB),
            )],
        );
        let e = files.parse(&no_env).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "{}:2:12: include: cannot read {}",
                files.path("main.toml"),
                files.path("web.toml")
            )),
            "{e}"
        );
    }

    /// A problem in an included file is shown at its own file:line:col, after the including
    /// file's; a key set in two files is refused naming both places.
    #[test]
    fn problems_in_included_files_name_them() {
        let files = Files::new(
            "include-problems",
            &[
                ("main.toml", &MAIN.replace("workers = 2", "workers = 0")),
                (
                    "conf.d/10-web.toml",
                    &WEB.replace("9001\"", "9001\"\n  weight = \"x\""),
                ),
                ("conf.d/20-api.toml", &format!("workers = 3\n{API}")),
                ("conf.d/30-bad.toml", "[[listener]\n"),
            ],
        );
        let e = files.parse(&no_env).unwrap_err();
        // A syntax error in one file leaves the configuration unchecked, and says where.
        assert!(
            e.starts_with(&format!("{}:1:", files.path("conf.d/30-bad.toml"))),
            "{e}"
        );
        std::fs::remove_file(files.0.join("conf.d/30-bad.toml")).unwrap();
        let e = files.parse(&no_env).unwrap_err();
        let mut at = 0;
        for want in [
            format!(
                "{}:1:11: workers: must be between 1 and 1024",
                files.path("main.toml")
            ),
            format!(
                "{}:6:12: upstream[0].backend[0].weight: expected an integer",
                files.path("conf.d/10-web.toml")
            ),
            format!(
                "{}:1:1: workers: already set at {}:1: a key is set in one file only",
                files.path("conf.d/20-api.toml"),
                files.path("main.toml")
            ),
            format!("3 problems in {}", files.path("main.toml")),
        ] {
            let found = e[at..].find(&want);
            assert!(found.is_some(), "{want:?} not in order in:\n{e}");
            at += found.unwrap_or(0);
        }
    }

    /// A `[[upstream.backend]]` in a file without its `[[upstream]]` is said to belong with it.
    #[test]
    fn a_sub_section_apart_from_its_section_is_refused_as_such() {
        let files = Files::new(
            "include-apart",
            &[
                ("main.toml", &(MAIN.to_owned() + WEB)),
                (
                    "conf.d/more.toml",
                    "[[upstream.backend]]\naddr = \"127.0.0.1:9009\"\n",
                ),
            ],
        );
        let e = files.parse(&no_env).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "{}:1:3: upstream: a table here, while [[upstream]] (at {}:7) is an array of tables: a file holds whole sections, so a [[upstream.…]] goes in the file of its [[upstream]]",
                files.path("conf.d/more.toml"),
                files.path("main.toml")
            )),
            "{e}"
        );
    }

    /// Includes nest; a file that includes itself, through another, is refused.
    #[test]
    fn includes_nest_without_cycles() {
        let files = Files::new(
            "include-nest",
            &[
                ("main.toml", &MAIN.replace("conf.d/*.toml", "a.toml")),
                ("a.toml", &format!("include = [\"b/b.toml\"]\n{WEB}")),
                // Relative to the main file's directory, as nginx's prefix: a.toml, not
                // b/a.toml.
                ("b/b.toml", "include = [\"a.toml\"]\n"),
            ],
        );
        let e = files.parse(&no_env).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "{}:1:12: include: {} is already being read (it includes itself",
                files.path("b/b.toml"),
                files.path("a.toml")
            )),
            "{e}"
        );
        std::fs::write(files.0.join("b/b.toml"), API).unwrap();
        let c = files.parse(&no_env).unwrap();
        assert_eq!(c.proxy.upstreams.len(), 2);
        // Only regular files: a device could be read forever.
        std::fs::write(files.0.join("b/b.toml"), "include = [\"/dev/zero\"]\n").unwrap();
        let e = files.parse(&no_env).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "{}:1:12: include: /dev/zero is not a regular file",
                files.path("b/b.toml")
            )),
            "{e}"
        );
        // Also when a pattern matches a link to one.
        std::fs::write(files.0.join("b/b.toml"), "include = [\"b/*.toml\"]\n").unwrap();
        std::os::unix::fs::symlink("/dev/zero", files.0.join("b/zero.toml")).unwrap();
        let e = files.parse(&no_env).unwrap_err();
        assert!(
            e.contains(&format!(
                "include: {}/zero.toml is not a regular file",
                files.path("b")
            )),
            "{e}"
        );
    }

    /// `${NAME}` in string values, after parsing: a value cannot add TOML; an unset variable
    /// is a problem at its string; `$${` is a literal `${`.
    #[test]
    fn environment_variables_in_string_values() {
        let text = "include = [\"${CONF}/*.toml\"]\n[[listener]]\nlisten = \"${LISTEN}\"\nupstream = \"web\"\n\n[[upstream]]\nname = \"web\"\n  [[upstream.backend]]\n  addr = \"127.0.0.1:9001\"\n";
        let files = Files::new("env", &[("main.toml", text)]);
        let env = |name: &str| match name {
            "LISTEN" => Some("127.0.0.1:8088".to_owned()),
            "CONF" => Some("conf.d".to_owned()),
            _ => None,
        };
        let c = files.parse(&env).unwrap();
        assert_eq!(c.proxy.listeners[0].listen.to_string(), "127.0.0.1:8088");
        let e = files.parse(&no_env).unwrap_err();
        let main = files.path("main.toml");
        assert!(
            e.starts_with(&format!(
                "{main}:1:12: include[0]: the environment variable CONF is not set"
            )),
            "{e}"
        );
        assert!(
            e.contains(&format!(
                "\n{main}:3:10: listener[0].listen: the environment variable LISTEN is not set"
            )),
            "{e}"
        );
        assert!(e.contains("2 problems"), "{e}");
        // A value is a string, whatever it holds.
        let inject = |name: &str| match name {
            "LISTEN" => Some("127.0.0.1:8088\"\nworkers = 3".to_owned()),
            _ => Some("conf.d".to_owned()),
        };
        let e = files.parse(&inject).unwrap_err();
        assert!(
            e.contains("listener[0].listen: \"127.0.0.1:8088\"\nworkers = 3\""),
            "{e}"
        );
        // `$${` is a literal `${`.
        let c = ok(&GOOD
            .replace("name = \"web\"", "name = \"a$${b}\"")
            .replace("upstream = \"web\"", "upstream = \"a$${b}\""));
        assert_eq!(c.proxy.upstreams[0].name, "a${b}");
        // Where nginx's variables are written, `${name}` is nginx's, not the environment's.
        let c = ok(&with_listener(
            "request_headers = { set = { \"X-Client\" = \"${remote_addr}\" } }",
        )
        .replace(
            "workers = 2",
            "workers = 2\naccess_log_format = '${remote_addr} $status'",
        ));
        match c.proxy.access_log.unwrap().format {
            proxy::access_log::Format::Template(t) => {
                assert_eq!(t.source(), "${remote_addr} $status")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn example_file_is_valid() {
        let text = include_str!("../../../../examples/fulcrum.toml");
        ok(text);
    }
}
