//! `server` and `location` blocks as `[[listener.route]]` tables: the match (location
//! modifiers), the action (`proxy_pass`, `return`) and the header rules in force there, with
//! nginx's inheritance (a level that has any `proxy_set_header`, or any `add_header`, inherits
//! none of that directive from above: ngx_http_proxy_merge_loc_conf,
//! ngx_http_headers_merge_conf).

use std::collections::BTreeMap;

use super::notes::Notes;
use super::parse::Directive;
use super::translate::Ctx;
use super::upstream;
use super::values::{duration_ms, duration_toml, quote, size_bytes, split_url, variables};

/// The directives one level hands down to the levels inside it.
#[derive(Debug, Clone, Default)]
pub struct Level {
    set_headers: Vec<Directive>,
    own_set_headers: bool,
    add_headers: Vec<Directive>,
    own_add_headers: bool,
    /// Upstream keys from `proxy_*_timeout` and `proxy_next_upstream*`: key → (value, where).
    upstream_keys: BTreeMap<&'static str, (String, String)>,
    /// Listener keys from `client_*` and `send_timeout`: key → (value, where).
    listener_keys: BTreeMap<&'static str, (String, String)>,
    default_type: Option<String>,
    /// `allow` / `deny`, in order; a level with any of its own inherits none
    /// (ngx_http_access_merge_loc_conf).
    access: Vec<Directive>,
    own_access: bool,
    /// `limit_req` and `limit_conn`, each inherited the same way (ngx_http_limit_req_merge_conf,
    /// ngx_http_limit_conn_merge_conf), and their `_status`.
    limit_req: Vec<Directive>,
    own_limit_req: bool,
    limit_conn: Vec<Directive>,
    own_limit_conn: bool,
    limit_req_status: Option<String>,
    limit_conn_status: Option<String>,
    /// `limit_req_zone` and `limit_conn_zone` (http level): zone name → (key, rate, size in
    /// bytes, where).
    zones: BTreeMap<String, Zone>,
    /// How many `limit_req` / `limit_conn` directives name each zone, in the whole `http`
    /// block ([`Level::count_zone_uses`]).
    zone_uses: BTreeMap<String, usize>,
}

/// Adds `d` to a directive list a level hands down: the first of a level's own empties what
/// it inherited (nginx's merge of array directives: a level with any inherits none).
fn own_list(list: &mut Vec<Directive>, own: &mut bool, d: &Directive) {
    if !*own {
        list.clear();
        *own = true;
    }
    list.push(d.clone());
}

/// A `limit_req_zone` or `limit_conn_zone`.
#[derive(Debug, Clone)]
struct Zone {
    name: String,
    key: String,
    rate: Option<String>,
    bytes: u64,
    /// The places (`limit_req` / `limit_conn` directives) in the file that name it.
    uses: usize,
}

impl Level {
    /// The level inside this one, before its own directives.
    pub fn child(&self) -> Level {
        Level {
            own_set_headers: false,
            own_add_headers: false,
            own_access: false,
            own_limit_req: false,
            own_limit_conn: false,
            ..self.clone()
        }
    }

    /// Takes `d` if it is one a level hands down; `false` if it is not one of those.
    pub fn take(&mut self, d: &Directive, notes: &mut Notes) -> bool {
        match d.name.as_str() {
            "proxy_set_header" => own_list(&mut self.set_headers, &mut self.own_set_headers, d),
            "add_header" => own_list(&mut self.add_headers, &mut self.own_add_headers, d),
            "default_type" => self.default_type = d.args.first().cloned(),
            "allow" | "deny" => own_list(&mut self.access, &mut self.own_access, d),
            "limit_req" => own_list(&mut self.limit_req, &mut self.own_limit_req, d),
            "limit_conn" => own_list(&mut self.limit_conn, &mut self.own_limit_conn, d),
            "limit_req_status" => self.limit_req_status = d.args.first().cloned(),
            "limit_conn_status" => self.limit_conn_status = d.args.first().cloned(),
            "limit_req_zone" | "limit_conn_zone" => self.zone(d, notes),
            "proxy_connect_timeout" => self.timeout(d, "connect_timeout", notes),
            "proxy_read_timeout" => self.timeout(d, "read_timeout", notes),
            "proxy_send_timeout" => notes.cosmetic(d, "fulcrum's read_timeout also bounds writing the request"),
            "proxy_next_upstream" => self.next_upstream(d, notes),
            "proxy_next_upstream_tries" => match d.args.first().and_then(|n| n.parse::<u64>().ok()) {
                Some(0) => {}
                Some(n) => {
                    self.upstream_keys.insert("retries", ((n - 1).min(100).to_string(), d.at()));
                }
                None => notes.behaviour(d, "not a number"),
            },
            "proxy_next_upstream_timeout" => notes.behaviour(d, "fulcrum has no retry deadline; response_timeout bounds the whole response"),
            "client_max_body_size" => self.body_size(d, notes),
            "client_header_timeout" | "client_body_timeout" | "send_timeout" => {
                let key = match d.name.as_str() {
                    "client_header_timeout" => "client_header_timeout",
                    "client_body_timeout" => "client_body_timeout",
                    _ => "send_timeout",
                };
                match d.args.first().and_then(|a| duration_ms(a)) {
                    Some(ms) if ms > 0 => {
                        self.listener_keys.insert(key, (format!("\"{}\"", duration_toml(ms)), d.at()));
                    }
                    _ => notes.behaviour(d, "not a duration fulcrum accepts (0 or unreadable)"),
                }
            }
            "keepalive_timeout" => notes.cosmetic(
                d,
                "fulcrum closes an idle client connection after client_header_timeout (and an idle HTTP/2 one after http2_idle_timeout)",
            ),
            _ => return false,
        }
        true
    }

    /// `client_max_body_size` as `max_body_bytes` (fulcrum holds bodies in memory: 1 GiB at
    /// most, and no "unlimited").
    fn body_size(&mut self, d: &Directive, notes: &mut Notes) {
        match d.args.first().and_then(|a| size_bytes(a)) {
            Some(0) => notes.behaviour(d, "0 (no limit): fulcrum has a limit, max_body_bytes (1 MiB by default, 1 GiB at most)"),
            Some(n) if n > 1 << 30 => {
                notes.behaviour(d, "above fulcrum's largest max_body_bytes, 1 GiB: that is written");
                self.listener_keys.insert("max_body_bytes", ((1u64 << 30).to_string(), d.at()));
            }
            Some(n) => {
                self.listener_keys.insert("max_body_bytes", (n.to_string(), d.at()));
            }
            None => notes.behaviour(d, "not a size"),
        }
    }

    /// Counts the `limit_req` / `limit_conn` directives naming each zone in `block` and the
    /// blocks inside it (before the zones are read: a shared zone is noted where it is used).
    pub fn count_zone_uses(&mut self, block: &[Directive]) {
        for d in block {
            if d.name == "limit_req" || d.name == "limit_conn" {
                let name = d
                    .args
                    .iter()
                    .find_map(|a| a.strip_prefix("zone="))
                    .or_else(|| d.args.first().map(String::as_str));
                if let Some(name) = name {
                    *self.zone_uses.entry(name.to_owned()).or_default() += 1;
                }
            }
            if let Some(inner) = &d.block {
                self.count_zone_uses(inner);
            }
        }
    }

    /// The access list and limits in force here, as listener keys (a server's: see
    /// [`admission`]).
    pub fn admission_on_listener(&mut self, notes: &mut Notes) {
        for (key, value, at) in admission(self, Which::InForce, notes) {
            self.listener_keys.insert(key, (value, at));
        }
    }

    /// `limit_req_zone KEY zone=NAME:SIZE rate=RATE` or `limit_conn_zone KEY zone=NAME:SIZE`.
    fn zone(&mut self, d: &Directive, notes: &mut Notes) {
        let (mut name, mut bytes, mut rate) = (None, None, None);
        for arg in d.args.iter().skip(1) {
            if let Some(z) = arg.strip_prefix("zone=") {
                let (n, size) = z.split_once(':').unwrap_or((z, ""));
                name = Some(n.to_owned());
                bytes = size_bytes(size);
            } else if let Some(r) = arg.strip_prefix("rate=") {
                rate = Some(r.to_owned());
            } else if arg != "sync" {
                notes.behaviour(d, format!("`{arg}`: not translated"));
            }
        }
        match (d.args.first(), name, bytes) {
            (Some(key), Some(name), Some(bytes)) => {
                let uses = self.zone_uses.get(&name).copied().unwrap_or(0);
                self.zones.insert(
                    name.clone(),
                    Zone {
                        name,
                        key: key.clone(),
                        rate,
                        bytes,
                        uses,
                    },
                );
            }
            _ => notes.behaviour(d, "a zone needs a key and zone=NAME:SIZE"),
        }
    }

    /// The listener keys set at this level or above: key → (value, where).
    pub fn listener_keys(&self) -> &BTreeMap<&'static str, (String, String)> {
        &self.listener_keys
    }

    fn timeout(&mut self, d: &Directive, key: &'static str, notes: &mut Notes) {
        match d.args.first().and_then(|a| duration_ms(a)) {
            Some(ms) if ms > 0 => {
                self.upstream_keys
                    .insert(key, (format!("\"{}\"", duration_toml(ms)), d.at()));
            }
            _ => notes.behaviour(d, "not a duration fulcrum accepts (0 or unreadable)"),
        }
    }

    /// `proxy_next_upstream`: the same conditions, by the same names (`next_upstream`); one
    /// fulcrum does not know (`http_403`, `http_404`, `updating`) is listed as unsupported.
    fn next_upstream(&mut self, d: &Directive, notes: &mut Notes) {
        let mut known = Vec::new();
        for arg in &d.args {
            if balance::NextUpstream::named(arg).is_some() {
                known.push(format!("\"{arg}\""));
            } else {
                notes.behaviour(
                    d,
                    format!("`{arg}`: fulcrum's next_upstream has no such condition; left out"),
                );
            }
        }
        if known.is_empty() {
            return;
        }
        self.upstream_keys
            .insert("next_upstream", (format!("[{}]", known.join(", ")), d.at()));
    }
}

/// A zone's key as fulcrum's `key`: the client's address, or a request header
/// (`$http_x_api_key` → `header:X-Api-Key`); `None` for any other variable.
fn zone_key(key: &str) -> Option<String> {
    match key {
        "$binary_remote_addr" | "$remote_addr" => Some("client_ip".into()),
        _ => {
            let name = key.strip_prefix("$http_")?;
            let header: Vec<String> = name
                .split('_')
                .map(|w| {
                    let mut c = w.chars();
                    c.next()
                        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                        .unwrap_or_default()
                })
                .collect();
            Some(format!("header:{}", header.join("-")))
        }
    }
}

/// The zone `d` (a `limit_req` or `limit_conn`) names with `zone=NAME` or as its first
/// argument, and its key as fulcrum's; `None` (reported) when either is unknown.
fn zone_of<'z>(d: &Directive, level: &'z Level, notes: &mut Notes) -> Option<(&'z Zone, String)> {
    let name = d
        .args
        .iter()
        .find_map(|a| a.strip_prefix("zone="))
        .or_else(|| d.args.first().map(String::as_str))?;
    let Some(zone) = level.zones.get(name) else {
        notes.behaviour(d, format!("no limit zone {name} is defined: left out"));
        return None;
    };
    let Some(key) = zone_key(&zone.key) else {
        notes.behaviour(
            d,
            format!("the zone's key {} is not one fulcrum limits by (the client's address, a request header): left out", zone.key),
        );
        return None;
    };
    Some((zone, key))
}

/// Which of a level's access and limits to write: all those in force (a server's, written on
/// its listener), or only those the level has of its own (a location's, on its route).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    InForce,
    Own,
}

/// `allow`/`deny` as `access`, `limit_req` and `limit_conn` (with their zones and statuses):
/// (key, TOML value, where) for each. A server's are written on its listener, so every route
/// shares one state as every location inheriting them shares the zone in nginx; a location's
/// own replace them on its route, as in nginx.
pub fn admission(
    level: &Level,
    which: Which,
    notes: &mut Notes,
) -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    let own = |flag: bool| which == Which::InForce || flag;
    if own(level.own_access) {
        let rules: Vec<String> = level
            .access
            .iter()
            .filter_map(|d| match d.args.as_slice() {
                [a] if a.starts_with("unix:") => {
                    notes.behaviour(d, "unix-socket clients: fulcrum listens on TCP only");
                    None
                }
                [a] => Some(quote(&format!("{} {a}", d.name))),
                _ => {
                    notes.behaviour(d, "allow and deny take one address, network or all");
                    None
                }
            })
            .collect();
        if let (false, Some(first)) = (rules.is_empty(), level.access.first()) {
            out.push(("access", format!("[{}]", rules.join(", ")), first.at()));
        }
    }
    if own(level.own_limit_req) {
        for extra in level.limit_req.iter().skip(1) {
            notes.behaviour(
                extra,
                "fulcrum takes one limit_req a place: the first is written",
            );
        }
        if let Some(d) = level.limit_req.first()
            && let Some(value) = limit_req(d, level, which, notes)
        {
            out.push(("limit_req", value, d.at()));
        }
    }
    if own(level.own_limit_conn) {
        for extra in level.limit_conn.iter().skip(1) {
            notes.behaviour(
                extra,
                "fulcrum takes one limit_conn a place: the first is written",
            );
        }
        if let Some(d) = level.limit_conn.first()
            && let Some((zone, key)) = zone_of(d, level, notes)
        {
            match d.args.get(1).and_then(|n| n.parse::<u32>().ok()) {
                Some(max) => {
                    shared_zone_note(d, zone, which, notes);
                    let status = level.limit_conn_status.as_deref().unwrap_or("503");
                    out.push((
                        "limit_conn",
                        format!(
                            "{{ key = {}, max = {max}, status = {status} }}",
                            quote(&key)
                        ),
                        d.at(),
                    ));
                }
                None => notes.behaviour(d, "limit_conn takes a zone and a number"),
            }
        }
    }
    out
}

/// A location's own limit names a zone other places name too: nginx counts them all in the
/// zone's one state, fulcrum's route keeps its own.
fn shared_zone_note(d: &Directive, zone: &Zone, which: Which, notes: &mut Notes) {
    if which == Which::Own && zone.uses > 1 {
        notes.behaviour(
            d,
            format!("zone {} is named in {} places: nginx counts them in one state, fulcrum this route apart", zone.name, zone.uses),
        );
    }
}

/// `limit_req zone=NAME [burst=N] [nodelay | delay=N]` as `limit_req`'s TOML value. A zone's
/// size becomes `zone_size` at nginx's 128 bytes a state on 64-bit machines ("one megabyte
/// zone can keep about ... 8 thousand 128-byte states", the module's documentation).
fn limit_req(d: &Directive, level: &Level, which: Which, notes: &mut Notes) -> Option<String> {
    let (zone, key) = zone_of(d, level, notes)?;
    let Some(rate) = &zone.rate else {
        notes.behaviour(d, "its zone has no rate=: left out");
        return None;
    };
    shared_zone_note(d, zone, which, notes);
    let mut fields = vec![
        format!("rate = {}", quote(rate)),
        format!("key = {}", quote(&key)),
    ];
    for arg in d.args.iter().skip(1) {
        if let Some(n) = arg.strip_prefix("burst=") {
            fields.push(format!("burst = {n}"));
        } else if let Some(n) = arg.strip_prefix("delay=") {
            fields.push(format!("delay = {n}"));
        } else if arg == "nodelay" {
            fields.push("nodelay = true".into());
        }
    }
    fields.push(format!(
        "status = {}",
        level.limit_req_status.as_deref().unwrap_or("503")
    ));
    fields.push(format!(
        "zone_size = {}",
        (zone.bytes / 128).clamp(1, 10_000_000)
    ));
    Some(format!("{{ {} }}", fields.join(", ")))
}

/// The nginx directive a listener key comes from.
pub fn nginx_name(key: &str) -> &str {
    if key == "max_body_bytes" {
        "client_max_body_size"
    } else {
        key
    }
}

/// One route being written: its source, its label (` /api/`), and its keys.
#[derive(Debug, Clone)]
pub struct Route {
    pub label: String,
    comment: String,
    lines: Vec<String>,
    pub upgrade: bool,
}

impl Route {
    /// The TOML of this route, named `name`, with `hosts` (none: any host).
    pub fn toml(&self, name: &str, hosts: Option<&[String]>, _n: usize) -> String {
        let mut out = format!(
            "\n[[listener.route]]\n# {}\nname = {}\n",
            self.comment,
            quote(name)
        );
        if let Some(hosts) = hosts {
            let list: Vec<String> = hosts.iter().map(|h| quote(h)).collect();
            out.push_str(&format!("host = [{}]\n", list.join(", ")));
        }
        for l in &self.lines {
            out.push_str(l);
            out.push('\n');
        }
        out
    }
}

/// The routes of server block `d`: a server-level `return` answers everything; otherwise one
/// route per location, or a 404 for every request when there is none (as nginx's
/// static-file handler answers with no files under the default root).
pub fn server_routes(d: &Directive, level: &Level, ctx: &mut Ctx) -> Vec<Route> {
    let inner = d.block.as_deref().unwrap_or_default();
    for i in inner {
        if i.name == "if" || i.name == "rewrite" {
            ctx.notes
                .behaviour(i, "rewrite-module logic is not translated: review by hand");
        }
    }
    if let Some(ret) = inner.iter().find(|i| i.name == "return") {
        for loc in inner.iter().filter(|i| i.name == "location") {
            ctx.notes.cosmetic(
                loc,
                "never reached in nginx: the server's return answers first",
            );
        }
        let mut lines = Vec::new();
        action_return(ret, level, &mut lines, &mut ctx.notes);
        response_headers(level, &mut lines, &mut ctx.notes);
        return vec![Route {
            label: String::new(),
            comment: format!("{} return {}", ret.at(), ret.args.join(" ")),
            lines,
            upgrade: false,
        }];
    }
    let mut routes: Vec<Route> = inner
        .iter()
        .filter(|i| i.name == "location")
        .filter_map(|loc| location_route(loc, level, ctx))
        .collect();
    if routes.is_empty() && !inner.iter().any(|i| i.name == "location") {
        routes.push(Route {
            label: String::new(),
            comment: format!("{} server without a location: nginx answers 404", d.at()),
            lines: vec!["respond = { status = 404 }".into()],
            upgrade: false,
        });
    }
    routes
}

/// A location's modifier and the route's path condition (TOML), or `None` (reported) for a
/// named location or one fulcrum cannot match.
fn matcher<'a>(loc: &'a Directive, notes: &mut Notes) -> Option<(&'a str, String)> {
    let (modifier, path) = match loc.args.as_slice() {
        [path] => ("", path.as_str()),
        [m, path] => (m.as_str(), path.as_str()),
        _ => {
            notes.behaviour(loc, "a location takes a path and at most one modifier");
            return None;
        }
    };
    let matcher = match modifier {
        "" if path.starts_with('@') => {
            notes.cosmetic(
                loc,
                "named locations are reached only by error_page/try_files, not translated",
            );
            return None;
        }
        "" => format!("path = {}", quote(path)),
        "=" => format!("path_exact = {}", quote(path)),
        "^~" => format!("path = {}\nprefix_wins = true", quote(path)),
        "~" => format!("path_regex = {}", quote(path)),
        "~*" => format!("path_regex_nocase = {}", quote(path)),
        _ => {
            notes.behaviour(loc, format!("unknown location modifier {modifier}"));
            return None;
        }
    };
    Some((modifier, matcher))
}

/// `location [= | ^~ | ~ | ~*] PATH { ... }` as a route.
fn location_route(loc: &Directive, server: &Level, ctx: &mut Ctx) -> Option<Route> {
    let (modifier, matcher) = matcher(loc, &mut ctx.notes)?;
    let mut level = server.child();
    let mut action: Option<&Directive> = None;
    for i in loc.block.iter().flatten() {
        match i.name.as_str() {
            "proxy_pass" | "return" if action.is_none() => action = Some(i),
            "location" => ctx
                .notes
                .behaviour(i, "nested locations are not translated"),
            _ if level.take(i, &mut ctx.notes) => {}
            _ => ctx.notes.unhandled(i),
        }
    }
    for (key, (value, at)) in level.listener_keys() {
        if server.listener_keys().get(key).map(|(v, _)| v) != Some(value) {
            ctx.notes.0.push(super::notes::Note {
                at: at.clone(),
                directive: nginx_name(key).to_owned(),
                why: format!("{key} = {value} in a location: fulcrum sets it per listener (the server's value applies)"),
                cosmetic: false,
            });
        }
    }
    let mut lines = vec![matcher];
    let mut upgrade = false;
    match action {
        Some(a) if a.name == "proxy_pass" => {
            upgrade = proxy_pass(a, modifier, &level, &mut lines, ctx);
        }
        Some(a) => {
            action_return(a, &level, &mut lines, &mut ctx.notes);
        }
        None => {
            ctx.notes.behaviour(
                loc,
                format!("no proxy_pass or return: nginx serves files here, fulcrum serves none (this route goes to upstream \"{FILES}\", a placeholder at {FILES_ADDR}: run a file server there)"),
            );
            if !ctx.upstreams.contains_key(FILES) {
                ctx.upstream_order.push(FILES.to_owned());
                ctx.upstreams.insert(
                    FILES.to_owned(),
                    upstream::files_placeholder(FILES, FILES_ADDR, &loc.at()),
                );
            }
            lines.push(format!("upstream = {}", quote(FILES)));
        }
    }
    response_headers(&level, &mut lines, &mut ctx.notes);
    for (key, value, _) in admission(&level, Which::Own, &mut ctx.notes) {
        lines.push(format!("{key} = {value}"));
    }
    Some(Route {
        label: format!(" {}", loc.args.join(" ")),
        comment: format!("{} location {}", loc.at(), loc.args.join(" ")),
        lines,
        upgrade,
    })
}

/// `proxy_pass URL`: the upstream (an `upstream` block's, or one made for the address), the
/// URI part as `strip_prefix`/`rewrite_prefix`, the request headers and the upstream's
/// timeouts. Returns whether the location passes websocket upgrades.
fn proxy_pass(
    d: &Directive,
    modifier: &str,
    level: &Level,
    lines: &mut Vec<String>,
    ctx: &mut Ctx,
) -> bool {
    let url = d.args.first().map(String::as_str).unwrap_or_default();
    let Some(parts) = split_url(url)
        .filter(|u| !url.contains('$') && (u.scheme == "http" || u.scheme == "https"))
    else {
        ctx.notes.behaviour(d, "only proxy_pass http(s)://NAME[/URI] without variables is translated (this route answers 502)");
        lines.push("respond = { status = 502 }".into());
        return false;
    };
    let name = parts.authority.to_owned();
    if !ctx.upstreams.contains_key(&name) {
        let up = upstream::synthesised(&name, parts.scheme == "https", &d.at());
        ctx.upstream_order.push(name.clone());
        ctx.upstreams.insert(name.clone(), up);
    }
    lines.push(format!("upstream = {}", quote(&name)));
    match (parts.path, modifier) {
        (None, _) => {}
        (Some(_), "~" | "~*") => ctx.notes.behaviour(
            d,
            "a URI in proxy_pass inside a regex location: nginx refuses this configuration",
        ),
        (Some(_), "=") => ctx.notes.behaviour(
            d,
            "a URI in proxy_pass of an exact location: fulcrum passes the path unchanged",
        ),
        (Some("/"), _) => lines.push("strip_prefix = true".into()),
        (Some(uri), _) => lines.push(format!("rewrite_prefix = {}", quote(uri))),
    }
    if let Some(up) = ctx.upstreams.get_mut(&name) {
        for (key, (value, at)) in &level.upstream_keys {
            match up.from_locations.iter().find(|(k, _, _)| k == key) {
                Some((_, v, first)) if v != value => ctx.notes.behaviour(
                    d,
                    format!("{key} = {value} ({at}) differs from {v} ({first}) for the same upstream: fulcrum has one value per upstream (the first is kept)"),
                ),
                Some(_) => {}
                None => up.from_locations.push(((*key).to_owned(), value.clone(), at.clone())),
            }
        }
    }
    // nginx sends Host: $proxy_host unless told otherwise (ngx_http_proxy_headers).
    let proxy_host = name.strip_suffix(":80").unwrap_or(&name).to_owned();
    request_headers(level, &proxy_host, lines, &mut ctx.notes)
}

/// The upstream that locations serving files are sent to, and its placeholder backend.
const FILES: &str = "files";
const FILES_ADDR: &str = "127.0.0.1:8000";

/// A header value fulcrum can write, or why not.
fn value(v: &str, proxy_host: &str) -> Result<String, String> {
    let v = v
        .replace("$proxy_host", proxy_host)
        .replace("${proxy_host}", proxy_host);
    match variables(&v)
        .into_iter()
        .find(|x| !proxy::header_rules::VARS.iter().any(|(name, _)| name == x))
    {
        Some(x) => Err(format!("${x} is not a variable fulcrum knows")),
        None => Ok(v),
    }
}

/// The `proxy_set_header`s in force as `request_headers`, `Host` included. Returns whether
/// they are the websocket recipe (`Upgrade $http_upgrade`).
fn request_headers(
    level: &Level,
    proxy_host: &str,
    lines: &mut Vec<String>,
    notes: &mut Notes,
) -> bool {
    let (mut set, mut remove, mut upgrade, mut host) = (Vec::new(), Vec::new(), false, false);
    for d in &level.set_headers {
        let [name, v] = d.args.as_slice() else {
            notes.behaviour(d, "proxy_set_header takes a name and a value");
            continue;
        };
        let lower = name.to_ascii_lowercase();
        host |= lower == "host";
        if lower == "upgrade" && v == "$http_upgrade" {
            upgrade = true;
        } else if lower == "x-forwarded-for" && v == "$proxy_add_x_forwarded_for" {
            notes.cosmetic(
                d,
                "fulcrum writes X-Forwarded-For itself (appending only to trusted_proxies' lists)",
            );
        } else if proxy::header_rules::UNTOUCHABLE.contains(&lower.as_str()) {
            notes.cosmetic(
                d,
                "fulcrum writes this field itself (upgrade = [\"websocket\"] for websockets)",
            );
        } else if v.is_empty() {
            remove.push(quote(name));
        } else {
            match value(&v.replace("$http_host", "$host"), proxy_host) {
                Ok(v) => set.push(format!("{} = {}", quote(name), quote(&v))),
                Err(why) => notes.behaviour(d, format!("{why}: this header is not sent")),
            }
        }
    }
    if !host {
        set.insert(0, format!("\"Host\" = {}", quote(proxy_host)));
    }
    let mut parts = Vec::new();
    if !set.is_empty() {
        parts.push(format!("set = {{ {} }}", set.join(", ")));
    }
    if !remove.is_empty() {
        parts.push(format!("remove = [{}]", remove.join(", ")));
    }
    if !parts.is_empty() {
        lines.push(format!("request_headers = {{ {} }}", parts.join(", ")));
    }
    upgrade
}

/// The `add_header`s in force as `response_headers.add`.
fn response_headers(level: &Level, lines: &mut Vec<String>, notes: &mut Notes) {
    let mut add = Vec::new();
    for d in &level.add_headers {
        let (name, v, always) = match d.args.as_slice() {
            [n, v] => (n, v, false),
            [n, v, a] if a == "always" => (n, v, true),
            _ => {
                notes.behaviour(d, "add_header takes a name, a value and maybe `always`");
                continue;
            }
        };
        match value(v, "") {
            Ok(v) if !v.is_empty() => add.push(format!("{} = {}", quote(name), quote(&v))),
            Ok(_) => {}
            Err(why) => {
                notes.behaviour(d, format!("{why}: this header is not sent"));
                continue;
            }
        }
        if !always {
            notes.cosmetic(
                d,
                "nginx adds it to 2xx/3xx answers only; fulcrum to every answer of the route",
            );
        }
    }
    if !add.is_empty() {
        lines.push(format!(
            "response_headers = {{ add = {{ {} }} }}",
            add.join(", ")
        ));
    }
}

/// `return CODE [TEXT|URL]` or `return URL` as `redirect` or `respond`.
fn action_return(d: &Directive, level: &Level, lines: &mut Vec<String>, notes: &mut Notes) {
    let (code, rest) = match d.args.as_slice() {
        [url] if url.parse::<u16>().is_err() => (302, Some(url.as_str())),
        [code] => (code.parse::<u16>().unwrap_or(0), None),
        [code, rest] => (code.parse::<u16>().unwrap_or(0), Some(rest.as_str())),
        _ => (0, None),
    };
    if code == 0 {
        notes.behaviour(
            d,
            "return takes a code and a text or URL (this route answers 500)",
        );
        lines.push("respond = { status = 500 }".into());
        return;
    }
    if matches!(code, 301 | 302 | 303 | 307 | 308)
        && let Some(url) = rest
    {
        lines.push(redirect(d, code, url, notes));
        return;
    }
    if code == 444 || !(200..=599).contains(&code) {
        notes.behaviour(
            d,
            format!("status {code} (444 closes the connection in nginx): fulcrum answers 403"),
        );
        lines.push("respond = { status = 403 }".into());
        return;
    }
    let body = rest.unwrap_or_default();
    if body.contains('$') {
        notes.behaviour(d, "variables in a returned text are written as they are");
    }
    let ct = level.default_type.as_deref().unwrap_or("text/plain");
    lines.push(format!(
        "respond = {{ status = {code}, body = {}, content_type = {} }}",
        quote(body),
        quote(ct)
    ));
}

/// `return 301 URL` as `redirect = { ... }`: `$scheme`, `$host` and `$request_uri` mean "as
/// the request had it", which is what a part left out of `redirect` means.
fn redirect(d: &Directive, code: u16, url: &str, notes: &mut Notes) -> String {
    let mut parts = vec![format!("status = {code}")];
    let path = match split_url(url) {
        None => Some(url.to_owned()),
        Some(u) => {
            // `https://$host$request_uri`: the authority ends where the path variable starts.
            let (authority, path) = match u.authority.find("$request_uri") {
                Some(i) => (
                    u.authority.get(..i).unwrap_or_default(),
                    Some(format!(
                        "{}{}",
                        u.authority.get(i..).unwrap_or_default(),
                        u.path.unwrap_or_default()
                    )),
                ),
                None => (u.authority, u.path.map(str::to_owned)),
            };
            if u.scheme != "$scheme" {
                parts.push(format!("scheme = {}", quote(u.scheme)));
            }
            let (host, port) = match authority.rsplit_once(':') {
                Some((h, p)) if p.parse::<u16>().is_ok() => (h, Some(p)),
                _ => (authority, None),
            };
            if host != "$host" && host != "$http_host" && host != "$server_name" {
                if host.contains('$') {
                    notes.behaviour(d, "a host with variables: fulcrum keeps the request's host");
                } else {
                    parts.push(format!("host = {}", quote(host)));
                }
            }
            if let Some(p) = port {
                parts.push(format!("port = {p}"));
            }
            path
        }
    };
    match path.as_deref() {
        None | Some("$request_uri") => {}
        Some(p) if p.contains('$') => notes.behaviour(
            d,
            "a path with variables: fulcrum keeps the request's path and query",
        ),
        Some(p) => {
            if !p.contains('?') {
                notes.behaviour(d, "fulcrum keeps the request's query after a redirect path without one; nginx drops it");
            }
            parts.push(format!("path = {}", quote(p)));
        }
    }
    format!("redirect = {{ {} }}", parts.join(", "))
}
