//! nginx `upstream` blocks (ngx_http_upstream_module, its hash, ip_hash, least_conn, random and
//! keepalive modules) as fulcrum `[[upstream]]` tables.

use super::notes::Notes;
use super::parse::Directive;
use super::values::{duration_ms, duration_toml, quote};

/// One `[[upstream]]` being written: its name, the comment naming its source, its keys (TOML
/// lines) and its backends (each a block of TOML lines).
#[derive(Debug, Clone)]
pub struct Upstream {
    pub name: String,
    pub comment: String,
    pub keys: Vec<String>,
    pub backends: Vec<Vec<String>>,
    /// Set by `proxy_*` directives of the locations that use it (`read_timeout = "30s"`),
    /// with where, so a second location asking for another value can be reported.
    pub from_locations: Vec<(String, String, String)>,
}

impl Upstream {
    /// The TOML of this upstream.
    pub fn toml(&self) -> String {
        let mut out = format!(
            "[[upstream]]\n# {}\nname = {}\n",
            self.comment,
            quote(&self.name)
        );
        for k in &self.keys {
            out.push_str(k);
            out.push('\n');
        }
        for (key, value, at) in &self.from_locations {
            out.push_str(&format!("{key} = {value}  # {at}\n"));
        }
        for b in &self.backends {
            out.push_str("\n[[upstream.backend]]\n");
            for line in b {
                out.push_str(line);
                out.push('\n');
            }
        }
        out.push('\n');
        out
    }
}

/// The `upstream NAME { ... }` block `d`.
pub fn from_block(d: &Directive, notes: &mut Notes) -> Option<Upstream> {
    let [name] = d.args.as_slice() else {
        notes.behaviour(d, "an upstream takes one name");
        return None;
    };
    let mut up = Upstream {
        name: name.clone(),
        comment: format!("{} upstream {name}", d.at()),
        keys: Vec::new(),
        backends: Vec::new(),
        from_locations: Vec::new(),
    };
    let mut algorithm = None;
    for inner in d.block.iter().flatten() {
        match inner.name.as_str() {
            "server" => {
                if let Some(b) = backend(inner, notes) {
                    up.backends.push(b);
                }
            }
            "least_conn" | "ip_hash" | "hash" | "random" | "least_time" => {
                algorithm = Some(self::algorithm(inner, &mut up.keys, notes));
            }
            "keepalive" => match inner.args.first().map(|n| n.parse::<u64>()) {
                Some(Ok(n)) => {
                    up.keys.push(format!("keepalive = {n}  # {}", inner.at()));
                    notes.cosmetic(
                        inner,
                        "nginx counts idle connections per upstream and worker, fulcrum per backend and worker",
                    );
                }
                _ => notes.behaviour(inner, "keepalive takes a number"),
            },
            "keepalive_timeout" => timeout_key(inner, "keepalive_timeout", &mut up.keys, notes),
            _ => notes.unhandled(inner),
        }
    }
    let algorithm = algorithm.unwrap_or("weighted_round_robin");
    up.keys
        .insert(0, format!("algorithm = {}", quote(algorithm)));
    if up.backends.is_empty() {
        notes.behaviour(d, "no server fulcrum can use: this upstream has no backend");
    }
    Some(up)
}

/// A duration directive as upstream key `key`.
fn timeout_key(d: &Directive, key: &str, keys: &mut Vec<String>, notes: &mut Notes) {
    match d.args.first().and_then(|a| duration_ms(a)) {
        Some(ms) if ms > 0 => keys.push(format!("{key} = \"{}\"  # {}", duration_toml(ms), d.at())),
        _ => notes.behaviour(d, "not a duration fulcrum accepts (0 or unreadable)"),
    }
}

/// The balancing directive `d` as a fulcrum algorithm name, with its keys.
fn algorithm(d: &Directive, keys: &mut Vec<String>, notes: &mut Notes) -> &'static str {
    let args: Vec<&str> = d.args.iter().map(String::as_str).collect();
    match (d.name.as_str(), args.as_slice()) {
        ("least_conn", _) => "least_conn",
        ("ip_hash", _) => "ip_hash",
        ("least_time", _) => {
            notes.cosmetic(d, "NGINX Plus least_time: fulcrum's least_time measures the time to the response head");
            "least_time"
        }
        ("random", []) => "random",
        ("random", ["two"] | ["two", "least_conn"]) => "random_two",
        ("random", _) => {
            notes.behaviour(
                d,
                "only `random` and `random two [least_conn]` are translated (fulcrum: random_two)",
            );
            "random_two"
        }
        ("hash", [key, rest @ ..]) => {
            match hash_key(key) {
                Some(k) => keys.push(format!("hash_key = {}  # {}", quote(&k), d.at())),
                None => notes.behaviour(
                    d,
                    format!("fulcrum hashes $remote_addr, $request_uri, $http_NAME or $cookie_NAME, not {key} (fulcrum hashes the client address)"),
                ),
            }
            if rest == ["consistent"] {
                keys.push("consistent = true".to_owned());
            }
            "hash"
        }
        _ => {
            notes.behaviour(d, "not understood (fulcrum uses weighted_round_robin)");
            "weighted_round_robin"
        }
    }
}

/// An nginx hash key as fulcrum's `hash_key`.
fn hash_key(key: &str) -> Option<String> {
    match key {
        "$remote_addr" | "$binary_remote_addr" => Some("client_ip".to_owned()),
        "$request_uri" => Some("uri".to_owned()),
        _ => {
            let var = key.strip_prefix('$')?;
            if !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return None;
            }
            if let Some(h) = var.strip_prefix("http_") {
                Some(format!("header:{}", h.replace('_', "-")))
            } else {
                var.strip_prefix("cookie_").map(|c| format!("cookie:{c}"))
            }
        }
    }
}

/// `server ADDR [weight=N] [max_fails=N] [fail_timeout=T] [backup] [down] [max_conns=N]`.
fn backend(d: &Directive, notes: &mut Notes) -> Option<Vec<String>> {
    let Some((addr, params)) = d.args.split_first() else {
        notes.behaviour(d, "server without an address");
        return None;
    };
    if addr.starts_with("unix:") {
        notes.behaviour(
            d,
            "Unix sockets are not supported by fulcrum yet: this backend is left out",
        );
        return None;
    }
    // nginx's default port is 80 (ngx_parse_url with default_port 80).
    let addr = if addr.starts_with('[') && addr.ends_with(']') || !addr.contains(':') {
        format!("{addr}:80")
    } else {
        addr.clone()
    };
    let mut lines = vec![
        format!("# {} server {}", d.at(), d.args.join(" ")),
        format!("addr = {}", quote(&addr)),
    ];
    for p in params {
        match p.split_once('=') {
            Some(("weight" | "max_fails" | "max_conns", n)) if n.parse::<u64>().is_ok() => {
                let key = p.split_once('=').map(|(k, _)| k).unwrap_or_default();
                lines.push(format!("{key} = {n}"));
            }
            Some(("fail_timeout" | "slow_start", t)) => match duration_ms(t) {
                Some(ms) if ms > 0 => {
                    let key = p.split_once('=').map(|(k, _)| k).unwrap_or_default();
                    lines.push(format!("{key} = \"{}\"", duration_toml(ms)));
                }
                _ => notes.behaviour(d, format!("{p}: not a duration fulcrum accepts")),
            },
            None if p == "backup" || p == "down" => lines.push(format!("{p} = true")),
            None if p == "resolve" => {
                notes.cosmetic(d, "resolve: fulcrum resolves names at start and reload")
            }
            _ => notes.behaviour(d, format!("parameter {p} is not translated")),
        }
    }
    Some(lines)
}

/// The upstream a `proxy_pass http://HOST:PORT` without an upstream block stands for: one
/// backend, named after it.
pub fn synthesised(authority: &str, tls: bool, at: &str) -> Upstream {
    let port = if tls { 443 } else { 80 };
    let addr = if authority.contains(':') && !authority.ends_with(']') {
        authority.to_owned()
    } else {
        format!("{authority}:{port}")
    };
    let mut keys = vec!["algorithm = \"weighted_round_robin\"".to_owned()];
    if tls {
        keys.push("tls = true".to_owned());
    }
    Upstream {
        name: authority.to_owned(),
        comment: format!("{at} proxy_pass to {authority} (no upstream block: one backend)"),
        keys,
        backends: vec![vec![format!("addr = {}", quote(&addr))]],
        from_locations: Vec::new(),
    }
}

/// The upstream standing for nginx's static-file serving, which fulcrum does not do: one
/// placeholder backend where a file server is to run.
pub fn files_placeholder(name: &str, addr: &str, at: &str) -> Upstream {
    Upstream {
        name: name.to_owned(),
        comment: format!("{at} serves files in nginx: a placeholder, run a file server at {addr}"),
        keys: vec!["algorithm = \"weighted_round_robin\"".to_owned()],
        backends: vec![vec![format!("addr = {}", quote(addr))]],
        from_locations: Vec::new(),
    }
}
