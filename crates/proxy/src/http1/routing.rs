//! Which route takes a request, decided while its head is parsed (on a listener with
//! `[[listener.route]]`): the route's upstream, hash key and path rewrite shape the head the
//! backend gets, and a route that answers itself (a redirect, a fixed answer) — or no route
//! at all — needs no backend head.
//!
//! The path matched is the target's path normalised as nginx does before it matches
//! locations ([`routes::normalize`]: percent-decoded, `.`/`..` resolved, slashes merged), never
//! the raw target: `/api/../admin` is `/admin`. A path that climbs above the root is refused
//! (400), as nginx refuses it.

use std::cell::RefCell;
use std::ops::Range;

use super::target::{HostName, Target, check_host};
use super::{Reject, reject};
use crate::route::{Action, Routes};
use crate::settings::{HashKey, Redirect};

const BAD_PATH: Reject = reject(400, "400 Bad Request: the path climbs above the root\n");
const BAD_HOST: Reject = reject(400, "400 Bad Request: invalid Host header\n");

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Routed {
    /// The listener's own upstream: the listener has no routes, or none took the request.
    Default,
    /// Route number `route`'s upstream.
    Upstream { route: usize },
    /// Answered here, with `status`: by route number `route` (a redirect or a fixed answer), or
    /// (`None`) because no route took the request and the listener has no upstream (404). A
    /// redirect's `Location` is in the head buffer at `location`.
    Answer {
        route: Option<usize>,
        status: u16,
        location: Range<usize>,
    },
}

/// What [`route`] decided, and what the head's writing needs of it.
pub(super) struct Decision<'r> {
    pub(super) routed: Routed,
    /// The hash key of the route's upstream (its `hash_key`), if the request goes to a route.
    pub(super) key: Option<&'r HashKey>,
    /// The name of the route's upstream's sticky cookie, if it has sticky sessions.
    pub(super) sticky: Option<&'r str>,
    /// The backend's request line is already in the head buffer up to the target (`METHOD
    /// /rewritten/path?query`): the route rewrote the path.
    pub(super) target_written: bool,
}

/// What the request says of itself, as the routes ask it.
pub(super) struct Asked<'a, 'h> {
    pub(super) method: &'a str,
    pub(super) target: &'a Target<'a>,
    pub(super) host: Option<&'a [u8]>,
    /// What checking `host` found ([`check_host`]), if it was checked as a `Host` field (an
    /// absolute target's authority is checked again here).
    pub(super) name: Option<HostName>,
    pub(super) headers: &'a [httparse::Header<'h>],
    /// `http`, or `https` on a TLS listener (for a redirect's `Location`).
    pub(super) scheme: &'a str,
}

struct FieldsOf<'a, 'h>(&'a [httparse::Header<'h>]);

impl Routed {
    /// The route that took the request, if one did.
    pub(crate) fn route(&self) -> Option<usize> {
        match self {
            Routed::Default => None,
            Routed::Upstream { route } => Some(*route),
            Routed::Answer { route, .. } => *route,
        }
    }
}

impl routes::Headers for FieldsOf<'_, '_> {
    fn has(&self, name: &str, value: &[u8]) -> bool {
        self.0
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case(name) && h.value == value)
    }
}

thread_local! {
    /// The normalised path of the request being routed: one buffer a worker thread, so that
    /// routing allocates nothing once it has grown to the longest path seen.
    static PATH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Routes the request `asked` by `routes`. `has_default`: the listener has an upstream of its
/// own, for the requests no route takes. `out` is the (empty) head buffer: a rewritten request
/// line or a redirect's `Location` is written there.
pub(super) fn route<'r>(
    routes: &'r Routes,
    has_default: bool,
    asked: &Asked<'_, '_>,
    out: &mut Vec<u8>,
) -> Result<Decision<'r>, Reject> {
    // One pass over the target: where its query starts, and whether its path is normal
    // already (most are: used as they are, without a copy; nginx too parses only a "complex"
    // URI).
    let (path, query, normal) = routes::split_target(asked.target.as_sent().as_bytes());
    if normal {
        return decide(routes, has_default, asked, path, query, out);
    }
    PATH.with_borrow_mut(|buffer| {
        routes::normalize(path, buffer).map_err(|_| BAD_PATH)?;
        decide(routes, has_default, asked, buffer, query, out)
    })
}

/// [`route`] for the normalised path `normalised` and the query `query`.
fn decide<'r>(
    routes: &'r Routes,
    has_default: bool,
    asked: &Asked<'_, '_>,
    normalised: &[u8],
    query: &[u8],
    out: &mut Vec<u8>,
) -> Result<Decision<'r>, Reject> {
    let host = match asked.host {
        None => routes::Host::Sent(&[]),
        Some(raw) => match asked.name.or_else(|| check_host(raw)) {
            Some(HostName {
                len: Some(len),
                upper,
            }) => routes::Host::Name {
                name: raw.get(..len).unwrap_or_default(),
                upper,
            },
            Some(HostName { len: None, .. }) => return Err(BAD_HOST),
            None => routes::Host::Sent(raw),
        },
    };
    let request = routes::Request {
        host,
        path: normalised,
        method: asked.method.as_bytes(),
        query,
        headers: &FieldsOf(asked.headers),
    };
    let answer = |route, status, location| Decision {
        routed: Routed::Answer {
            route,
            status,
            location,
        },
        key: None,
        sticky: None,
        target_written: false,
    };
    let i = match routes.select(&request) {
        routes::Selected::BadHost => return Err(BAD_HOST),
        routes::Selected::None if has_default => {
            return Ok(Decision {
                routed: Routed::Default,
                key: None,
                sticky: None,
                target_written: false,
            });
        }
        routes::Selected::None => return Ok(answer(None, 404, 0..0)),
        routes::Selected::AddSlash(i) => {
            // nginx's answer to `/p` for a `location /p/` that proxies: 301 to `/p/`.
            let mut path = normalised.to_vec();
            path.push(b'/');
            let location = put_location(out, asked, None, None, None, Some(&path), query);
            return Ok(answer(Some(i), 301, location));
        }
        routes::Selected::Route(i) => i,
    };
    let Some(route) = routes.get(i) else {
        return Ok(answer(None, 404, 0..0));
    };
    Ok(match &route.action {
        Action::Upstream {
            key,
            sticky,
            rewrite,
            ..
        } => {
            if let Some(rewrite) = rewrite {
                out.extend_from_slice(asked.method.as_bytes());
                out.push(b' ');
                out.extend_from_slice(rewrite.with.as_bytes());
                let rest = normalised.get(rewrite.prefix..).unwrap_or_default();
                // `with` ends in `/` when the prefix did: no `//` where they meet.
                let rest = match (rewrite.with.ends_with('/'), rest) {
                    (true, [b'/', tail @ ..]) => tail,
                    _ => rest,
                };
                put_escaped(out, rest);
                if !query.is_empty() {
                    out.push(b'?');
                    out.extend_from_slice(query);
                }
            }
            Decision {
                routed: Routed::Upstream { route: i },
                key: key.as_ref(),
                sticky: sticky.as_deref(),
                target_written: rewrite.is_some(),
            }
        }
        Action::Redirect(r) => {
            let location = redirect(out, asked, r, query);
            answer(Some(i), r.status, location)
        }
        Action::Respond { status, .. } => answer(Some(i), *status, 0..0),
    })
}

/// Writes a redirect's `Location` into `out`; where it is.
fn redirect(out: &mut Vec<u8>, asked: &Asked<'_, '_>, r: &Redirect, query: &[u8]) -> Range<usize> {
    put_location(
        out,
        asked,
        r.scheme.as_deref(),
        r.host.as_deref(),
        r.port,
        r.path.as_deref().map(str::as_bytes),
        query,
    )
}

/// Writes `scheme://host[:port]path` into `out`, each part the request's own unless given:
/// the scheme the client used; the host of its `Host` as nginx's `$host` is (lower case, no
/// trailing dot), with the `Host`'s port unless the scheme or host changes or a port is
/// given; the target as sent (path and query) unless a path is given (then the path, and the
/// request's query after it when the path has none).
fn put_location(
    out: &mut Vec<u8>,
    asked: &Asked<'_, '_>,
    scheme: Option<&str>,
    host: Option<&str>,
    port: Option<u16>,
    path: Option<&[u8]>,
    query: &[u8],
) -> Range<usize> {
    let start = out.len();
    out.extend_from_slice(scheme.unwrap_or(asked.scheme).as_bytes());
    out.extend_from_slice(b"://");
    let sent_host = asked.host.unwrap_or_default();
    let (name, sent_port) = split_port(sent_host);
    match host {
        Some(host) => out.extend_from_slice(host.as_bytes()),
        // nginx's `$host`: the name in lower case, without a trailing dot.
        None => {
            let name = name.strip_suffix(b".").unwrap_or(name);
            out.extend(name.iter().map(u8::to_ascii_lowercase));
        }
    }
    if let Some(port) = port {
        out.push(b':');
        out.extend_from_slice(port.to_string().as_bytes());
    } else if let (None, None, Some(sent_port)) = (scheme, host, sent_port) {
        out.push(b':');
        out.extend_from_slice(sent_port);
    }
    match path {
        Some(path) => {
            put_escaped(out, path);
            if !query.is_empty() && !path.contains(&b'?') {
                out.push(b'?');
                out.extend_from_slice(query);
            }
        }
        None => asked.target.put_origin_form(out),
    }
    start..out.len()
}

/// A `Host` value's name and port (`[::1]:8080` → `[::1]`, `8080`).
fn split_port(host: &[u8]) -> (&[u8], Option<&[u8]>) {
    let colon = match host.iter().rposition(|&b| b == b':') {
        Some(i) if !host[i..].contains(&b']') => i,
        _ => return (host, None),
    };
    (&host[..colon], host.get(colon + 1..))
}

/// Appends `path` with the bytes a request target cannot carry as they are percent-encoded
/// (what nginx escapes in a URI it rewrote: controls, space, non-ASCII, `"#%<>?\^`{|}`).
fn put_escaped(out: &mut Vec<u8>, path: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in path {
        let plain = b > b' '
            && b < 0x7f
            && !matches!(
                b,
                b'"' | b'#' | b'%' | b'<' | b'>' | b'?' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}'
            );
        if plain {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_s_port_is_split_off() {
        assert_eq!(
            split_port(b"a.test:8080"),
            (&b"a.test"[..], Some(&b"8080"[..]))
        );
        assert_eq!(split_port(b"a.test"), (&b"a.test"[..], None));
        assert_eq!(split_port(b"[::1]"), (&b"[::1]"[..], None));
        assert_eq!(split_port(b"[::1]:81"), (&b"[::1]"[..], Some(&b"81"[..])));
    }

    #[test]
    fn what_a_target_cannot_carry_is_escaped() {
        let mut out = Vec::new();
        put_escaped(&mut out, "/a b/%/?/é/ok-._~!$&'()*+,;=:@".as_bytes());
        assert_eq!(out, b"/a%20b/%25/%3F/%C3%A9/ok-._~!$&'()*+,;=:@");
    }
}
