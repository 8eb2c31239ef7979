//! The configuration file: TOML, read strictly (`deny_unknown_fields`), checked as a whole, and
//! turned into the proxy's settings.
//!
//! Every problem is reported as `file:line:column: key: what is wrong`, with the offending
//! line shown and what would be accepted, and all problems are reported at once. See
//! `docs/configuration.md` for every key.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{SocketAddr, ToSocketAddrs};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use balance::{Affinity, Algorithm};
use proxy::{BackendSettings, HashKey, ListenerSettings, ProxySettings, UpstreamSettings};
use serde::{Deserialize, Deserializer};
use toml::Spanned;

/// A duration written as in nginx or systemd: "250ms", "10s", "1m 30s".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Dur, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map(Dur).map_err(|e| {
            serde::de::Error::custom(format!(
                "invalid duration \"{text}\" ({e}); write a number and a unit, like \"250ms\", \"10s\" or \"1m\""
            ))
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    /// Data-plane threads; default: one per core (nginx `worker_processes auto`).
    pub workers: Option<Spanned<usize>>,
    /// One line per request at target `fulcrum::access` (default true).
    #[serde(default = "yes")]
    pub access_log: bool,
    /// How long shutdown waits for requests in flight (default 10s).
    pub shutdown_timeout: Option<Dur>,
    #[serde(default, rename = "listener")]
    pub listeners: Vec<Listener>,
    #[serde(default, rename = "upstream")]
    pub upstreams: Vec<Upstream>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listener {
    pub listen: Spanned<String>,
    pub upstream: Spanned<String>,
    pub protocol: Option<Spanned<String>>,
    pub max_connections: Option<Spanned<usize>>,
    pub client_header_timeout: Option<Dur>,
    pub client_body_timeout: Option<Dur>,
    pub send_timeout: Option<Dur>,
    pub max_header_bytes: Option<Spanned<usize>>,
    pub max_headers: Option<Spanned<usize>>,
    pub max_body_bytes: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    pub name: Spanned<String>,
    pub algorithm: Option<Spanned<String>>,
    pub hash_key: Option<Spanned<String>>,
    pub max_fails: Option<u32>,
    pub fail_timeout: Option<Dur>,
    pub retries: Option<Spanned<u32>>,
    #[serde(default)]
    pub retry_non_idempotent: bool,
    pub connect_timeout: Option<Dur>,
    pub read_timeout: Option<Dur>,
    pub keepalive: Option<usize>,
    pub keepalive_timeout: Option<Dur>,
    #[serde(default)]
    pub seed: u64,
    /// `hash`: nginx's ketama ring.
    pub consistent: Option<Spanned<bool>>,
    /// `new_hash`: `3` or `"all"`.
    pub octets: Option<Spanned<OctetsValue>>,
    /// `maglev`: the table size, a prime.
    pub table_size: Option<Spanned<i64>>,
    /// `bounded_load`: the balance factor c > 1.
    pub balance_factor: Option<Spanned<f64>>,
    /// `latency`: completions per backend in the window.
    pub window: Option<Spanned<i64>>,
    /// `latency`: weight of the newest latency in the average.
    pub smoothing: Option<Spanned<f64>>,
    /// `latency`: the failure penalty.
    pub penalty: Option<Spanned<Dur>>,
    /// Slow start for every backend of the upstream.
    pub slow_start: Option<Spanned<Dur>>,
    #[serde(default, rename = "backend")]
    pub backends: Vec<Backend>,
}

/// `octets = 3` or `octets = "all"`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum OctetsValue {
    Count(i64),
    Word(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backend {
    pub addr: Spanned<String>,
    pub weight: Option<Spanned<i64>>,
    #[serde(default)]
    pub backup: bool,
    #[serde(default)]
    pub down: bool,
    pub max_fails: Option<u32>,
    pub fail_timeout: Option<Dur>,
    pub slow_start: Option<Spanned<Dur>>,
}

/// A configuration ready to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub proxy: ProxySettings,
    /// Things that are allowed but probably not meant.
    pub warnings: Vec<String>,
}

/// Everything wrong with a configuration file, ready to print.
#[derive(Debug)]
pub struct ConfigError {
    pub path: PathBuf,
    pub problems: Vec<String>,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            f.write_str(p)?;
        }
        if self.problems.len() > 1 {
            write!(
                f,
                "\n{} problems in {}",
                self.problems.len(),
                self.path.display()
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Where a problem is: the file, its text, and a byte span.
struct Source<'a> {
    path: &'a Path,
    text: &'a str,
    problems: Vec<String>,
}

impl Source<'_> {
    /// `file:line:col: key: message`, then the line with the span underlined.
    fn report(&mut self, span: Option<Range<usize>>, key: &str, message: &str) {
        let mut out = String::new();
        let Some(span) = span else {
            let _ = write!(out, "{}: {key}: {message}", self.path.display());
            self.problems.push(out);
            return;
        };
        let start = span.start.min(self.text.len());
        let line_start = self.text[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = self.text[start..]
            .find('\n')
            .map_or(self.text.len(), |i| start + i);
        let line_no = self.text[..start].matches('\n').count() + 1;
        let col = self.text[line_start..start].chars().count() + 1;
        let width = self.text[start..span.end.clamp(start, line_end)]
            .chars()
            .count()
            .max(1);
        let line = &self.text[line_start..line_end];
        let gutter = " ".repeat(line_no.to_string().len());
        let key = if key.is_empty() {
            String::new()
        } else {
            format!("{key}: ")
        };
        let _ = write!(
            out,
            "{}:{line_no}:{col}: {key}{message}\n{gutter} |\n{line_no} | {line}\n{gutter} | {}{}",
            self.path.display(),
            " ".repeat(col - 1),
            "^".repeat(width),
        );
        self.problems.push(out);
    }

    fn line_of(&self, span: &Range<usize>) -> usize {
        self.text[..span.start.min(self.text.len())]
            .matches('\n')
            .count()
            + 1
    }
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
    let mut src = Source {
        path,
        text,
        problems: Vec::new(),
    };
    let file: File = match toml::Deserializer::parse(text)
        .map_err(|e| (String::new(), e))
        .and_then(|de| {
            serde_path_to_error::deserialize(de).map_err(|e| {
                let key = e.path().to_string();
                (if key == "." { String::new() } else { key }, e.into_inner())
            })
        }) {
        Ok(file) => file,
        Err((key, e)) => {
            let message = e.message().replace('\n', " ");
            src.report(e.span(), &key, message.trim());
            return Err(ConfigError {
                path: path.to_owned(),
                problems: src.problems,
            });
        }
    };
    let config = check(&mut src, file);
    if src.problems.is_empty() {
        Ok(config)
    } else {
        Err(ConfigError {
            path: path.to_owned(),
            problems: src.problems,
        })
    }
}

fn check(src: &mut Source<'_>, file: File) -> Config {
    let mut warnings = Vec::new();
    let workers = match &file.workers {
        Some(w) if *w.get_ref() == 0 => {
            src.report(
                Some(w.span()),
                "workers",
                "must be at least 1 (or leave it out: one per core)",
            );
            1
        }
        Some(w) => *w.get_ref(),
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };

    if file.listeners.is_empty() {
        src.report(
            None,
            "listener",
            "no [[listener]]: add one, e.g. listen = \"127.0.0.1:8080\" and upstream = \"web\"",
        );
    }
    if file.upstreams.is_empty() {
        src.report(
            None,
            "upstream",
            "no [[upstream]]: add one with at least one [[upstream.backend]]",
        );
    }

    let mut upstream_lines: HashMap<&str, usize> = HashMap::new();
    let mut upstreams = Vec::new();
    for (ui, u) in file.upstreams.iter().enumerate() {
        let key = |k: &str| format!("upstream[{ui}].{k}");
        let name = u.name.get_ref().as_str();
        if name.is_empty() {
            src.report(Some(u.name.span()), &key("name"), "must not be empty");
        }
        if let Some(first) = upstream_lines.insert(name, src.line_of(&u.name.span())) {
            src.report(
                Some(u.name.span()),
                &key("name"),
                &format!(
                    "upstream \"{name}\" is already defined at line {first}: names must be unique"
                ),
            );
        }
        let algorithm = match &u.algorithm {
            None => Algorithm::WeightedRoundRobin,
            Some(a) => match a.get_ref().parse::<Algorithm>() {
                Ok(alg) => alg,
                Err(e) => {
                    src.report(Some(a.span()), &key("algorithm"), &e.to_string());
                    Algorithm::WeightedRoundRobin
                }
            },
        };
        let mut hash_key = HashKey::ClientIp;
        if let Some(hk) = &u.hash_key {
            match (algorithm.affinity(), hk.get_ref().parse::<HashKey>()) {
                (_, Err(why)) => src.report(Some(hk.span()), &key("hash_key"), &why),
                (None, Ok(_)) => src.report(
                    Some(hk.span()),
                    &key("hash_key"),
                    &format!("algorithm \"{algorithm}\" does not hash a key; remove hash_key or choose a hash algorithm (hash, maglev, bounded_load, ip_hash, new_hash)"),
                ),
                (Some(Affinity::AddressOctets), Ok(k)) if k != HashKey::ClientIp => src.report(
                    Some(hk.span()),
                    &key("hash_key"),
                    &format!("{algorithm} always hashes the client address: the only value is \"client_ip\" (to hash {k}, use algorithm = \"hash\")"),
                ),
                (Some(_), Ok(k)) => hash_key = k,
            }
        }
        let options = algorithm_options(src, u, ui, algorithm);
        if let Some(r) = &u.retries
            && *r.get_ref() > 100
        {
            src.report(Some(r.span()), &key("retries"), "at most 100");
        }
        if u.backends.is_empty() {
            src.report(
                Some(u.name.span()),
                &key("backend"),
                &format!("upstream \"{name}\" has no backends: add [[upstream.backend]] with addr = \"host:port\""),
            );
        } else if u.backends.iter().all(|b| b.backup) {
            src.report(
                Some(u.name.span()),
                &key("backend"),
                &format!(
                    "every backend of upstream \"{name}\" is a backup: at least one must not be"
                ),
            );
        }

        let mut seen: HashMap<SocketAddr, usize> = HashMap::new();
        let mut backends = Vec::new();
        for (bi, b) in u.backends.iter().enumerate() {
            let bkey = |k: &str| format!("upstream[{ui}].backend[{bi}].{k}");
            let addr = match resolve(b.addr.get_ref()) {
                Ok(addr) => addr,
                Err(why) => {
                    src.report(Some(b.addr.span()), &bkey("addr"), &why);
                    continue;
                }
            };
            if let Some(first) = seen.insert(addr, src.line_of(&b.addr.span())) {
                src.report(
                    Some(b.addr.span()),
                    &bkey("addr"),
                    &format!("backend {addr} is already in upstream \"{name}\" (line {first}): list each backend once and use weight for a larger share"),
                );
            }
            let weight = match &b.weight {
                None => 1,
                Some(w) if !(1..=1_000_000).contains(w.get_ref()) => {
                    src.report(
                        Some(w.span()),
                        &bkey("weight"),
                        "must be between 1 and 1000000 (to take a backend out of rotation, use down = true)",
                    );
                    1
                }
                Some(w) => *w.get_ref() as u32,
            };
            backends.push(BackendSettings {
                addr,
                name: b.addr.get_ref().clone(),
                weight,
                backup: b.backup,
                down: b.down,
                max_fails: b
                    .max_fails
                    .or(u.max_fails)
                    .unwrap_or(BackendSettings::DEFAULT_MAX_FAILS),
                fail_timeout: b
                    .fail_timeout
                    .or(u.fail_timeout)
                    .map_or(BackendSettings::DEFAULT_FAIL_TIMEOUT, |d| d.0),
                slow_start: b.slow_start.as_ref().and_then(|d| {
                    slow_start_allowed(src, d.span(), &bkey("slow_start"), algorithm)
                        .then_some(d.get_ref().0)
                }),
            });
        }
        if algorithm == Algorithm::RoundRobin && backends.iter().any(|b| b.weight != 1) {
            warnings.push(format!(
                "{}:{}: upstream \"{name}\": round_robin ignores weights; use weighted_round_robin to honour them",
                src.path.display(),
                src.line_of(&u.name.span()),
            ));
        }
        upstreams.push(UpstreamSettings {
            name: name.to_owned(),
            algorithm,
            hash_key,
            options,
            backends,
            connect_timeout: u
                .connect_timeout
                .map_or(UpstreamSettings::DEFAULT_CONNECT_TIMEOUT, |d| d.0),
            read_timeout: u
                .read_timeout
                .map_or(UpstreamSettings::DEFAULT_READ_TIMEOUT, |d| d.0),
            retries: u.retries.as_ref().map(|r| *r.get_ref()),
            retry_non_idempotent: u.retry_non_idempotent,
            keepalive: u.keepalive.unwrap_or(UpstreamSettings::DEFAULT_KEEPALIVE),
            keepalive_timeout: u
                .keepalive_timeout
                .map_or(UpstreamSettings::DEFAULT_KEEPALIVE_TIMEOUT, |d| d.0),
            seed: u.seed,
        });
    }

    let mut listen_lines: HashMap<SocketAddr, usize> = HashMap::new();
    let mut listeners = Vec::new();
    for (li, l) in file.listeners.iter().enumerate() {
        let key = |k: &str| format!("listener[{li}].{k}");
        if let Some(p) = &l.protocol
            && p.get_ref() != "http"
        {
            src.report(
                Some(p.span()),
                &key("protocol"),
                &format!(
                    "protocol \"{}\" is not supported yet; the only value is \"http\"",
                    p.get_ref()
                ),
            );
        }
        let listen = match l.listen.get_ref().parse::<SocketAddr>() {
            Ok(addr) => addr,
            Err(_) => {
                src.report(
                    Some(l.listen.span()),
                    &key("listen"),
                    &format!("\"{}\" is not an IP address and port, like \"127.0.0.1:8080\" or \"[::1]:8080\"", l.listen.get_ref()),
                );
                continue;
            }
        };
        if listen.port() != 0
            && let Some(first) = listen_lines.insert(listen, src.line_of(&l.listen.span()))
        {
            src.report(
                Some(l.listen.span()),
                &key("listen"),
                &format!("{listen} is already used by the listener at line {first}"),
            );
        }
        let upstream = l.upstream.get_ref();
        if !upstream_lines.contains_key(upstream.as_str()) {
            let mut known: Vec<&str> = upstream_lines.keys().copied().collect();
            known.sort_unstable();
            src.report(
                Some(l.upstream.span()),
                &key("upstream"),
                &format!(
                    "no upstream is named \"{upstream}\"; defined: {}",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            );
        }
        let mut settings = ListenerSettings::new(listen, upstream.clone());
        let mut at_least =
            |n: &Option<Spanned<usize>>, min: usize, name: &str, field: &mut usize| {
                if let Some(n) = n {
                    if *n.get_ref() < min {
                        src.report(
                            Some(n.span()),
                            &key(name),
                            &format!("must be at least {min}"),
                        );
                    }
                    *field = *n.get_ref();
                }
            };
        at_least(
            &l.max_connections,
            1,
            "max_connections",
            &mut settings.max_connections,
        );
        at_least(
            &l.max_header_bytes,
            1024,
            "max_header_bytes",
            &mut settings.max_header_bytes,
        );
        at_least(&l.max_headers, 1, "max_headers", &mut settings.max_headers);
        if let Some(n) = &l.max_headers
            && *n.get_ref() > proxy::MAX_HEADERS_LIMIT
        {
            src.report(
                Some(n.span()),
                &key("max_headers"),
                &format!("must be at most {}", proxy::MAX_HEADERS_LIMIT),
            );
        }
        if let Some(d) = l.client_header_timeout {
            settings.client_header_timeout = d.0;
        }
        if let Some(d) = l.client_body_timeout {
            settings.client_body_timeout = d.0;
        }
        if let Some(d) = l.send_timeout {
            settings.send_timeout = d.0;
        }
        if let Some(n) = l.max_body_bytes {
            settings.max_body_bytes = n;
        }
        listeners.push(settings);
    }

    Config {
        proxy: ProxySettings {
            workers,
            listeners,
            upstreams,
            access_log: file.access_log,
            shutdown_timeout: file
                .shutdown_timeout
                .map_or(Duration::from_secs(10), |d| d.0),
        },
        warnings,
    }
}

/// A backend address: an IP and port, or a host name and port resolved now (nginx resolves
/// `server` names at start-up too).
/// Which algorithms use an option.
fn option_users(option: &str) -> Vec<Algorithm> {
    let only = |a: Algorithm| vec![a];
    match option {
        "consistent" => only(Algorithm::Hash),
        "octets" => only(Algorithm::NewHash),
        "table_size" => only(Algorithm::Maglev),
        "balance_factor" => only(Algorithm::BoundedLoad),
        "window" | "smoothing" | "penalty" => only(Algorithm::Latency),
        "slow_start" => Algorithm::ALL
            .iter()
            .copied()
            .filter(|a| a.supports_slow_start())
            .collect(),
        _ => unreachable!("an option this function lists"),
    }
}

/// Whether `option` is one `algorithm` uses; reports it otherwise.
fn option_allowed(
    src: &mut Source<'_>,
    span: Range<usize>,
    key: &str,
    option: &str,
    algorithm: Algorithm,
) -> bool {
    let users = option_users(option);
    if users.contains(&algorithm) {
        return true;
    }
    let names: Vec<&str> = users.iter().map(|a| a.name()).collect();
    src.report(
        Some(span),
        key,
        &format!(
            "{option} is an option of {}; algorithm \"{algorithm}\" does not use it: remove it or change the algorithm",
            names.join(", ")
        ),
    );
    false
}

fn slow_start_allowed(
    src: &mut Source<'_>,
    span: Range<usize>,
    key: &str,
    algorithm: Algorithm,
) -> bool {
    option_allowed(src, span, key, "slow_start", algorithm)
}

/// The upstream's algorithm options, each checked against the algorithm and its range.
fn algorithm_options(
    src: &mut Source<'_>,
    u: &Upstream,
    ui: usize,
    algorithm: Algorithm,
) -> balance::Options {
    let key = |k: &str| format!("upstream[{ui}].{k}");
    let mut options = balance::Options::default();
    if let Some(v) = &u.consistent
        && option_allowed(src, v.span(), &key("consistent"), "consistent", algorithm)
    {
        options.consistent = *v.get_ref();
    }
    if let Some(v) = &u.octets
        && option_allowed(src, v.span(), &key("octets"), "octets", algorithm)
    {
        match v.get_ref() {
            OctetsValue::Count(3) => options.octets = balance::Octets::Three,
            OctetsValue::Word(w) if w == "all" => options.octets = balance::Octets::All,
            _ => src.report(
                Some(v.span()),
                &key("octets"),
                "write octets = 3 (the first three octets of an IPv4 address, as the paper) or octets = \"all\"",
            ),
        }
    }
    if let Some(v) = &u.table_size
        && option_allowed(src, v.span(), &key("table_size"), "table_size", algorithm)
    {
        let size = *v.get_ref();
        let backends = u.backends.len() as i64;
        if !(3..=16_777_213).contains(&size) || !is_prime(size as u64) {
            src.report(
                Some(v.span()),
                &key("table_size"),
                "must be a prime between 3 and 16777213, like 65537 (the default) or 655373",
            );
        } else if size < 10 * backends {
            src.report(
                Some(v.span()),
                &key("table_size"),
                &format!("{size} entries for {backends} backends: Maglev needs a table well above the number of backends (at least 10 times, 100 times for even shares)"),
            );
        } else {
            options.table_size = size as u32;
        }
    }
    if let Some(v) = &u.balance_factor
        && option_allowed(
            src,
            v.span(),
            &key("balance_factor"),
            "balance_factor",
            algorithm,
        )
    {
        let c = *v.get_ref();
        if !(c > 1.0 && c <= 100.0) {
            src.report(
                Some(v.span()),
                &key("balance_factor"),
                "must be above 1 and at most 100: a backend may take this many times its fair share (1.25 is the usual choice)",
            );
        } else {
            options.balance_factor = c;
        }
    }
    if let Some(v) = &u.window
        && option_allowed(src, v.span(), &key("window"), "window", algorithm)
    {
        match u32::try_from(*v.get_ref()) {
            Ok(w @ 1..=10_000) => options.window = w,
            _ => src.report(
                Some(v.span()),
                &key("window"),
                "must be between 1 and 10000 completions",
            ),
        }
    }
    if let Some(v) = &u.smoothing
        && option_allowed(src, v.span(), &key("smoothing"), "smoothing", algorithm)
    {
        let a = *v.get_ref();
        if a > 0.0 && a <= 1.0 {
            options.smoothing = a;
        } else {
            src.report(
                Some(v.span()),
                &key("smoothing"),
                "must be above 0 and at most 1 (the weight of the newest latency)",
            );
        }
    }
    if let Some(v) = &u.penalty
        && option_allowed(src, v.span(), &key("penalty"), "penalty", algorithm)
    {
        options.penalty = v.get_ref().0.into();
    }
    if let Some(v) = &u.slow_start
        && slow_start_allowed(src, v.span(), &key("slow_start"), algorithm)
    {
        options.slow_start = Some(v.get_ref().0.into());
    }
    options
}

fn is_prime(n: u64) -> bool {
    n >= 2 && (2..).take_while(|d| d * d <= n).all(|d| n % d != 0)
}

fn resolve(addr: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = addr.parse::<SocketAddr>() {
        return Ok(a);
    }
    if !addr.contains(':') {
        return Err(format!(
            "\"{addr}\" has no port: write host:port, like \"127.0.0.1:9001\""
        ));
    }
    match addr.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("\"{addr}\" resolves to no address")),
        Err(e) => Err(format!(
            "cannot resolve \"{addr}\": {e}; write host:port, like \"127.0.0.1:9001\""
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> String {
        parse(Path::new("t.toml"), text).unwrap_err().to_string()
    }

    const GOOD: &str = r#"
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

    #[test]
    fn good_config() {
        let c = parse(Path::new("t.toml"), GOOD).unwrap();
        assert_eq!(c.proxy.workers, 2);
        let u = &c.proxy.upstreams[0];
        assert_eq!(u.algorithm, Algorithm::LeastConn);
        assert_eq!(u.connect_timeout, Duration::from_millis(250));
        assert_eq!(u.backends[0].weight, 3);
        assert!(u.backends[1].backup);
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn unknown_algorithm_names_line_key_and_choices() {
        let e = errors(&GOOD.replace("least_conn", "fastest"));
        assert!(
            e.starts_with("t.toml:10:13: upstream[0].algorithm: unknown algorithm \"fastest\""),
            "{e}"
        );
        assert!(
            e.contains(
                "round_robin, weighted_round_robin, random, chained_round_robin, least_conn, \
                 fair, random_two, least_time, p2c_ewma, latency, ip_hash, new_hash, hash, \
                 maglev, bounded_load, dynamic_wrr, dwlc, capacity_weighted"
            ),
            "{e}"
        );
        assert!(e.contains("10 | algorithm = \"fastest\""), "{e}");
    }

    /// GOOD with `algorithm` and extra upstream lines in place of `connect_timeout`.
    fn with_algorithm(algorithm: &str, lines: &str) -> String {
        GOOD.replace("least_conn", algorithm)
            .replace("connect_timeout = \"250ms\"", lines)
    }

    #[test]
    fn algorithm_options_reach_the_upstream() {
        let upstream =
            |text: &str| parse(Path::new("t.toml"), text).unwrap().proxy.upstreams[0].clone();
        let u = upstream(&with_algorithm(
            "hash",
            "consistent = true\nhash_key = \"cookie:sid\"",
        ));
        assert!(u.options.consistent);
        assert_eq!(u.hash_key, HashKey::Cookie("sid".into()));
        let u = upstream(&with_algorithm("new_hash", "octets = \"all\""));
        assert_eq!(u.options.octets, balance::Octets::All);
        let u = upstream(&with_algorithm(
            "maglev",
            "table_size = 251\nhash_key = \"uri\"",
        ));
        assert_eq!(u.options.table_size, 251);
        let u = upstream(&with_algorithm("bounded_load", "balance_factor = 1.5"));
        assert_eq!(u.options.balance_factor, 1.5);
        let u = upstream(&with_algorithm(
            "latency",
            "window = 20\nsmoothing = 0.25\npenalty = \"2s\"",
        ));
        assert_eq!(
            (u.options.window, u.options.smoothing, u.options.penalty),
            (20, 0.25, balance::Nanos(2_000_000_000))
        );
        let text = with_algorithm("least_conn", "slow_start = \"30s\"")
            .replace("weight = 3", "weight = 3\n  slow_start = \"5s\"");
        let u = upstream(&text);
        assert_eq!(u.options.slow_start, Some(balance::Nanos(30_000_000_000)));
        assert_eq!(u.backends[0].slow_start, Some(Duration::from_secs(5)));
        assert_eq!(u.backends[1].slow_start, None);
    }

    #[test]
    fn options_of_another_algorithm_and_bad_values_are_refused() {
        let e = errors(&with_algorithm("least_conn", "consistent = true"));
        assert!(
            e.contains("upstream[0].consistent: consistent is an option of hash; algorithm \"least_conn\" does not use it"),
            "{e}"
        );
        let e = errors(&with_algorithm("ip_hash", "slow_start = \"10s\""));
        assert!(
            e.contains("slow_start is an option of weighted_round_robin, random"),
            "{e}"
        );
        let e = errors(&with_algorithm("maglev", "table_size = 65536"));
        assert!(e.contains("table_size: must be a prime"), "{e}");
        let e = errors(&with_algorithm("maglev", "table_size = 7"));
        assert!(e.contains("7 entries for 2 backends"), "{e}");
        let e = errors(&with_algorithm("new_hash", "octets = 2"));
        assert!(e.contains("write octets = 3"), "{e}");
        let e = errors(&with_algorithm("bounded_load", "balance_factor = 1.0"));
        assert!(e.contains("balance_factor: must be above 1"), "{e}");
        let e = errors(&with_algorithm("latency", "smoothing = 0"));
        assert!(e.contains("smoothing: must be above 0"), "{e}");
        let e = errors(&with_algorithm("ip_hash", "hash_key = \"uri\""));
        assert!(
            e.contains("ip_hash always hashes the client address"),
            "{e}"
        );
        let e = errors(&with_algorithm("hash", "hash_key = \"header:\""));
        assert!(e.contains("needs a header name"), "{e}");
        let e = errors(&with_algorithm("random", "hash_key = \"uri\""));
        assert!(e.contains("does not hash a key"), "{e}");
    }

    #[test]
    fn unknown_key_names_line_and_key() {
        let e = errors(&GOOD.replace("weight = 3", "wieght = 3"));
        assert!(e.starts_with("t.toml:15:3: upstream[0].backend[0]"), "{e}");
        assert!(e.contains("unknown field `wieght`"), "{e}");
    }

    #[test]
    fn bad_duration_names_line_and_key() {
        let e = errors(&GOOD.replace("250ms", "fast"));
        assert!(
            e.starts_with("t.toml:11:19: upstream[0].connect_timeout: invalid duration \"fast\""),
            "{e}"
        );
    }

    #[test]
    fn weight_zero_and_duplicate_backend_both_reported() {
        let text = GOOD
            .replace("weight = 3", "weight = 0")
            .replace("9002", "9001");
        let e = errors(&text);
        assert!(
            e.contains(
                "t.toml:15:12: upstream[0].backend[0].weight: must be between 1 and 1000000"
            ),
            "{e}"
        );
        assert!(e.contains("t.toml:18:10: upstream[0].backend[1].addr: backend 127.0.0.1:9001 is already in upstream \"web\" (line 14)"), "{e}");
        assert!(e.contains("2 problems"), "{e}");
    }

    #[test]
    fn listener_to_missing_upstream() {
        let e = errors(&GOOD.replace("upstream = \"web\"", "upstream = \"api\""));
        assert!(
            e.contains(
                "t.toml:6:12: listener[0].upstream: no upstream is named \"api\"; defined: web"
            ),
            "{e}"
        );
    }

    #[test]
    fn bad_listen_and_backend_addresses() {
        let e = errors(
            &GOOD
                .replace("127.0.0.1:8080", "localhost")
                .replace("127.0.0.1:9001", "127.0.0.1"),
        );
        assert!(
            e.contains("listener[0].listen: \"localhost\" is not an IP address and port"),
            "{e}"
        );
        assert!(
            e.contains("upstream[0].backend[0].addr: \"127.0.0.1\" has no port"),
            "{e}"
        );
    }

    #[test]
    fn round_robin_with_weights_warns() {
        let c = parse(
            Path::new("t.toml"),
            &GOOD.replace("least_conn", "round_robin"),
        )
        .unwrap();
        assert_eq!(c.warnings.len(), 1);
        assert!(c.warnings[0].contains("round_robin ignores weights"));
    }

    #[test]
    fn toml_syntax_error_has_line() {
        let e = errors("workers = \n[[listener]]\n");
        assert!(e.starts_with("t.toml:1:"), "{e}");
    }
}
