//! The translation: nginx's `http` block as fulcrum listeners, routes and upstreams
//! (docs/import.md says what maps to what, and why).

use std::collections::BTreeMap;

use super::location::{self, Level, Route};
use super::notes::{Note, Notes};
use super::parse::Directive;
use super::upstream::{self, Upstream};
use super::values::{listen_addr, quote};

/// A translated configuration: the TOML, and what was left out.
#[derive(Debug)]
pub struct Translation {
    pub toml: String,
    pub notes: Vec<Note>,
}

impl Translation {
    /// Whether something left out changes behaviour (the command then exits 1).
    pub fn changes_behaviour(&self) -> bool {
        self.notes.iter().any(|n| !n.cosmetic)
    }
}

/// Everything gathered while reading: upstreams by name, listeners by address.
#[derive(Debug, Default)]
pub struct Ctx {
    pub notes: Notes,
    pub upstreams: BTreeMap<String, Upstream>,
    pub upstream_order: Vec<String>,
    listeners: Vec<Listener>,
    /// The main file's directory, which relative file names are taken from (nginx takes them
    /// from its prefix, the main file's directory in the usual layouts).
    root: std::path::PathBuf,
}

impl Ctx {
    /// `name` as a path from the main file's directory, so the TOML may be written anywhere.
    fn full_path(&self, name: &str) -> String {
        self.root.join(name).display().to_string()
    }
}

/// One distinct `listen` address and the servers on it, in file order.
#[derive(Debug)]
struct Listener {
    addr: String,
    comment: String,
    servers: Vec<Server>,
    keys: BTreeMap<&'static str, (String, String)>,
    default: Option<usize>,
    ssl: bool,
    http2: bool,
}

/// One `server` block as the routes it gives.
#[derive(Debug, Clone)]
struct Server {
    names: Vec<String>,
    /// Listener keys from this server's level (and the http block's): key → (value, where).
    listener_keys: BTreeMap<&'static str, (String, String)>,
    routes: Vec<Route>,
    certs: Vec<(String, String, String)>,
    upgrade: bool,
}

/// Translates a parsed configuration (includes expanded).
pub fn translate(conf: &[Directive]) -> Translation {
    let mut ctx = Ctx {
        root: conf
            .first()
            .and_then(|d| d.file.parent().map(std::path::Path::to_path_buf))
            .unwrap_or_default(),
        ..Ctx::default()
    };
    let mut saw_http = false;
    for d in conf {
        match d.name.as_str() {
            "http" => {
                saw_http = true;
                http(d, &mut ctx);
            }
            "stream" => ctx.notes.behaviour(
                d,
                "stream (TCP) servers are not translated (write a listener with protocol = \"tcp\")",
            ),
            "mail" => ctx.notes.behaviour(d, "fulcrum has no mail proxy"),
            _ => ctx.notes.unhandled(d),
        }
    }
    if !saw_http {
        ctx.notes.0.push(Note {
            at: "(configuration)".into(),
            directive: "http".into(),
            why: "no http block: nothing to translate".into(),
            cosmetic: false,
        });
    }
    let toml = emit(&ctx);
    // A directive inherited by several locations is reported once.
    let mut seen = std::collections::HashSet::new();
    let mut notes = ctx.notes.0;
    notes.retain(|n| seen.insert((n.at.clone(), n.directive.clone(), n.why.clone())));
    Translation { toml, notes }
}

/// The `http` block: its upstreams first (a `proxy_pass` may name one defined further down),
/// then its servers with the settings they inherit.
fn http(d: &Directive, ctx: &mut Ctx) {
    let inner = d.block.as_deref().unwrap_or_default();
    for u in inner.iter().filter(|d| d.name == "upstream") {
        if let Some(up) = upstream::from_block(u, &mut ctx.notes) {
            ctx.upstream_order.push(up.name.clone());
            ctx.upstreams.insert(up.name.clone(), up);
        }
    }
    let mut level = Level::default();
    level.count_zone_uses(inner);
    for d in inner {
        if d.name != "server" && d.name != "upstream" && !level.take(d, &mut ctx.notes) {
            if d.name == "map" {
                map(d, &mut ctx.notes);
            } else {
                ctx.notes.unhandled(d);
            }
        }
    }
    for s in inner.iter().filter(|d| d.name == "server") {
        server(s, &level, ctx);
    }
}

/// A `map`: used by the usual websocket recipe (`$connection_upgrade`), which fulcrum's
/// `upgrade` replaces; anything else is not translated.
fn map(d: &Directive, notes: &mut Notes) {
    if d.args.get(1).map(String::as_str) == Some("$connection_upgrade") {
        notes.cosmetic(d, "the websocket recipe's map: fulcrum writes Connection itself (upgrade = [\"websocket\"])");
    } else {
        notes.behaviour(
            d,
            "variables from map are not supported: review the places that use it",
        );
    }
}

/// A `server` block: its listens, names, certificates and routes.
fn server(d: &Directive, http_level: &Level, ctx: &mut Ctx) {
    let inner = d.block.as_deref().unwrap_or_default();
    let mut level = http_level.child();
    let mut names = Vec::new();
    let mut listens: Vec<(String, &Directive, bool, bool, bool)> = Vec::new();
    let mut http2 = false;
    let mut certs = (None, None);
    for i in inner {
        match i.name.as_str() {
            "listen" => {
                if let Some(l) = listen(i, &mut ctx.notes) {
                    listens.push((l.0, i, l.1, l.2, l.3));
                }
            }
            "server_name" => names.extend(i.args.iter().cloned()),
            "http2" => http2 = i.args.first().map(String::as_str) == Some("on"),
            "ssl_certificate" => certs.0 = i.args.first().map(|c| (ctx.full_path(c), i.at())),
            "ssl_certificate_key" => certs.1 = i.args.first().map(|k| ctx.full_path(k)),
            "location" | "return" | "if" | "rewrite" => {}
            _ if level.take(i, &mut ctx.notes) => {}
            _ => ctx.notes.unhandled(i),
        }
    }
    if listens.is_empty() {
        // nginx listens on *:80 when a server says nothing (ngx_http_core_merge_srv_conf).
        listens.push(("0.0.0.0:80".into(), d, false, false, false));
    }
    if names.iter().any(|n| n.is_empty()) {
        ctx.notes.cosmetic(
            d,
            "server_name \"\": requests without a Host go to the default server in fulcrum too",
        );
    }
    names.retain(|n| !n.is_empty());
    // The access list and limits in force in the server: the listener's, shared by its routes.
    level.admission_on_listener(&mut ctx.notes);
    let routes = location::server_routes(d, &level, ctx);
    let upgrade = routes.iter().any(|r| r.upgrade);
    let cert_list = match certs {
        (Some((c, at)), Some(k)) => vec![(c, k, at)],
        _ => Vec::new(),
    };
    let srv = Server {
        names,
        listener_keys: level.listener_keys().clone(),
        routes,
        certs: cert_list,
        upgrade,
    };
    for (addr, l, default, ssl, h2) in listens {
        add_to_listener(ctx, addr, l, &srv, default, ssl, h2 || http2);
    }
}

/// `listen ADDR [default_server] [ssl] [http2] ...`: the address and those three flags.
fn listen(d: &Directive, notes: &mut Notes) -> Option<(String, bool, bool, bool)> {
    let Some(addr) = d.args.first().and_then(|a| listen_addr(a)) else {
        notes.behaviour(
            d,
            "a listen address fulcrum cannot take (a Unix socket or a host name): left out",
        );
        return None;
    };
    let (mut default, mut ssl, mut h2) = (false, false, false);
    for p in d.args.iter().skip(1) {
        match p.as_str() {
            "default_server" | "default" => default = true,
            "ssl" => ssl = true,
            "http2" => h2 = true,
            "proxy_protocol" => notes.behaviour(
                d,
                "proxy_protocol: set accept_proxy_protocol and trusted_proxies by hand",
            ),
            "quic" => notes.behaviour(d, "fulcrum has no HTTP/3"),
            _ => notes.cosmetic(
                d,
                format!("listen parameter {p} is socket tuning fulcrum does not offer"),
            ),
        }
    }
    Some((addr, default, ssl, h2))
}

/// Puts server `srv` on the listener for `addr`, made if it is new.
fn add_to_listener(
    ctx: &mut Ctx,
    addr: String,
    l: &Directive,
    srv: &Server,
    default: bool,
    ssl: bool,
    http2: bool,
) {
    let i = match ctx.listeners.iter().position(|x| x.addr == addr) {
        Some(i) => i,
        None => {
            ctx.listeners.push(Listener {
                addr: addr.clone(),
                comment: format!("{} listen {}", l.at(), l.args.join(" ")),
                servers: Vec::new(),
                keys: BTreeMap::new(),
                default: None,
                ssl: false,
                http2: false,
            });
            ctx.listeners.len() - 1
        }
    };
    let Some(listener) = ctx.listeners.get_mut(i) else {
        return;
    };
    for (key, (value, at)) in &srv.listener_keys {
        match listener.keys.get(key) {
            Some((v, first)) if v != value => ctx.notes.0.push(Note {
                at: at.clone(),
                directive: super::location::nginx_name(key).to_owned(),
                why: format!("{key} = {value} here, {v} at {first}, for servers on one address: fulcrum sets it per listener (the first is kept)"),
                cosmetic: false,
            }),
            Some(_) => {}
            None => {
                listener.keys.insert(key, (value.clone(), at.clone()));
            }
        }
    }
    listener.servers.push(srv.clone());
    if default && listener.default.is_none() {
        listener.default = Some(listener.servers.len() - 1);
    }
    listener.ssl |= ssl;
    listener.http2 |= http2;
}

/// The TOML: upstreams, then listeners with their certificates and routes.
fn emit(ctx: &Ctx) -> String {
    let mut out = String::from(
        "# Translated from nginx by `fulcrum import` (docs/import.md). Each item names its source.\n\n",
    );
    for name in &ctx.upstream_order {
        if let Some(up) = ctx.upstreams.get(name) {
            out.push_str(&up.toml());
        }
    }
    for l in &ctx.listeners {
        emit_listener(l, &mut out);
    }
    out
}

/// One `[[listener]]`: each server's routes with its names as `host`, then the default
/// server's again without `host` (nginx gives it the requests no name matches).
fn emit_listener(l: &Listener, out: &mut String) {
    out.push_str(&format!(
        "[[listener]]\n# {}\nlisten = {}\n",
        l.comment,
        quote(&l.addr)
    ));
    if l.http2 {
        out.push_str("http2 = true\n");
    }
    for (key, (value, at)) in &l.keys {
        out.push_str(&format!("{key} = {value}  # {at}\n"));
    }
    if l.servers.iter().any(|s| s.upgrade) {
        out.push_str("upgrade = [\"websocket\"]\n");
    }
    if l.ssl {
        for s in &l.servers {
            for (cert, key, at) in &s.certs {
                out.push_str(&format!(
                    "\n[[listener.tls]]\n# {at} ssl_certificate\ncert = {}\nkey = {}\n",
                    quote(cert),
                    quote(key)
                ));
            }
        }
    }
    let default = l.default.unwrap_or(0);
    let mut n = 0;
    for (i, s) in l.servers.iter().enumerate() {
        if !s.names.is_empty() {
            for r in &s.routes {
                n += 1;
                out.push_str(&r.toml(
                    &format!("{}{}", s.names.join(","), r.label),
                    Some(&s.names),
                    n,
                ));
            }
        }
        let _ = i;
    }
    if let Some(s) = l.servers.get(default) {
        for r in &s.routes {
            n += 1;
            out.push_str(&r.toml(&format!("default{}", r.label), None, n));
        }
    }
    out.push('\n');
}
