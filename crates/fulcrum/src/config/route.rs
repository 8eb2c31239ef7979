//! `[[listener.route]]`: which requests of a listener go where, by host, path and a few
//! conditions, matched with nginx's precedence (docs/routing.md), and what is done with them:
//! passed to an upstream, redirected, or answered with a fixed response.
//!
//! Everything `run` would refuse is refused here first, at its key: two path conditions or
//! none of the actions, an upstream that is not defined, a regex the `regex` crate cannot
//! compile (with its position), a host nginx would not take, a route that can never be
//! reached because an earlier one has the very same conditions.

use std::collections::HashMap;
use std::ops::Range;

use proxy::{Redirect, RouteAction, RouteSettings};
use routes::{BuildErrorKind, PathMatch, Spec};
use toml::de::DeValue;

use super::report::Report;
use super::table::{Section, Table, found};

pub(super) const SECTION: Section = Section {
    title: "[[listener.route]]",
    keys: &[
        "name",
        "host",
        "path",
        "path_exact",
        "path_regex",
        "path_regex_nocase",
        "prefix_wins",
        "methods",
        "headers",
        "query",
        "upstream",
        "strip_prefix",
        "rewrite_prefix",
        "redirect",
        "respond",
        "request_headers",
        "response_headers",
        "access",
        "limit_req",
        "limit_conn",
    ],
    not_yet: &[],
};

const REDIRECT: Section = Section {
    title: "redirect",
    keys: &["status", "scheme", "host", "port", "path"],
    not_yet: &[],
};

const RESPOND: Section = Section {
    title: "respond",
    keys: &["status", "body", "content_type"],
    not_yet: &[],
};

/// A route as read, with where it was written (for the errors found once all are read).
struct Read {
    settings: RouteSettings,
    span: Range<usize>,
    key: String,
    /// Where its path condition is, and its key.
    path_at: Option<(Range<usize>, String)>,
    /// Where each host is, and its key.
    hosts_at: Vec<(Range<usize>, String)>,
}

/// The routes of listener `t`, in file order; `upstreams`: the names defined (`None` when some
/// could not be read: then any name may be right). Those with a problem are reported and the
/// whole list is empty (what is returned is not used when a problem was reported).
pub(super) fn read(
    r: &mut Report<'_>,
    t: &Table<'_>,
    upstreams: Option<&[&str]>,
) -> Vec<RouteSettings> {
    let tables = t.sections(r, "route", &SECTION);
    let mut read = Vec::new();
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut failed = false;
    for (i, route) in tables.iter().enumerate() {
        let Some(one) = read_one(r, route, i, upstreams) else {
            failed = true;
            continue;
        };
        let line = r.line_of(&one.span);
        if let Some(first) = names.insert(one.settings.name.clone(), line) {
            r.error(
                route.span_of("name").unwrap_or_else(|| route.span()),
                &route.key("name"),
                format!(
                    "another route of this listener (line {first}) is named \"{}\": give each its own name",
                    one.settings.name
                ),
            );
            failed = true;
        }
        read.push(one);
    }
    if failed {
        return Vec::new();
    }
    if !table_builds(r, &read) {
        return Vec::new();
    }
    read.into_iter().map(|one| one.settings).collect()
}

/// Builds the routes as `run` will, and reports what the routes crate refuses at its key.
fn table_builds(r: &mut Report<'_>, read: &[Read]) -> bool {
    let specs: Vec<Spec> = read.iter().map(|one| one.settings.spec.clone()).collect();
    let Err(errors) = routes::Table::build(&specs) else {
        return true;
    };
    for e in errors {
        let Some(one) = read.get(e.route) else {
            continue;
        };
        let (span, key) = match &e.kind {
            BuildErrorKind::Regex { host: Some(h), .. } | BuildErrorKind::Host { host: h, .. } => {
                one.hosts_at.get(*h).cloned()
            }
            BuildErrorKind::Regex { host: None, .. } => one.path_at.clone(),
            BuildErrorKind::Shadowed { .. } => None,
        }
        .unwrap_or_else(|| (one.span.clone(), one.key.clone()));
        let message = match &e.kind {
            BuildErrorKind::Regex {
                message, position, ..
            } => match position {
                Some(at) => format!(
                    "the regex does not compile (at byte {at} of the pattern): {message}; fulcrum's regexes are the regex crate's (no lookaround, no backreferences)"
                ),
                None => format!(
                    "the regex does not compile: {message}; fulcrum's regexes are the regex crate's (no lookaround, no backreferences)"
                ),
            },
            BuildErrorKind::Host { why, .. } => why.clone(),
            BuildErrorKind::Shadowed { by } => {
                let line = read.get(*by).map_or(0, |b| r.line_of(&b.span));
                format!(
                    "no request can reach this route: the route at line {line} has the very same host, path and conditions and comes first; remove one, or tell them apart"
                )
            }
        };
        r.error(span, &key, message);
    }
    false
}

/// Route number `i` of its listener; `None` if it has a problem (reported).
fn read_one(
    r: &mut Report<'_>,
    t: &Table<'_>,
    i: usize,
    upstreams: Option<&[&str]>,
) -> Option<Read> {
    let errors_before = r.error_count();
    let name = t
        .text(r, "name", "a name", "api")
        .map_or_else(|| format!("route{}", i + 1), |n| n.get_ref().to_string());
    let hosts = t.strings(r, "host", ("a host name", "host names"), "api.example.com");
    let mut hosts_at = Vec::new();
    let mut host_names = Vec::new();
    for (key, host) in hosts {
        if host.get_ref().is_empty() {
            r.error(
                host.span(),
                &key,
                "an empty host name: remove it, or leave `host` out to take any host",
            );
        }
        hosts_at.push((host.span(), key));
        host_names.push(host.get_ref().to_ascii_lowercase());
    }
    let (path, path_at) = path_condition(r, t);
    let methods = methods(r, t);
    let headers = pairs(r, t, "headers", true);
    let query = pairs(r, t, "query", false);
    let action = action(r, t, &path, upstreams);
    let request_headers = super::header_rules::read(r, t, "request_headers");
    let response_headers = super::header_rules::read(r, t, "response_headers");
    let access = super::access::read(r, t);
    let limit_req = super::limits::limit_req(r, t);
    let limit_conn = super::limits::limit_conn(r, t);
    let auto_redirect = matches!(action, Some(RouteAction::Upstream { .. }))
        && match &path {
            PathMatch::Prefix { prefix, .. } => prefix.ends_with('/') && prefix.len() > 1,
            PathMatch::Exact(exact) => exact.ends_with('/') && exact.len() > 1,
            PathMatch::Any | PathMatch::Regex { .. } => false,
        };
    if r.error_count() > errors_before {
        return None;
    }
    Some(Read {
        settings: RouteSettings {
            name,
            spec: Spec {
                hosts: host_names,
                path,
                methods,
                headers,
                query,
                auto_redirect,
            },
            action: action?,
            request_headers,
            response_headers,
            access,
            limit_req,
            limit_conn,
        },
        span: t.span(),
        key: t.key("name"),
        path_at,
        hosts_at,
    })
}

/// The route's path condition: at most one of `path`, `path_exact`, `path_regex`,
/// `path_regex_nocase`; `prefix_wins` only with `path`.
fn path_condition(
    r: &mut Report<'_>,
    t: &Table<'_>,
) -> (PathMatch, Option<(Range<usize>, String)>) {
    let given: Vec<&str> = ["path", "path_exact", "path_regex", "path_regex_nocase"]
        .into_iter()
        .filter(|k| t.span_of(k).is_some())
        .collect();
    if given.len() > 1 {
        t.error(
            r,
            given[1],
            format!(
                "a route has one path condition, and this one also has `{}`: keep one (a second route can take the other)",
                given[0]
            ),
        );
    }
    let prefix_wins = t.flag(r, "prefix_wins").unwrap_or(false);
    if prefix_wins && given.first() != Some(&"path") {
        t.error(
            r,
            "prefix_wins",
            "prefix_wins is for a prefix (`path`, nginx's `^~`): give the route a `path`, or remove prefix_wins",
        );
    }
    let Some(&key) = given.first() else {
        return (PathMatch::Any, None);
    };
    let Some(value) = t.text(r, key, "a path", "/api/") else {
        return (PathMatch::Any, None);
    };
    let at = Some((value.span(), t.key(key)));
    let text = value.get_ref().to_string();
    if matches!(key, "path" | "path_exact") && !text.starts_with('/') {
        r.error(
            value.span(),
            &t.key(key),
            format!(
                "a path starts with `/`, like \"/{}\"",
                text.trim_start_matches('/')
            ),
        );
    }
    let path = match key {
        "path" => PathMatch::Prefix {
            prefix: text,
            wins: prefix_wins,
        },
        "path_exact" => PathMatch::Exact(text),
        "path_regex" => PathMatch::Regex {
            pattern: text,
            nocase: false,
        },
        _ => PathMatch::Regex {
            pattern: text,
            nocase: true,
        },
    };
    (path, at)
}

/// `methods`: upper-case method names (`GET`); empty: any method.
fn methods(r: &mut Report<'_>, t: &Table<'_>) -> Vec<String> {
    let mut out = Vec::new();
    for (key, m) in t.strings(r, "methods", ("a method", "methods"), "GET") {
        let name = *m.get_ref();
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.!#$%&'*+^`|~".contains(&b));
        if !token {
            r.error(
                m.span(),
                &key,
                format!("\"{name}\" is not a method name: write one like \"GET\" or \"POST\""),
            );
        } else if name != name.to_ascii_uppercase() {
            r.error(
                m.span(),
                &key,
                format!(
                    "methods are case-sensitive (RFC 9110 §9.1) and written in upper case: \"{}\"",
                    name.to_ascii_uppercase()
                ),
            );
        } else {
            out.push(name.to_owned());
        }
    }
    out
}

/// `headers` or `query`: a table of names to exact values. Header names are checked as field
/// names and kept in lower case.
fn pairs(r: &mut Report<'_>, t: &Table<'_>, name: &str, header: bool) -> Vec<(String, String)> {
    let Some(value) = t.value(name) else {
        return Vec::new();
    };
    let example = if header {
        "{ \"x-canary\" = \"1\" }"
    } else {
        "{ \"v\" = \"2\" }"
    };
    let DeValue::Table(entries) = value.get_ref() else {
        r.error(
            value.span(),
            &t.key(name),
            format!(
                "expected a table such as {example}, not {}",
                found(value.get_ref())
            ),
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in entries {
        let key = format!("{}.{}", t.key(name), k.get_ref());
        let DeValue::String(text) = v.get_ref() else {
            r.error(
                v.span(),
                &key,
                format!(
                    "expected a string such as \"1\", not {}",
                    found(v.get_ref())
                ),
            );
            continue;
        };
        let field = k.get_ref();
        if header
            && (field.is_empty()
                || !field
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.!#$%&'*+^`|~".contains(&b)))
        {
            r.error(k.span(), &key, format!("\"{field}\" is not a header name"));
            continue;
        }
        let field = if header {
            field.to_ascii_lowercase()
        } else {
            field.to_string()
        };
        out.push((field, text.to_string()));
    }
    out
}

/// The route's one action: `upstream` (with `strip_prefix` or `rewrite_prefix`), `redirect`
/// or `respond`.
fn action(
    r: &mut Report<'_>,
    t: &Table<'_>,
    path: &PathMatch,
    upstreams: Option<&[&str]>,
) -> Option<RouteAction> {
    let given: Vec<&str> = ["upstream", "redirect", "respond"]
        .into_iter()
        .filter(|k| t.span_of(k).is_some())
        .collect();
    match given.len() {
        0 => {
            r.error(
                t.span(),
                &t.key("upstream"),
                "a route needs one action: upstream = \"NAME\", redirect = { ... } or respond = { ... }",
            );
            return None;
        }
        1 => {}
        _ => {
            t.error(
                r,
                given[1],
                format!(
                    "a route does one thing, and this one also has `{}`: keep one",
                    given[0]
                ),
            );
            return None;
        }
    }
    let rewrite = rewrite(r, t, path, given[0] == "upstream");
    match given[0] {
        "upstream" => {
            let u = t.text(r, "upstream", "an upstream name", "web")?;
            if !super::listener::defined_upstream(r, t, &u, upstreams) {
                return None;
            }
            Some(RouteAction::Upstream {
                upstream: u.get_ref().to_string(),
                rewrite,
            })
        }
        "redirect" => redirect(r, t).map(RouteAction::Redirect),
        _ => respond(r, t),
    }
}

/// `strip_prefix = true` or `rewrite_prefix = "/x/"`: only with an upstream, and a `path` or
/// `path_exact` whose matched part they replace.
fn rewrite(r: &mut Report<'_>, t: &Table<'_>, path: &PathMatch, upstream: bool) -> Option<String> {
    let strip = t.flag(r, "strip_prefix").unwrap_or(false);
    let with = t.text(r, "rewrite_prefix", "a path", "/v1/");
    let key = match (strip, &with) {
        (false, None) => return None,
        (true, Some(_)) => {
            t.error(r, "rewrite_prefix", "strip_prefix and rewrite_prefix both replace the prefix: keep one (strip_prefix is rewrite_prefix = \"/\")");
            return None;
        }
        (true, None) => "strip_prefix",
        (false, Some(_)) => "rewrite_prefix",
    };
    if !upstream {
        t.error(
            r,
            key,
            format!("{key} rewrites what is passed to an upstream: this route has no upstream"),
        );
        return None;
    }
    if !matches!(path, PathMatch::Prefix { .. } | PathMatch::Exact(_)) {
        t.error(r, key, format!("{key} replaces the part of the path a `path` (or `path_exact`) matched: give the route one"));
        return None;
    }
    match with {
        None => Some("/".to_owned()),
        Some(w) if w.get_ref().starts_with('/') => Some(w.get_ref().to_string()),
        Some(w) => {
            r.error(w.span(), &t.key("rewrite_prefix"), "a path starts with `/`");
            None
        }
    }
}

/// `redirect = { status, scheme, host, port, path }`.
fn redirect(r: &mut Report<'_>, t: &Table<'_>) -> Option<Redirect> {
    let s = t.section(r, "redirect", &REDIRECT)?;
    let errors_before = r.error_count();
    let status = s.integer::<u16>(r, "status", 301..=308, "").unwrap_or(301);
    if ![301, 302, 303, 307, 308].contains(&status) {
        s.error(
            r,
            "status",
            format!("{status} is not a redirect: use 301, 302, 303, 307 or 308"),
        );
    }
    let scheme = s
        .text(r, "scheme", "a scheme", "https")
        .map(|v| v.get_ref().to_string());
    if let Some(scheme) = &scheme
        && scheme != "http"
        && scheme != "https"
    {
        s.error(
            r,
            "scheme",
            format!("\"{scheme}\": use \"http\" or \"https\""),
        );
    }
    let host = s
        .text(r, "host", "a host name", "www.example.com")
        .map(|v| v.get_ref().to_string());
    if let Some(host) = &host
        && (host.is_empty() || host.contains(['/', '?', '#', ' ', '$', '@']))
    {
        s.error(
            r,
            "host",
            format!(
                "\"{host}\" is not a host name (variables are not supported in a redirect yet)"
            ),
        );
    }
    let port = s.integer::<u16>(r, "port", 1..=65535, "");
    let path = s
        .text(r, "path", "a path", "/new/")
        .map(|v| v.get_ref().to_string());
    if let Some(path) = &path
        && (!path.starts_with('/') || path.contains('$'))
    {
        s.error(
            r,
            "path",
            "a redirect's path starts with `/` (variables are not supported in a redirect yet)",
        );
    }
    (r.error_count() == errors_before).then_some(Redirect {
        status,
        scheme,
        host,
        port,
        path,
    })
}

/// `respond = { status, body, content_type }`.
fn respond(r: &mut Report<'_>, t: &Table<'_>) -> Option<RouteAction> {
    let s = t.section(r, "respond", &RESPOND)?;
    let errors_before = r.error_count();
    let status = s.integer::<u16>(
        r,
        "status",
        200..=599,
        " (an answer of our own is not informational)",
    );
    let body = s
        .text(r, "body", "a text", "not here\\n")
        .map_or(String::new(), |b| b.get_ref().to_string());
    let content_type = s
        .text(r, "content_type", "a media type", "text/plain")
        .map_or_else(
            || "text/plain; charset=utf-8".to_owned(),
            |c| c.get_ref().to_string(),
        );
    if content_type.bytes().any(|b| b.is_ascii_control()) {
        s.error(r, "content_type", "a media type has no control characters");
    }
    let status = status.or_else(|| {
        if s.span_of("status").is_none() {
            s.error(
                r,
                "status",
                "respond needs a status, like respond = { status = 404 }",
            );
        }
        None
    })?;
    if matches!(status, 204 | 304) && !body.is_empty() {
        s.error(
            r,
            "body",
            format!("a {status} has no body (RFC 9110): remove body"),
        );
    }
    (r.error_count() == errors_before).then_some(RouteAction::Respond {
        status,
        body,
        content_type,
    })
}
