//! A request head: parsed, checked against RFC 9112, and rewritten for the backend in one pass.
//!
//! The rules enforced (each has a test, here or in `tests/http1_rules.rs`):
//!
//! * request line and header syntax as httparse checks it (tokens, no whitespace before the
//!   colon, no obs-fold, no control characters, RFC 9112 §3, §5): 400; versions other than 1.0
//!   and 1.1: 505 (§2.3);
//! * more than `max_headers` header lines, or a head over `max_header_bytes`: 431 (a request
//!   line alone over the limit: 414);
//! * `Content-Length` that is not a decimal number, or several that disagree: 400 (§6.3);
//! * `Transfer-Encoding` together with `Content-Length`, in an HTTP/1.0 request, or without
//!   `chunked` last: 400; a coding other than `chunked` before it: 501 (§6.1, §6.3);
//! * `Host`: missing in HTTP/1.1, repeated, or not a valid `host[:port]`: 400 (RFC 9110 §7.2,
//!   RFC 9112 §3.2);
//! * `CONNECT`: 405 whatever its target (this is a reverse proxy, not a tunnel); `TRACE`: 405,
//!   as nginx answers it (a backend's echo would show the client what the proxy added, and
//!   cookies to a script: cross-site tracing). Either in another case (`connect /`, `Trace /`):
//!   400, as nginx answers every method with lower-case letters. Methods are case-sensitive
//!   (RFC 9110 §9.1) and other unknown methods are passed on, but a backend that compares
//!   methods without case would take these for the methods refused here.
//!
//! The head the backend gets is written as the checks pass: the request line in origin form and
//! HTTP/1.1, one `Host`, the client's headers less the hop-by-hop ones (RFC 9110 §7.6.1),
//! `Expect` (answered here) and framing, then the forwarding headers (see `forwarding`).
//! Framing is added by [`finish_request_head`] once the body has been read.

use std::mem::MaybeUninit;
use std::ops::Range;

use super::edit::{self, Edits, ResponseEdit};
use super::forwarding::{self, ClientAddr};
use super::routing::{self, Asked, Routed};
use super::target::{HostName, Target, TargetError, check_host};
use super::{
    Codings, ConnectionTokens, Framing, Reject, codings, connection_tokens, content_length,
    is_hop_by_hop, put_content_length, put_header, reject, values,
};
use crate::route::{Route, Routes};
use crate::settings::HashKey;

/// Upper bound of `max_headers`: header slots live on the stack while a head is parsed.
pub const MAX_HEADERS_LIMIT: usize = 256;

const BAD_SYNTAX: Reject = reject(400, "400 Bad Request: malformed request line or header\n");
const BAD_VERSION: Reject = reject(
    505,
    "505 HTTP Version Not Supported: use HTTP/1.1 or HTTP/1.0\n",
);
const HEAD_TOO_LARGE: Reject = reject(
    431,
    "431 Request Header Fields Too Large: too many header lines or too many bytes in the head\n",
);
const URI_TOO_LONG: Reject = reject(
    414,
    "414 URI Too Long: the request line exceeds max_header_bytes\n",
);
const BAD_LENGTH: Reject = reject(
    400,
    "400 Bad Request: invalid or conflicting Content-Length\n",
);
const LENGTH_AND_CHUNKED: Reject = reject(
    400,
    "400 Bad Request: both Content-Length and Transfer-Encoding; send one\n",
);
const BAD_CODING: Reject = reject(
    400,
    "400 Bad Request: Transfer-Encoding must end with chunked, once, and needs HTTP/1.1\n",
);
const UNKNOWN_CODING: Reject = reject(
    501,
    "501 Not Implemented: only the chunked transfer coding is understood\n",
);
const NO_HOST: Reject = reject(
    400,
    "400 Bad Request: HTTP/1.1 requests need a Host header\n",
);
const TWO_HOSTS: Reject = reject(400, "400 Bad Request: more than one Host header\n");
const BAD_HOST: Reject = reject(400, "400 Bad Request: invalid Host header\n");
const BAD_TARGET: Reject = reject(400, "400 Bad Request: invalid request target\n");
const CONNECT: Reject = reject(
    405,
    "405 Method Not Allowed: CONNECT is not supported by this reverse proxy\n",
);

const TRACE: Reject = reject(
    405,
    "405 Method Not Allowed: TRACE is not allowed through this proxy\n",
);
const REFUSED_METHOD_CASE: Reject = reject(
    400,
    "400 Bad Request: methods are case-sensitive; CONNECT and TRACE are refused in any case\n",
);

/// Limits on a request head.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits<'a> {
    pub(crate) max_headers: usize,
    pub(crate) max_header_bytes: usize,
    /// The hash key to find in the request, if the upstream hashes a header, cookie or URI.
    pub(crate) key: Option<&'a HashKey>,
    /// The name of the upstream's sticky cookie, if it has sticky sessions: read for the
    /// pick, and taken out of the head the backend gets.
    pub(crate) sticky: Option<&'a str>,
    /// Protocols a request may upgrade its connection to (`Upgrade`, RFC 9110 §7.8), lower
    /// case: the listener's `upgrade`. Empty: `Upgrade` is removed like any hop-by-hop header.
    pub(crate) upgrade: &'a [String],
    /// The listener's routes, and whether it has an upstream of its own for the requests none
    /// takes (`key` is that upstream's); `None`: no routes, every request goes to it.
    pub(crate) routes: Option<(&'a Routes, bool)>,
    /// The listener's header rules and request id; `None` when neither it nor any of its
    /// routes has any.
    pub(crate) edits: Option<Edits<'a>>,
}

/// What the proxy needs to know about a request once its head has been rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestHead {
    /// Bytes of the head in the input, blank line included.
    pub(crate) head_len: usize,
    /// HTTP/1.1 (rather than 1.0).
    pub(crate) http11: bool,
    /// The client allows the connection to stay open after the response.
    pub(crate) keep_alive: bool,
    pub(crate) body: Framing,
    pub(crate) expect_continue: bool,
    /// The method may be repeated without changing the outcome (RFC 9110 §9.2.2).
    pub(crate) idempotent: bool,
    pub(crate) is_head: bool,
    /// Whether the rewritten head has a `Host` line (HTTP/1.0 requests may have none).
    pub(crate) has_host: bool,
    /// The request asks to upgrade the connection to a protocol the listener allows: the
    /// backend gets `Upgrade` and `Connection: upgrade`, and a 101 makes the connection a
    /// tunnel.
    pub(crate) upgrade: bool,
    /// Where the method and the request target are in the input (for the access log).
    pub(crate) method: Range<usize>,
    pub(crate) target: Range<usize>,
    /// Where the `Referer` and `User-Agent` values are (for the access log); empty if absent.
    pub(crate) referer: Range<usize>,
    pub(crate) user_agent: Range<usize>,
    /// Where the hash key asked for in [`Limits::key`] (or by the route's upstream) is in the
    /// input; empty when the request has no such header or cookie.
    pub(crate) key: Range<usize>,
    /// The backend the sticky cookie asked for in [`Limits::sticky`] (or by the route's
    /// upstream) names, if the request has one that parses.
    pub(crate) sticky: Option<balance::StickyId>,
    /// Where it goes: the listener's upstream, a route's, or our own answer (then nothing was
    /// written for a backend).
    pub(crate) routed: Routed,
    /// What its answer gets of the header rules, and its request id (with `Limits::edits`).
    pub(crate) response_edit: Option<ResponseEdit>,
}

impl RequestHead {
    /// Its request id, on a listener with `request_id = true`.
    pub(crate) fn request_id(&self) -> Option<&[u8]> {
        self.response_edit
            .as_ref()?
            .id
            .as_ref()
            .map(|id| id.as_bytes())
    }
}

/// The status for a request line httparse refused as to its version: 505 if the line is
/// otherwise well formed (`method SP target SP HTTP/d.d`), 400 if it is just malformed.
fn version_error(buf: &[u8]) -> Reject {
    let line = buf
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let well_formed = matches!(
        (parts.next(), parts.next(), parts.next(), parts.next()),
        (Some(m), Some(t), Some([b'H', b'T', b'T', b'P', b'/', major, b'.', minor]), None)
            if !m.is_empty() && !t.is_empty() && major.is_ascii_digit() && minor.is_ascii_digit()
    );
    if well_formed { BAD_VERSION } else { BAD_SYNTAX }
}

fn range_in(buf: &[u8], part: &str) -> Range<usize> {
    bytes_in(buf, part.as_bytes())
}

/// Where `part`, a slice of `buf`, lies in it.
fn bytes_in(buf: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    start..start + part.len()
}

/// `TRACE`: 405; in another case: 400 (`CONNECT` is the target's to refuse).
fn check_trace(method: &str) -> Result<(), Reject> {
    if method == "TRACE" {
        Err(TRACE)
    } else if method.eq_ignore_ascii_case("TRACE") {
        Err(REFUSED_METHOD_CASE)
    } else {
        Ok(())
    }
}

/// RFC 9110 §9.2.2.
fn idempotent(method: &str) -> bool {
    matches!(
        method,
        "GET" | "HEAD" | "PUT" | "DELETE" | "OPTIONS" | "TRACE"
    )
}

/// Parses the request head at the start of `buf`. `Ok(None)`: incomplete, read more. On
/// success the head the backend gets is appended to `out`, without its framing headers and
/// without the blank line that ends it (see [`finish_request_head`]).
pub(crate) fn parse_request(
    buf: &[u8],
    limits: Limits<'_>,
    client: &ClientAddr,
    out: &mut Vec<u8>,
) -> Result<Option<RequestHead>, Reject> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS_LIMIT];
    let slots = &mut slots[..limits.max_headers.min(MAX_HEADERS_LIMIT)];
    let mut req = httparse::Request::new(&mut []);
    let parsed = req.parse_with_uninit_headers(buf, slots);
    let Some(head_len) = head_length(parsed, buf, limits.max_header_bytes)? else {
        return Ok(None);
    };
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(BAD_SYNTAX);
    };
    let http11 = version == 1;
    let headers: &[httparse::Header<'_>] = req.headers;
    check_trace(method)?;
    let parsed_target = match Target::parse(method, target) {
        Ok(t) => t,
        Err(TargetError::Connect) => return Err(CONNECT),
        Err(TargetError::ConnectInAnotherCase) => return Err(REFUSED_METHOD_CASE),
        Err(TargetError::Invalid) => return Err(BAD_TARGET),
    };
    let expect_continue =
        values(headers, "expect").any(|v| v.trim_ascii().eq_ignore_ascii_case(b"100-continue"));
    let body = body_framing(headers, http11)?;
    // Absolute form: the target's authority wins over Host (RFC 9112 §3.2.2).
    let (host, name) = match (parsed_target.authority(), host(headers)?) {
        (Some(authority), _) => (Some(authority.as_bytes()), None),
        (None, Some((host, name))) => (Some(host), Some(name)),
        (None, None) => (None, None),
    };
    if host.is_none() && http11 {
        return Err(NO_HOST);
    }

    let decision = match limits.routes {
        None => None,
        Some((routes, has_default)) => {
            let asked = Asked {
                method,
                target: &parsed_target,
                host,
                name,
                headers,
                scheme: client.scheme(),
            };
            Some(routing::route(routes, has_default, &asked, out)?)
        }
    };
    let (routed, (key, sticky), target_written) = match decision {
        None => (Routed::Default, (limits.key, limits.sticky), false),
        Some(d) if d.routed == Routed::Default => {
            (Routed::Default, (limits.key, limits.sticky), false)
        }
        Some(d) => (d.routed, (d.key, d.sticky), d.target_written),
    };

    let route = routed
        .route()
        .and_then(|i| limits.routes.and_then(|(r, _)| r.get(i)));
    let edit = limits.edits.map(|edits| {
        let values = edit::Values {
            client,
            host,
            target: &parsed_target,
            route,
            id: edits.request_id.then(|| edit::request_id(headers, client)),
        };
        (edits, values)
    });

    let connection = connection_tokens(headers);
    let no_body = matches!(body, Framing::None | Framing::Length(0));
    let mut upgrade = false;
    // A request answered here gets no backend head (the buffer holds a redirect's `Location`).
    if !matches!(routed, Routed::Answer { .. }) {
        let line = (!target_written).then_some((method, &parsed_target));
        let hide = edit.as_ref().map(|(edits, _)| (edits, route));
        let fields = (headers, &connection, sticky);
        put_backend_head(out, line, host, fields, client, hide);
        upgrade = no_body && http11 && put_upgrade(out, headers, limits.upgrade);
        forwarding::put_forwarding(out, headers, client, host);
        if let Some((edits, values)) = &edit {
            edit::put_request(out, edits, values);
        }
    }
    let response_edit = edit.map(|(edits, values)| edit::response(&edits, &values, routed.route()));

    let value_of = |name: &str| {
        headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map_or(0..0, |h| bytes_in(buf, h.value))
    };
    Ok(Some(RequestHead {
        head_len,
        http11,
        keep_alive: !connection.close && (http11 || connection.keep_alive),
        body,
        expect_continue,
        idempotent: idempotent(method),
        is_head: method == "HEAD",
        has_host: host.is_some(),
        upgrade,
        method: range_in(buf, method),
        target: range_in(buf, target),
        referer: value_of("referer"),
        user_agent: value_of("user-agent"),
        key: match key {
            None | Some(HashKey::ClientIp) => 0..0,
            Some(HashKey::Uri) => range_in(buf, parsed_target.as_sent()),
            Some(HashKey::Header(name)) => value_of(name),
            Some(HashKey::Cookie(name)) => {
                cookie(headers, name.as_bytes()).map_or(0..0, |v| bytes_in(buf, v))
            }
        },
        sticky: sticky.and_then(|name| sticky_id(headers, name)),
        routed,
        response_edit,
    }))
}

/// The length of the head httparse found, held to `max_header_bytes`; `None` while it is
/// incomplete and may still fit.
fn head_length(
    parsed: httparse::Result<usize>,
    buf: &[u8],
    max_header_bytes: usize,
) -> Result<Option<usize>, Reject> {
    match parsed {
        Ok(httparse::Status::Complete(n)) if n <= max_header_bytes => Ok(Some(n)),
        Ok(httparse::Status::Complete(_)) => Err(HEAD_TOO_LARGE),
        Ok(httparse::Status::Partial) if buf.len() < max_header_bytes => Ok(None),
        // Over the limit and not done: a head too large, or a request line alone too long.
        Ok(httparse::Status::Partial) if buf.contains(&b'\n') => Err(HEAD_TOO_LARGE),
        Ok(httparse::Status::Partial) => Err(URI_TOO_LONG),
        Err(httparse::Error::TooManyHeaders) => Err(HEAD_TOO_LARGE),
        Err(httparse::Error::Version) => Err(version_error(buf)),
        Err(_) => Err(BAD_SYNTAX),
    }
}

/// How the request's body is framed, from `Content-Length` and `Transfer-Encoding` (RFC 9112
/// §6.1, §6.3).
fn body_framing(headers: &[httparse::Header<'_>], http11: bool) -> Result<Framing, Reject> {
    let length = content_length(values(headers, "content-length")).map_err(|()| BAD_LENGTH)?;
    if values(headers, "transfer-encoding").next().is_none() {
        return Ok(length.map_or(Framing::None, Framing::Length));
    }
    if !http11 {
        return Err(BAD_CODING);
    }
    if length.is_some() {
        return Err(LENGTH_AND_CHUNKED);
    }
    // §6.3: a final coding other than chunked leaves the length unknown (400); §6.1: a coding
    // the server does not understand gets 501.
    match codings(values(headers, "transfer-encoding")) {
        Codings::Chunked => Ok(Framing::Chunked),
        Codings::ChunkedAfterOthers => Err(UNKNOWN_CODING),
        Codings::NotChunkedLast | Codings::ChunkedNotLast => Err(BAD_CODING),
    }
}

/// The request's one `Host` value, if it has one (RFC 9110 §7.2), and its name as routing
/// takes it.
fn host<'h>(headers: &[httparse::Header<'h>]) -> Result<Option<(&'h [u8], HostName)>, Reject> {
    let mut hosts = values(headers, "host");
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(TWO_HOSTS);
    }
    match host {
        Some(h) => match check_host(h) {
            Some(name) => Ok(Some((h, name))),
            None => Err(BAD_HOST),
        },
        None => Ok(None),
    }
}

/// Writes the request line in origin form and HTTP/1.1 (`line`: its method and target, unless a
/// route already wrote them, rewritten), one `Host`, and the client's headers less the
/// hop-by-hop ones (those `Connection` names too, when it has any), the framing, `Expect`,
/// the forwarding headers this proxy writes itself and the sticky cookie (`sticky`, its name:
/// HAProxy's `indirect`, the backend never sees it).
fn put_backend_head(
    out: &mut Vec<u8>,
    line: Option<(&str, &Target<'_>)>,
    host: Option<&[u8]>,
    (headers, connection, sticky): (&[httparse::Header<'_>], &ConnectionTokens<'_>, Option<&str>),
    client: &ClientAddr,
    hide: Option<(&Edits<'_>, Option<&Route>)>,
) {
    if let Some((method, target)) = line {
        out.extend_from_slice(method.as_bytes());
        out.push(b' ');
        target.put_origin_form(out);
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(host) = host {
        put_header(out, "Host", host);
    }
    for h in headers {
        let name = h.name;
        if is_hop_by_hop(name)
            || forwarding::is_replaced(name, client)
            || name.eq_ignore_ascii_case("host")
            || name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("expect")
            || (connection.present && connection.names(headers, name))
            || hide.is_some_and(|(edits, route)| edit::hides_request(edits, route, name))
        {
            continue;
        }
        match sticky {
            Some(cookie) if name.eq_ignore_ascii_case("cookie") => {
                crate::sticky::put_cookie_without(out, name, h.value, cookie.as_bytes());
            }
            _ => put_header(out, name, h.value),
        }
    }
}

/// Writes `Upgrade` with the protocols the request offers that `allowed` names (compared by
/// name, without case or version: `websocket`, `h2c`), and `Connection: upgrade`, when the
/// client's `Connection` names `upgrade` (RFC 9110 §7.8: an `Upgrade` it does not name is
/// not meant for us) and one of them is allowed. Whether it wrote them.
fn put_upgrade(out: &mut Vec<u8>, headers: &[httparse::Header<'_>], allowed: &[String]) -> bool {
    if allowed.is_empty()
        || !values(headers, "connection")
            .flat_map(super::elements)
            .any(|t| t.eq_ignore_ascii_case(b"upgrade"))
    {
        return false;
    }
    let start = out.len();
    out.extend_from_slice(b"Upgrade: ");
    let mut any = false;
    for offer in values(headers, "upgrade").flat_map(super::elements) {
        let name = offer.split(|&b| b == b'/').next().unwrap_or_default();
        if allowed
            .iter()
            .any(|a| name.eq_ignore_ascii_case(a.as_bytes()))
        {
            if any {
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(offer);
            any = true;
        }
    }
    if any {
        out.extend_from_slice(b"\r\nConnection: upgrade\r\n");
    } else {
        out.truncate(start);
    }
    any
}

/// The value of cookie `name` in the request's `Cookie` headers (`a=1; b=2`, RFC 6265
/// §4.2.1), the first if there are several; names compared without case, as nginx does.
fn cookie<'b>(headers: &[httparse::Header<'b>], name: &[u8]) -> Option<&'b [u8]> {
    values(headers, "cookie")
        .flat_map(|v| v.split(|&b| b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii();
            let eq = pair.iter().position(|&b| b == b'=')?;
            let (n, v) = (&pair[..eq], &pair[eq + 1..]);
            n.trim_ascii()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim_ascii())
        })
}

/// The backend the first cookie named `name` (exactly) in the request's `Cookie` fields names,
/// if its value parses as an id.
fn sticky_id(headers: &[httparse::Header<'_>], name: &str) -> Option<balance::StickyId> {
    values(headers, "cookie")
        .find_map(|v| crate::sticky::value_in(v, name.as_bytes()))
        .and_then(balance::StickyId::parse)
}

/// Ends a request head for the backend: its `Content-Length` when the client sent a body
/// (chunked bodies are forwarded de-chunked, with their length), and the blank line.
pub(crate) fn finish_request_head(out: &mut Vec<u8>, body: Option<usize>) {
    if let Some(n) = body {
        put_content_length(out, n as u64);
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    const LIMITS: Limits<'static> = Limits {
        max_headers: 100,
        max_header_bytes: 16 * 1024,
        key: None,
        sticky: None,
        upgrade: &[],
        routes: None,
        edits: None,
    };
    fn client() -> ClientAddr {
        ClientAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9)), &[])
    }

    fn request(raw: &str) -> Result<(RequestHead, String), Reject> {
        let mut out = Vec::new();
        let head = parse_request(raw.as_bytes(), LIMITS, &client(), &mut out)?.expect("complete");
        Ok((head, String::from_utf8(out).unwrap()))
    }

    fn status(raw: &str) -> u16 {
        match request(raw) {
            Ok(_) => 200,
            Err(r) => r.status,
        }
    }

    /// The hash key `key` finds in `raw`.
    fn key_of(raw: &str, key: &HashKey) -> String {
        let limits = Limits {
            key: Some(key),
            ..LIMITS
        };
        let head = parse_request(raw.as_bytes(), limits, &client(), &mut Vec::new())
            .unwrap()
            .unwrap();
        raw[head.key].to_owned()
    }

    #[test]
    fn finds_the_hash_key_in_headers_cookies_and_the_uri() {
        let raw = "GET /p/q?x=1 HTTP/1.1\r\nHost: h\r\nX-User:  alice \r\nx-user: bob\r\n\
                   Cookie: a=1; SID=s42 ;b=2\r\nCookie: sid=later\r\n\r\n";
        let header = |n: &str| HashKey::Header(n.to_owned());
        let cookie = |n: &str| HashKey::Cookie(n.to_owned());
        assert_eq!(
            key_of(raw, &header("x-user")),
            "alice",
            "the first, trimmed"
        );
        assert_eq!(key_of(raw, &header("X-USER")), "alice");
        assert_eq!(key_of(raw, &header("x-missing")), "");
        assert_eq!(key_of(raw, &cookie("sid")), "s42", "the first, any case");
        assert_eq!(key_of(raw, &cookie("b")), "2");
        assert_eq!(key_of(raw, &cookie("c")), "");
        assert_eq!(key_of(raw, &HashKey::Uri), "/p/q?x=1");
        let absolute = "GET http://h/p?y HTTP/1.1\r\nHost: h\r\n\r\n";
        assert_eq!(key_of(absolute, &HashKey::Uri), "/p?y");
    }

    #[test]
    fn the_sticky_cookie_is_read_and_never_reaches_the_backend() {
        let sticky = |raw: &str| {
            let limits = Limits {
                sticky: Some("SRV"),
                ..LIMITS
            };
            let mut out = Vec::new();
            let head = parse_request(raw.as_bytes(), limits, &client(), &mut out)
                .unwrap()
                .expect("complete");
            (head.sticky, String::from_utf8(out).unwrap())
        };
        let (id, out) = sticky(
            "GET / HTTP/1.1\r\nHost: h\r\nCookie: a=1; SRV=00000000000000ff; b=2\r\n\
             Cookie: SRV=0000000000000001\r\nCookie: srv=kept\r\n\r\n",
        );
        assert_eq!(id, Some(balance::StickyId(0xff)), "the first");
        assert!(!out.contains("SRV="), "{out}");
        assert!(out.contains("\r\nCookie: a=1; b=2\r\n"), "{out}");
        assert!(
            out.contains("\r\nCookie: srv=kept\r\n"),
            "another name: {out}"
        );
        assert_eq!(out.matches("Cookie:").count(), 2, "{out}");
        // A value that names no backend: none asked for, and still taken out.
        let (id, out) = sticky("GET / HTTP/1.1\r\nHost: h\r\nCookie: SRV=10.0.0.1:80\r\n\r\n");
        assert_eq!(id, None);
        assert!(!out.contains("Cookie"), "{out}");
        // Without sticky sessions the cookie passes.
        let (_, out) = request("GET / HTTP/1.1\r\nHost: h\r\nCookie: SRV=1\r\n\r\n").unwrap();
        assert!(out.contains("Cookie: SRV=1\r\n"), "{out}");
    }

    #[test]
    fn rewrites_a_simple_request() {
        let (head, out) =
            request("GET /a?b HTTP/1.1\r\nHost: x.test\r\nAccept: */*\r\n\r\n").unwrap();
        assert_eq!(
            out,
            "GET /a?b HTTP/1.1\r\nHost: x.test\r\nAccept: */*\r\nX-Forwarded-For: 127.0.0.9\r\n\
             X-Forwarded-Proto: http\r\nForwarded: for=127.0.0.9;proto=http;host=\"x.test\"\r\n\
             X-Real-IP: 127.0.0.9\r\n"
        );
        assert!(head.keep_alive && head.http11 && head.idempotent && !head.is_head);
        assert_eq!(head.body, Framing::None);
        assert_eq!(head.head_len, 48);
    }

    #[test]
    fn partial_heads_ask_for_more_and_oversized_ones_are_refused() {
        let mut out = Vec::new();
        let partial = b"GET / HTTP/1.1\r\nHost: a\r\n";
        assert_eq!(
            parse_request(partial, LIMITS, &client(), &mut out),
            Ok(None)
        );
        let small = Limits {
            max_headers: 100,
            max_header_bytes: 20,
            key: None,
            sticky: None,
            upgrade: &[],
            routes: None,
            edits: None,
        };
        assert_eq!(
            parse_request(partial, small, &client(), &mut out)
                .unwrap_err()
                .status,
            431
        );
        assert_eq!(
            parse_request(
                b"GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                small,
                &client(),
                &mut out
            )
            .unwrap_err()
            .status,
            414
        );
        let few = Limits {
            max_headers: 1,
            max_header_bytes: 1024,
            key: None,
            sticky: None,
            upgrade: &[],
            routes: None,
            edits: None,
        };
        let two = b"GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n\r\n";
        assert_eq!(
            parse_request(two, few, &client(), &mut out)
                .unwrap_err()
                .status,
            431
        );
    }

    #[test]
    fn syntax_and_version_rules() {
        assert_eq!(status("GET / HTTP/1.1\r\nHost : a\r\n\r\n"), 400);
        assert_eq!(
            status("GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n"),
            400
        );
        assert_eq!(
            status("GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n"),
            400
        );
        assert_eq!(status("GE\x01T / HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/2.0\r\nHost: a\r\n\r\n"), 505);
        assert_eq!(status("GET /  HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.10\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n"), 405);
        assert_eq!(status("TRACE / HTTP/1.1\r\nHost: a\r\n\r\n"), 405);
        // Issue 26: CONNECT in any form, and CONNECT or TRACE in another case.
        for connect in [
            "CONNECT / HTTP/1.1\r\nHost: evil:443\r\n\r\n",
            "CONNECT /x HTTP/1.1\r\nHost: evil:443\r\n\r\n",
            "CONNECT http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "CONNECT / HTTP/1.0\r\n\r\n",
        ] {
            assert_eq!(status(connect), 405, "{connect:?}");
        }
        for other_case in [
            "connect / HTTP/1.1\r\nHost: a\r\n\r\n",
            "Connect evil:443 HTTP/1.1\r\nHost: a\r\n\r\n",
            "trace / HTTP/1.1\r\nHost: a\r\n\r\n",
        ] {
            assert_eq!(status(other_case), 400, "{other_case:?}");
        }
        assert_eq!(status("GET a/b HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"), 200);
    }

    #[test]
    fn content_length_rules() {
        for bad in [
            "abc",
            "-1",
            "+5",
            "1 2",
            "",
            "5, 6",
            "5, 5",
            "99999999999999999999",
        ] {
            let raw = format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {bad}\r\n\r\n");
            assert_eq!(status(&raw), 400, "Content-Length: {bad:?}");
        }
        let (head, _) =
            request("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n")
                .unwrap();
        assert_eq!(head.body, Framing::Length(5));
        assert_eq!(
            status("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
            400
        );
    }

    #[test]
    fn transfer_encoding_rules() {
        let (head, out) =
            request("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
        assert_eq!(head.body, Framing::Chunked);
        assert!(!out.to_ascii_lowercase().contains("transfer-encoding"));
        let both =
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(status(both), 400);
        assert_eq!(
            status("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n"),
            400
        );
        assert_eq!(
            status("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
            501
        );
        assert_eq!(
            status("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"),
            400
        );
        assert_eq!(
            status(
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
            ),
            400
        );
        assert_eq!(
            status("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
            400
        );
    }

    #[test]
    fn host_rules_and_absolute_form() {
        assert_eq!(status("GET / HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a b\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: \r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a:99999x\r\n\r\n"), 400);
        let (head, out) =
            request("GET http://b.test:81/x?y HTTP/1.1\r\nHost: other\r\n\r\n").unwrap();
        assert!(
            out.starts_with("GET /x?y HTTP/1.1\r\nHost: b.test:81\r\n"),
            "{out}"
        );
        assert!(head.has_host);
        let (_, out) = request("GET http://b.test HTTP/1.1\r\nHost: b.test\r\n\r\n").unwrap();
        assert!(out.starts_with("GET / HTTP/1.1\r\n"), "{out}");
        let (_, out) = request("GET http://b.test?a=1 HTTP/1.1\r\n\r\n").unwrap();
        assert!(out.starts_with("GET /?a=1 HTTP/1.1\r\n"), "{out}");
        assert_eq!(
            status("GET http://u@b.test/ HTTP/1.1\r\nHost: b\r\n\r\n"),
            400
        );
        let (head, _) = request("GET / HTTP/1.0\r\n\r\n").unwrap();
        assert!(!head.has_host && !head.keep_alive);
    }

    #[test]
    fn keep_alive_and_expect() {
        let (head, _) = request("GET / HTTP/1.1\r\nHost: a\r\nConnection: Close\r\n\r\n").unwrap();
        assert!(!head.keep_alive);
        let (head, _) = request("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").unwrap();
        assert!(head.keep_alive);
        let (head, out) = request(
            "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
        )
        .unwrap();
        assert!(head.expect_continue && head.idempotent);
        assert!(!out.to_ascii_lowercase().contains("expect"), "{out}");
    }

    #[test]
    fn upgrade_passes_only_when_allowed_and_named_by_connection() {
        let allowed = ["websocket".to_owned()];
        let limits = Limits {
            upgrade: &allowed,
            routes: None,
            edits: None,
            ..LIMITS
        };
        let parse = |raw: &str, limits: Limits<'_>| {
            let mut out = Vec::new();
            let head = parse_request(raw.as_bytes(), limits, &client(), &mut out)
                .unwrap()
                .unwrap();
            (head.upgrade, String::from_utf8(out).unwrap())
        };
        let ws = "GET /chat HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n";
        let (upgrade, out) = parse(ws, limits);
        assert!(upgrade);
        assert!(
            out.contains("Upgrade: websocket\r\nConnection: upgrade\r\n"),
            "{out}"
        );
        assert!(out.contains("Sec-WebSocket-Key: k\r\n"), "{out}");
        assert!(!out.contains("keep-alive"), "{out}");
        // Not allowed on this listener: removed, as any hop-by-hop header.
        let (upgrade, out) = parse(ws, LIMITS);
        assert!(!upgrade);
        assert!(!out.to_ascii_lowercase().contains("upgrade"), "{out}");
        // Only the allowed offers are passed on; none allowed is no upgrade.
        let (upgrade, out) = parse(
            &ws.replace("Upgrade: websocket", "Upgrade: h2c, WebSocket/13"),
            limits,
        );
        assert!(upgrade);
        assert!(out.contains("Upgrade: WebSocket/13\r\n"), "{out}");
        let (upgrade, out) = parse(&ws.replace("Upgrade: websocket", "Upgrade: h2c"), limits);
        assert!(!upgrade, "{out}");
        // `Upgrade` that `Connection` does not name, a request with a body, HTTP/1.0.
        let (upgrade, _) = parse(&ws.replace("keep-alive, Upgrade", "keep-alive"), limits);
        assert!(!upgrade);
        let (upgrade, _) = parse(
            &ws.replace("\r\n\r\n", "\r\nContent-Length: 1\r\n\r\n"),
            limits,
        );
        assert!(!upgrade);
        let (upgrade, _) = parse(
            &ws.replace("\r\n\r\n", "\r\nContent-Length: 0\r\n\r\n"),
            limits,
        );
        assert!(upgrade, "an empty body is no body");
        let (upgrade, _) = parse(&ws.replace("HTTP/1.1", "HTTP/1.0"), limits);
        assert!(!upgrade);
    }
}
