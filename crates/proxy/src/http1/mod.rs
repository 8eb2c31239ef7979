//! HTTP/1.1 messages as the proxy reads and writes them, on `httparse`.
//!
//! A request head is parsed, checked against the rules of RFC 9112 that keep a proxy and the
//! servers behind it agreeing on where a message ends, and rewritten in the same pass into the
//! head the backend gets: hop-by-hop headers gone, one `Host`, the forwarding headers added,
//! framing left for the sender to add once the body is known. A response head is parsed and
//! rewritten the same way for the client. Nothing is allocated per message: heads are written
//! into buffers the connection reuses.
//!
//! The rules enforced on requests (each has a test, here or in `tests/http1_rules.rs`):
//!
//! * request line and header syntax as httparse checks it (tokens, no whitespace before the
//!   colon, no obs-fold, no control characters): 400; versions other than 1.0 and 1.1: 505;
//! * more than `max_headers` header lines, or a head over `max_header_bytes`: 431 (a request
//!   line alone over the limit: 414);
//! * `Content-Length` that is not a decimal number, or several that disagree: 400;
//! * `Transfer-Encoding` together with `Content-Length`, in an HTTP/1.0 request, or with
//!   `chunked` anywhere but last: 400; a final coding other than `chunked`: 501;
//! * `Host`: missing in HTTP/1.1, repeated, or not a valid `host[:port]`: 400;
//! * `CONNECT`: 405 (this is a reverse proxy, not a tunnel).
//!
//! On responses: an invalid status line or header, or a bad `Content-Length`, makes the
//! response invalid (the caller answers 502); `Transfer-Encoding` wins over `Content-Length`.

use std::mem::MaybeUninit;
use std::net::IpAddr;
use std::ops::Range;

use crate::settings::HashKey;

/// Upper bound of `max_headers`: header slots live on the stack while a head is parsed.
pub const MAX_HEADERS_LIMIT: usize = 256;

/// How the length of a message body is known (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the sender closes the connection (responses only).
    Close,
}

/// A request refused before it reaches a backend: the status and the text of our answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reject {
    pub(crate) status: u16,
    pub(crate) text: &'static str,
}

pub(crate) const fn reject(status: u16, text: &'static str) -> Reject {
    Reject { status, text }
}

pub(crate) const BAD_SYNTAX: Reject =
    reject(400, "400 Bad Request: malformed request line or header\n");
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

/// Limits on a request head.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits<'a> {
    pub(crate) max_headers: usize,
    pub(crate) max_header_bytes: usize,
    /// The hash key to find in the request, if the upstream hashes a header, cookie or URI.
    pub(crate) key: Option<&'a HashKey>,
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
    /// Where the method and the request target are in the input (for the access log).
    pub(crate) method: Range<usize>,
    pub(crate) target: Range<usize>,
    /// Where the hash key asked for in [`Limits::key`] is in the input; empty when the request
    /// has no such header or cookie.
    pub(crate) key: Range<usize>,
}

/// Headers that describe one connection, never passed on (RFC 9110 §7.6.1, plus the older
/// `Keep-Alive` and `Proxy-Connection`). `Upgrade` too: connections are not tunnelled.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn is_hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// Comma-separated list elements of a header value, trimmed, empty ones skipped.
fn elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(|e| e.trim_ascii())
        .filter(|e| !e.is_empty())
}

/// The values of every header called `name`, in order.
fn values<'b>(
    headers: &[httparse::Header<'b>],
    name: &'static str,
) -> impl Iterator<Item = &'b [u8]> {
    headers
        .iter()
        .filter(move |h| h.name.eq_ignore_ascii_case(name))
        .map(|h| h.value)
}

/// What the `Connection` headers of a message say.
#[derive(Debug, Clone, Copy, Default)]
struct ConnectionTokens {
    present: bool,
    close: bool,
    keep_alive: bool,
}

fn connection_tokens(headers: &[httparse::Header<'_>]) -> ConnectionTokens {
    let mut tokens = ConnectionTokens::default();
    for token in values(headers, "connection").flat_map(|v| {
        tokens.present = true;
        elements(v)
    }) {
        tokens.close |= token.eq_ignore_ascii_case(b"close");
        tokens.keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
    }
    tokens
}

/// Whether a `Connection` header among `headers` names `name` (making it hop-by-hop).
fn named_by_connection(headers: &[httparse::Header<'_>], name: &str) -> bool {
    values(headers, "connection")
        .flat_map(elements)
        .any(|token| token.eq_ignore_ascii_case(name.as_bytes()))
}

/// The value of `Content-Length` headers: one decimal number, in one header or repeated
/// identically in several; `Err` if any is not a number or two disagree (RFC 9112 §6.3).
fn content_length<'a>(values: impl Iterator<Item = &'a [u8]>) -> Result<Option<u64>, ()> {
    let mut length = None;
    for value in values {
        let value = value.trim_ascii();
        // 19 digits always fit in a u64. A list (`5, 5`) is refused, as hyper and nginx do.
        if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
            return Err(());
        }
        let n = value.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
        if length.is_some_and(|l| l != n) {
            return Err(());
        }
        length = Some(n);
    }
    Ok(length)
}

/// What the `Transfer-Encoding` headers of a message say, all of them taken as one list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codings {
    /// Just `chunked`.
    Chunked,
    /// `chunked` last, after codings this proxy does not decode (`gzip, chunked`).
    ChunkedAfterOthers,
    /// The final coding is not `chunked` (or the list is empty).
    NotChunkedLast,
    /// `chunked` before another coding, or twice: chunked must be applied once, last.
    ChunkedNotLast,
}

fn codings<'a>(values: impl Iterator<Item = &'a [u8]>) -> Codings {
    let (mut count, mut last_chunked) = (0, false);
    for coding in values.flat_map(elements) {
        if last_chunked {
            return Codings::ChunkedNotLast;
        }
        last_chunked = coding.eq_ignore_ascii_case(b"chunked");
        count += 1;
    }
    match (last_chunked, count) {
        (false, _) => Codings::NotChunkedLast,
        (true, 1) => Codings::Chunked,
        (true, _) => Codings::ChunkedAfterOthers,
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

/// Whether `host` is a valid `Host` value: `uri-host [ ":" port ]` (RFC 9110 §7.2), with
/// `uri-host` an IP literal in brackets or a reg-name / IPv4 address.
pub(crate) fn valid_host(host: &[u8]) -> bool {
    let (name, port) = if let Some(rest) = host.strip_prefix(b"[") {
        let Some(end) = rest.iter().position(|&b| b == b']') else {
            return false;
        };
        let literal = &rest[..end];
        if literal.is_empty()
            || !literal
                .iter()
                .all(|&b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.' | b'v' | b'V'))
        {
            return false;
        }
        match &rest[end + 1..] {
            [] => return true,
            [b':', port @ ..] => (&b"x"[..], port),
            _ => return false,
        }
    } else {
        match host.iter().rposition(|&b| b == b':') {
            Some(colon) => (&host[..colon], &host[colon + 1..]),
            None => (host, &b""[..]),
        }
    };
    let reg_name = |b: &u8| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'%'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
            )
    };
    !name.is_empty()
        && name.iter().all(reg_name)
        && port.len() <= 5
        && port.iter().all(u8::is_ascii_digit)
}

/// An absolute-form target (`http://host[:port]/path?query`): its authority and its
/// origin-form rest (`/` when empty).
fn split_absolute(target: &str) -> Option<(&str, &str)> {
    let scheme_end = target.find("://")?;
    let scheme = &target[..scheme_end];
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    let rest = &target[scheme_end + 3..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains('@') || !valid_host(authority.as_bytes()) {
        return None;
    }
    Some((authority, path))
}

fn range_in(buf: &[u8], part: &str) -> Range<usize> {
    bytes_in(buf, part.as_bytes())
}

/// Where `part`, a slice of `buf`, lies in it.
fn bytes_in(buf: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    start..start + part.len()
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
    let head_len = match req.parse_with_uninit_headers(buf, slots) {
        Ok(httparse::Status::Complete(n)) if n <= limits.max_header_bytes => n,
        Ok(httparse::Status::Complete(_)) => return Err(HEAD_TOO_LARGE),
        Ok(httparse::Status::Partial) if buf.len() < limits.max_header_bytes => return Ok(None),
        Ok(httparse::Status::Partial) => {
            let line_done = buf.contains(&b'\n');
            return Err(if line_done {
                HEAD_TOO_LARGE
            } else {
                URI_TOO_LONG
            });
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HEAD_TOO_LARGE),
        Err(httparse::Error::Version) => return Err(version_error(buf)),
        Err(_) => return Err(BAD_SYNTAX),
    };
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(BAD_SYNTAX);
    };
    let http11 = version == 1;
    let headers: &[httparse::Header<'_>] = req.headers;

    // The target: origin form, `*` for OPTIONS, or absolute form (RFC 9112 §3.2).
    let (authority, path) = if target.starts_with('/') || (target == "*" && method == "OPTIONS") {
        (None, target)
    } else if method == "CONNECT" {
        return Err(CONNECT);
    } else {
        let (authority, path) = split_absolute(target).ok_or(BAD_TARGET)?;
        (Some(authority), path)
    };

    let mut host: Option<&[u8]> = None;
    let mut hosts = 0;
    for value in values(headers, "host") {
        hosts += 1;
        host = Some(value);
    }
    let has_te = values(headers, "transfer-encoding").next().is_some();
    let connection = connection_tokens(headers);
    let expect_continue =
        values(headers, "expect").any(|v| v.trim_ascii().eq_ignore_ascii_case(b"100-continue"));
    let length = content_length(values(headers, "content-length")).map_err(|()| BAD_LENGTH)?;
    let body = if has_te {
        if !http11 {
            return Err(BAD_CODING);
        }
        if length.is_some() {
            return Err(LENGTH_AND_CHUNKED);
        }
        let te = values(headers, "transfer-encoding");
        // RFC 9112 §6.3: a final coding other than chunked leaves the length unknown (400);
        // §6.1: a coding the server does not understand gets 501.
        match codings(te) {
            Codings::Chunked => Framing::Chunked,
            Codings::ChunkedAfterOthers => return Err(UNKNOWN_CODING),
            Codings::NotChunkedLast | Codings::ChunkedNotLast => return Err(BAD_CODING),
        }
    } else {
        length.map_or(Framing::None, Framing::Length)
    };
    if hosts > 1 {
        return Err(TWO_HOSTS);
    }
    if let Some(h) = host
        && !valid_host(h)
    {
        return Err(BAD_HOST);
    }
    // Absolute form: the target's authority wins over Host (RFC 9112 §3.2.2).
    let host = authority.map(str::as_bytes).or(host);
    if host.is_none() && http11 {
        return Err(NO_HOST);
    }

    // The backend's head.
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(if path.is_empty() { "/" } else { path }.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(host) = host {
        put_header(out, "Host", host);
    }
    let mut prior_xff = false;
    let mut prior_forwarded = false;
    for h in headers {
        let name = h.name;
        if name.eq_ignore_ascii_case("x-forwarded-for") {
            prior_xff = true;
            continue;
        }
        if name.eq_ignore_ascii_case("forwarded") {
            prior_forwarded = true;
            continue;
        }
        if is_hop_by_hop(name)
            || name.eq_ignore_ascii_case("host")
            || name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("expect")
            || name.eq_ignore_ascii_case("x-forwarded-proto")
            || (connection.present && named_by_connection(headers, name))
        {
            continue;
        }
        put_header(out, name, h.value);
    }
    // Forwarding headers: what came before is the client's claim, passed on; our own
    // observation is appended.
    out.extend_from_slice(b"X-Forwarded-For: ");
    if prior_xff {
        append_values(out, headers, "x-forwarded-for");
    }
    out.extend_from_slice(client.ip.as_bytes());
    out.extend_from_slice(b"\r\nX-Forwarded-Proto: http\r\nForwarded: ");
    if prior_forwarded {
        append_values(out, headers, "forwarded");
    }
    out.extend_from_slice(client.forwarded_for.as_bytes());
    out.extend_from_slice(b";proto=http");
    if let Some(host) = host {
        out.extend_from_slice(b";host=\"");
        out.extend_from_slice(host);
        out.push(b'"');
    }
    out.extend_from_slice(b"\r\n");

    Ok(Some(RequestHead {
        head_len,
        http11,
        keep_alive: !connection.close && (http11 || connection.keep_alive),
        body,
        expect_continue,
        idempotent: idempotent(method),
        is_head: method == "HEAD",
        has_host: host.is_some(),
        method: range_in(buf, method),
        target: range_in(buf, target),
        key: match limits.key {
            None | Some(HashKey::ClientIp) => 0..0,
            Some(HashKey::Uri) => range_in(buf, path),
            Some(HashKey::Header(name)) => headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map_or(0..0, |h| bytes_in(buf, h.value)),
            Some(HashKey::Cookie(name)) => {
                cookie(headers, name.as_bytes()).map_or(0..0, |v| bytes_in(buf, v))
            }
        },
    }))
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

/// The client's address as the forwarding headers write it, formatted once per connection.
#[derive(Debug, Clone)]
pub(crate) struct ClientAddr {
    /// For `X-Forwarded-For`: `192.0.2.1`, `2001:db8::1` (IPv4-mapped addresses as IPv4).
    ip: String,
    /// The `Forwarded` element (RFC 7239 §4): `for=192.0.2.1`, `for="[2001:db8::1]"`.
    forwarded_for: String,
}

impl ClientAddr {
    /// The address as text: `192.0.2.1`, `2001:db8::1`.
    pub(crate) fn ip(&self) -> &str {
        &self.ip
    }

    pub(crate) fn new(ip: IpAddr) -> ClientAddr {
        let ip = ip.to_canonical();
        ClientAddr {
            ip: ip.to_string(),
            forwarded_for: match ip {
                IpAddr::V4(v4) => format!("for={v4}"),
                IpAddr::V6(v6) => format!("for=\"[{v6}]\""),
            },
        }
    }
}

/// Appends `n` in decimal.
fn put_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

fn put_content_length(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(b"Content-Length: ");
    put_decimal(out, n);
    out.extend_from_slice(b"\r\n");
}

/// Every value of header `name`, trimmed, each followed by `, `.
fn append_values(out: &mut Vec<u8>, headers: &[httparse::Header<'_>], name: &'static str) {
    for value in values(headers, name) {
        let value = value.trim_ascii();
        if !value.is_empty() {
            out.extend_from_slice(value);
            out.extend_from_slice(b", ");
        }
    }
}

fn put_header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Ends a request head for the backend: its `Content-Length` when the client sent a body
/// (chunked bodies are forwarded de-chunked, with their length), and the blank line.
pub(crate) fn finish_request_head(out: &mut Vec<u8>, body: Option<usize>) {
    if let Some(n) = body {
        put_content_length(out, n as u64);
    }
    out.extend_from_slice(b"\r\n");
}

/// What the client asked of the response's connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientSide {
    pub(crate) http11: bool,
    /// The client and the proxy both want the connection kept open.
    pub(crate) keep_alive: bool,
    pub(crate) is_head: bool,
}

/// A parsed backend response.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ResponseHead {
    /// A 1xx answer before the real one: skip these bytes and read on.
    Interim(usize),
    Final(FinalResponse),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct FinalResponse {
    pub(crate) head_len: usize,
    pub(crate) status: u16,
    /// How the body arrives from the backend.
    pub(crate) framing: Framing,
    /// The backend connection may carry another request afterwards.
    pub(crate) backend_keep_alive: bool,
    /// The client connection stays open after this response.
    pub(crate) client_keep_alive: bool,
    /// The body is sent to the client de-chunked (an HTTP/1.0 client cannot take chunked).
    pub(crate) dechunk: bool,
}

/// Response header slots: backends are trusted further than clients, but not without bound.
const RESPONSE_MAX_HEADERS: usize = 128;

/// Parses the response head at the start of `buf`; `Ok(None)`: incomplete. On a final
/// response, the head the client gets is written to `out` (cleared first), blank line
/// included. `Err` says what is wrong with the response.
pub(crate) fn parse_response(
    buf: &[u8],
    client: ClientSide,
    out: &mut Vec<u8>,
) -> Result<Option<ResponseHead>, &'static str> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; RESPONSE_MAX_HEADERS];
    let mut res = httparse::Response::new(&mut []);
    let config = httparse::ParserConfig::default();
    let head_len = match config.parse_response_with_uninit_headers(&mut res, buf, &mut slots) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err("too many header lines"),
        Err(_) => return Err("malformed status line or header"),
    };
    let (Some(version), Some(status), Some(reason)) = (res.version, res.code, res.reason) else {
        return Err("malformed status line");
    };
    if status == 101 {
        return Err("101 Switching Protocols, but no upgrade was asked for");
    }
    if (100..200).contains(&status) {
        return Ok(Some(ResponseHead::Interim(head_len)));
    }
    let headers: &[httparse::Header<'_>] = res.headers;
    let has_te = values(headers, "transfer-encoding").next().is_some();
    let connection = connection_tokens(headers);
    let no_body = client.is_head || status == 204 || status == 304;
    let mut other_codings = false;
    let framing = if no_body {
        Framing::None
    } else if has_te {
        match codings(values(headers, "transfer-encoding")) {
            Codings::Chunked => Framing::Chunked,
            // Other codings before chunked travel with the body, which stays encoded; an
            // HTTP/1.0 client could not be told about them.
            Codings::ChunkedAfterOthers if client.http11 => {
                other_codings = true;
                Framing::Chunked
            }
            Codings::ChunkedAfterOthers => {
                return Err("transfer codings besides chunked, for an HTTP/1.0 client");
            }
            // Not chunked at the end: the body would run to the end of the connection, still
            // coded, and the coding could not be passed on without the framing: refused, as
            // recent nginx does.
            Codings::NotChunkedLast => {
                return Err("a transfer coding other than chunked, without chunked");
            }
            Codings::ChunkedNotLast => {
                return Err("chunked applied twice or not last in Transfer-Encoding");
            }
        }
    } else {
        match content_length(values(headers, "content-length")) {
            Ok(Some(n)) => Framing::Length(n),
            Ok(None) => Framing::Close,
            Err(()) => return Err("invalid or conflicting Content-Length"),
        }
    };
    // Transfer-Encoding in an HTTP/1.0 response, or beside Content-Length, is faulty framing:
    // the connection is not reused (RFC 9112 §6.1, §6.3).
    let faulty_framing =
        has_te && (version == 0 || values(headers, "content-length").next().is_some());
    let backend_keep_alive = framing != Framing::Close
        && !faulty_framing
        && !connection.close
        && (version == 1 || connection.keep_alive);
    let dechunk = framing == Framing::Chunked && !client.http11;
    let client_keep_alive = client.keep_alive && framing != Framing::Close && !dechunk;

    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    put_decimal(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
    for h in headers {
        let name = h.name;
        let framing_header = name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("transfer-encoding");
        // A response without a body keeps its Content-Length (for HEAD it is the length a
        // GET would have had); otherwise framing is written below, from what was parsed.
        if (framing_header && !(no_body && name.eq_ignore_ascii_case("content-length")))
            || is_hop_by_hop(name)
            || (connection.present && named_by_connection(headers, name))
        {
            continue;
        }
        put_header(out, name, h.value);
    }
    match framing {
        Framing::Length(n) => {
            put_content_length(out, n);
        }
        Framing::Chunked if other_codings => {
            out.extend_from_slice(b"Transfer-Encoding: ");
            append_values(out, headers, "transfer-encoding");
            out.truncate(out.len() - 2);
            out.extend_from_slice(b"\r\n");
        }
        Framing::Chunked if !dechunk => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        _ => {}
    }
    if !client_keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if !client.http11 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(Some(ResponseHead::Final(FinalResponse {
        head_len,
        status,
        framing,
        backend_keep_alive,
        client_keep_alive,
        dechunk,
    })))
}

/// Our own short answer. An HTTP/1.0 client kept alive is told so.
pub(crate) fn local_response(out: &mut Vec<u8>, reject: Reject, keep_alive: bool, http11: bool) {
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    put_decimal(out, u64::from(reject.status));
    out.push(b' ');
    out.extend_from_slice(reason(reject.status).as_bytes());
    out.extend_from_slice(b"\r\nContent-Type: text/plain; charset=utf-8\r\n");
    put_content_length(out, reject.text.len() as u64);
    if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if !http11 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(reject.text.as_bytes());
}

fn reason(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// Why a chunked body is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ChunkError {
    #[error("invalid chunk size line")]
    Size,
    #[error("chunk size too large")]
    Overflow,
    #[error("chunk data not followed by CRLF")]
    DataEnd,
    #[error("chunk extension or trailer section too long")]
    TooLong,
    #[error("invalid trailer field")]
    Trailer,
}

/// RFC 9110 §5.6.2.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    Size {
        digits: u8,
    },
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerStart,
    /// In a trailer field's name.
    TrailerName,
    /// In a trailer field's value.
    Trailer,
    TrailerLf,
    FinalLf,
    Done,
}

/// An incremental chunked-body decoder (RFC 9112 §7.1): feeds on whatever bytes have arrived,
/// reports the data and how much of the input belongs to the body, and where it ends.
/// Line endings must be CRLF.
#[derive(Debug, Clone)]
pub(crate) struct Chunked {
    state: ChunkState,
    /// Data bytes left in the current chunk.
    remaining: u64,
    /// Bytes of chunk extensions or trailers seen on the current line or section.
    meta: usize,
}

/// Bound on chunk extensions per line and on the trailer section.
const CHUNK_META_LIMIT: usize = 16 * 1024;

impl Default for Chunked {
    fn default() -> Self {
        Chunked {
            state: ChunkState::Size { digits: 0 },
            remaining: 0,
            meta: 0,
        }
    }
}

impl Chunked {
    pub(crate) fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Decodes from `input`, passing each run of data to `on_data`; returns the bytes of
    /// `input` consumed (all of them unless the body ended inside it).
    pub(crate) fn advance(
        &mut self,
        input: &[u8],
        mut on_data: impl FnMut(&[u8]),
    ) -> Result<usize, ChunkError> {
        use ChunkState::*;
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                Size { digits } => match (b as char).to_digit(16) {
                    Some(d) => {
                        if self.remaining > u64::MAX >> 4 {
                            return Err(ChunkError::Overflow);
                        }
                        self.remaining = self.remaining << 4 | u64::from(d);
                        self.state = Size {
                            digits: digits.saturating_add(1),
                        };
                    }
                    None if digits == 0 => return Err(ChunkError::Size),
                    None => match b {
                        b';' | b' ' | b'\t' => {
                            self.meta = 0;
                            self.state = Extension;
                        }
                        b'\r' => self.state = SizeLf,
                        _ => return Err(ChunkError::Size),
                    },
                },
                Extension => match b {
                    b'\r' => self.state = SizeLf,
                    b'\n' => return Err(ChunkError::Size),
                    _ => {
                        self.meta += 1;
                        if self.meta > CHUNK_META_LIMIT {
                            return Err(ChunkError::TooLong);
                        }
                    }
                },
                SizeLf => {
                    if b != b'\n' {
                        return Err(ChunkError::Size);
                    }
                    self.state = if self.remaining == 0 {
                        self.meta = 0;
                        TrailerStart
                    } else {
                        Data
                    };
                }
                Data => {
                    let take = (input.len() - i)
                        .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                    on_data(&input[i..i + take]);
                    self.remaining -= take as u64;
                    i += take;
                    if self.remaining == 0 {
                        self.state = DataCr;
                    }
                    continue;
                }
                DataCr => {
                    if b != b'\r' {
                        return Err(ChunkError::DataEnd);
                    }
                    self.state = DataLf;
                }
                DataLf => {
                    if b != b'\n' {
                        return Err(ChunkError::DataEnd);
                    }
                    self.state = Size { digits: 0 };
                }
                TrailerStart if b == b'\r' => self.state = FinalLf,
                // A field line: `token ":" value` (no obs-fold, no empty name).
                TrailerStart if is_tchar(b) => self.state = TrailerName,
                TrailerStart => return Err(ChunkError::Trailer),
                TrailerName | Trailer => {
                    self.meta += 1;
                    if self.meta > CHUNK_META_LIMIT {
                        return Err(ChunkError::TooLong);
                    }
                    match (self.state, b) {
                        (TrailerName, b':') => self.state = Trailer,
                        (TrailerName, b) if is_tchar(b) => {}
                        (Trailer, b'\r') => self.state = TrailerLf,
                        (Trailer, b) if b == b'\t' || !b.is_ascii_control() => {}
                        _ => return Err(ChunkError::Trailer),
                    }
                }
                TrailerLf => {
                    if b != b'\n' {
                        return Err(ChunkError::Size);
                    }
                    self.state = TrailerStart;
                }
                FinalLf => {
                    if b != b'\n' {
                        return Err(ChunkError::Size);
                    }
                    self.state = Done;
                    return Ok(i + 1);
                }
                Done => return Ok(i),
            }
            i += 1;
        }
        Ok(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits<'static> = Limits {
        max_headers: 100,
        max_header_bytes: 16 * 1024,
        key: None,
    };
    fn client() -> ClientAddr {
        ClientAddr::new(IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 9)))
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
    fn hash_keys_parse_and_print_as_configured() {
        for text in ["client_ip", "uri", "header:X-User", "cookie:sid"] {
            assert_eq!(text.parse::<HashKey>().unwrap().to_string(), text);
        }
        for bad in ["", "header:", "cookie:a=b", "ip", "header"] {
            assert!(bad.parse::<HashKey>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn rewrites_a_simple_request() {
        let (head, out) =
            request("GET /a?b HTTP/1.1\r\nHost: x.test\r\nAccept: */*\r\n\r\n").unwrap();
        assert_eq!(
            out,
            "GET /a?b HTTP/1.1\r\nHost: x.test\r\nAccept: */*\r\nX-Forwarded-For: 127.0.0.9\r\n\
             X-Forwarded-Proto: http\r\nForwarded: for=127.0.0.9;proto=http;host=\"x.test\"\r\n"
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
        for good in [
            "a.test",
            "a.test:8080",
            "[::1]:80",
            "[2001:db8::1]",
            "10.0.0.1:1",
        ] {
            assert!(valid_host(good.as_bytes()), "{good}");
        }
        let (head, out) =
            request("GET http://b.test:81/x?y HTTP/1.1\r\nHost: other\r\n\r\n").unwrap();
        assert!(
            out.starts_with("GET /x?y HTTP/1.1\r\nHost: b.test:81\r\n"),
            "{out}"
        );
        assert!(head.has_host);
        let (_, out) = request("GET http://b.test HTTP/1.1\r\nHost: b.test\r\n\r\n").unwrap();
        assert!(out.starts_with("GET / HTTP/1.1\r\n"), "{out}");
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

    fn response(raw: &str, client: ClientSide) -> Result<(FinalResponse, String), &'static str> {
        let mut out = Vec::new();
        match parse_response(raw.as_bytes(), client, &mut out)?.expect("complete") {
            ResponseHead::Final(f) => Ok((f, String::from_utf8(out).unwrap())),
            ResponseHead::Interim(n) => panic!("interim {n}"),
        }
    }

    const KEEP11: ClientSide = ClientSide {
        http11: true,
        keep_alive: true,
        is_head: false,
    };

    #[test]
    fn response_framing() {
        let (r, out) = response(
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nKeep-Alive: x\r\n\r\n",
            KEEP11,
        )
        .unwrap();
        assert_eq!(r.framing, Framing::Length(3));
        assert!(r.backend_keep_alive && r.client_keep_alive);
        assert_eq!(out, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n");

        let (r, out) = response(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            KEEP11,
        )
        .unwrap();
        assert_eq!(r.framing, Framing::Chunked);
        assert_eq!(out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");

        let (r, out) = response("HTTP/1.1 200 OK\r\n\r\n", KEEP11).unwrap();
        assert_eq!(r.framing, Framing::Close);
        assert!(!r.backend_keep_alive && !r.client_keep_alive);
        assert_eq!(out, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");

        let head = ClientSide {
            is_head: true,
            ..KEEP11
        };
        let (r, out) = response("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", head).unwrap();
        assert_eq!(r.framing, Framing::None);
        assert_eq!(out, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n");

        let (r, _) = response(
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
            KEEP11,
        )
        .unwrap();
        assert_eq!(r.framing, Framing::None);

        let old = ClientSide {
            http11: false,
            keep_alive: true,
            is_head: false,
        };
        let (r, out) =
            response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", old).unwrap();
        assert!(r.dechunk && !r.client_keep_alive);
        assert_eq!(out, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
        let (_, out) = response("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", old).unwrap();
        assert_eq!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n"
        );

        assert!(response("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", KEEP11).is_err());
        let mut out = Vec::new();
        assert!(matches!(
            parse_response(
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n",
                KEEP11,
                &mut out
            ),
            Ok(Some(ResponseHead::Interim(25)))
        ));
    }

    fn dechunk(input: &[u8]) -> Result<(Vec<u8>, usize, bool), ChunkError> {
        let mut c = Chunked::default();
        let mut data = Vec::new();
        let used = c.advance(input, |d| data.extend_from_slice(d))?;
        Ok((data, used, c.is_done()))
    }

    #[test]
    fn chunked_bodies() {
        let body = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let (data, used, done) = dechunk(body).unwrap();
        assert_eq!(data, b"hello world");
        assert!(done);
        assert_eq!(used, body.len() - 4);

        // Byte by byte gives the same.
        let mut c = Chunked::default();
        let mut data = Vec::new();
        for b in &body[..body.len() - 4] {
            assert_eq!(
                c.advance(std::slice::from_ref(b), |d| data.extend_from_slice(d)),
                Ok(1)
            );
        }
        assert!(c.is_done());
        assert_eq!(data, b"hello world");

        assert_eq!(dechunk(b"zz\r\n").unwrap_err(), ChunkError::Size);
        assert_eq!(
            dechunk(b"ffffffffffffffffff\r\n").unwrap_err(),
            ChunkError::Overflow
        );
        assert_eq!(dechunk(b"3\r\nabcX").unwrap_err(), ChunkError::DataEnd);
        assert_eq!(dechunk(b"3\nabc").unwrap_err(), ChunkError::Size);
        assert_eq!(dechunk(b"\r\n").unwrap_err(), ChunkError::Size);
        assert_eq!(
            dechunk(b"0\r\nX(T: 1\r\n\r\n").unwrap_err(),
            ChunkError::Trailer
        );
        assert_eq!(
            dechunk(b"0\r\n folded\r\n\r\n").unwrap_err(),
            ChunkError::Trailer
        );
        assert_eq!(
            dechunk(b"0\r\nNoColon\r\n\r\n").unwrap_err(),
            ChunkError::Trailer
        );
        let (_, _, done) = dechunk(b"3\r\nab").unwrap();
        assert!(!done);
    }
}
