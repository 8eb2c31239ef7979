//! HTTP/1.1 messages as the proxy reads and writes them, on `httparse`.
//!
//! A request head is parsed, checked against the rules of RFC 9112 that keep a proxy and the
//! servers behind it agreeing on where a message ends, and rewritten in the same pass into the
//! head the backend gets: hop-by-hop headers gone, one `Host`, the forwarding headers set,
//! framing left for the sender to add once the body is known. A response head is parsed and
//! rewritten the same way for the client. Nothing is allocated per message: heads are written
//! into buffers the connection reuses.
//!
//! # Layout
//!
//! * this file: what both directions share: how a body is delimited ([`Framing`], RFC 9112
//!   §6.3), a refusal and its answer ([`Reject`]), and the header-list helpers (list elements
//!   of RFC 9110 §5.6.1, `Connection` and hop-by-hop headers of §7.6.1, `Content-Length` of
//!   §8.6 and RFC 9112 §6.3, transfer codings of RFC 9112 §6.1, writing header lines);
//! * `request`: a request head parsed, checked and rewritten for the backend; the rules it
//!   enforces are listed there;
//! * `target`: the request target's forms (RFC 9112 §3.2) and the `Host` syntax (RFC 9110
//!   §7.2), and the origin-form path the backend gets;
//! * `forwarding`: the forwarding headers (`X-Forwarded-For`, `Forwarded` of RFC 7239,
//!   `X-Real-IP`, `X-Forwarded-Proto`, `X-Forwarded-Host`): which are replaced, appended to or
//!   passed on, by whether the peer is a trusted proxy, and the client nginx's realip module
//!   would find behind one;
//! * `response`: a backend's response head parsed and rewritten for the client, and our own
//!   short answers;
//! * `chunked`: the incremental decoder of the chunked transfer coding (RFC 9112 §7.1).

mod chunked;
mod edit;
mod forwarding;
mod request;
mod response;
mod routing;
mod target;

pub(crate) use chunked::Chunked;
pub(crate) use edit::{AnswerEdit, Edits, ResponseEdit};
pub(crate) use forwarding::ClientAddr;
pub use request::MAX_HEADERS_LIMIT;
pub(crate) use request::{Limits, RequestHead, finish_request_head, parse_request};
pub(crate) use response::{
    AnswerEdits, ClientSide, FinalResponse, LocalAnswer, ResponseHead, local_answer,
    local_response, parse_response,
};
pub(crate) use routing::Routed;

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

/// Comma-separated list elements of a header value, trimmed, empty ones skipped
/// (RFC 9110 §5.6.1).
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
) -> impl DoubleEndedIterator<Item = &'b [u8]> {
    headers
        .iter()
        .filter(move |h| h.name.eq_ignore_ascii_case(name))
        .map(|h| h.value)
}

/// What the `Connection` headers of a message say.
#[derive(Debug, Clone, Copy, Default)]
struct ConnectionTokens<'b> {
    present: bool,
    close: bool,
    keep_alive: bool,
    /// The first [`NAMED`] elements, gathered in the same pass, so that asking whether they
    /// name a header ([`ConnectionTokens::names`]) costs a comparison or two rather than a
    /// scan of every header for each header (issue 27: about 800 instructions per request).
    named: [&'b [u8]; NAMED],
    count: usize,
}

/// How many `Connection` elements [`ConnectionTokens`] keeps; past that it asks the headers.
const NAMED: usize = 4;

impl ConnectionTokens<'_> {
    /// Whether the `Connection` headers among `headers` (those these tokens were read from)
    /// name `name`: [`named_by_connection`], answered from the elements gathered.
    fn names(&self, headers: &[httparse::Header<'_>], name: &str) -> bool {
        match self.named.get(..self.count) {
            Some(named) => named
                .iter()
                .any(|t| t.eq_ignore_ascii_case(name.as_bytes())),
            None => named_by_connection(headers, name),
        }
    }
}

fn connection_tokens<'b>(headers: &[httparse::Header<'b>]) -> ConnectionTokens<'b> {
    let mut tokens = ConnectionTokens::default();
    for token in values(headers, "connection").flat_map(|v| {
        tokens.present = true;
        elements(v)
    }) {
        tokens.close |= token.eq_ignore_ascii_case(b"close");
        tokens.keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
        if let Some(slot) = tokens.named.get_mut(tokens.count) {
            *slot = token;
        }
        // Past NAMED, `count` says so, and `names` asks the headers.
        tokens.count += 1;
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

/// Appends `n` in decimal.
fn put_decimal(out: &mut Vec<u8>, n: u64) {
    crate::access_log::text::large_number(out, n);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals() {
        for n in [0, 7, 10, 204, u64::MAX] {
            let mut out = Vec::new();
            put_decimal(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
        }
    }

    /// `ConnectionTokens::names` answers as `named_by_connection` for random heads: up to
    /// three `Connection` headers of up to four elements each (past the four kept, too), in
    /// any case, empty elements included, asked about every name and some others.
    #[test]
    fn connection_names_answer_as_the_headers_do() {
        let words = [
            "close",
            "Keep-Alive",
            "x-a",
            "X-B",
            "upgrade",
            "te",
            "",
            " x-c ",
            "Foo",
        ];
        let mut x: u64 = 0x0123_4567_89ab_cdef;
        let mut next = move |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        for _ in 0..20_000 {
            let mut values = Vec::new();
            for _ in 0..next(4) {
                let list: Vec<&str> = (0..next(5)).map(|_| words[next(words.len())]).collect();
                values.push(list.join(","));
            }
            let mut headers: Vec<httparse::Header<'_>> = values
                .iter()
                .map(|v| httparse::Header {
                    name: ["Connection", "connection"][next(2)],
                    value: v.as_bytes(),
                })
                .collect();
            for w in ["x-a", "X-C", "foo", "Close", "host"] {
                headers.insert(
                    next(headers.len() + 1),
                    httparse::Header {
                        name: w,
                        value: b"1",
                    },
                );
            }
            let tokens = connection_tokens(&headers);
            for name in words
                .iter()
                .map(|w| w.trim())
                .chain(["x-c", "CLOSE", "bar"])
            {
                let want = named_by_connection(&headers, name);
                assert_eq!(tokens.names(&headers, name), want, "{values:?} {name}");
            }
        }
    }

    #[test]
    fn content_length_values() {
        let cl = |v: &[&str]| content_length(v.iter().map(|s| s.as_bytes()));
        assert_eq!(cl(&[]), Ok(None));
        assert_eq!(cl(&[" 5 "]), Ok(Some(5)));
        assert_eq!(cl(&["5", "5"]), Ok(Some(5)));
        assert_eq!(cl(&["18446744073709551615"]), Err(()), "20 digits");
        for bad in [&["5", "6"][..], &["5, 5"], &["x"], &[""], &["+1"]] {
            assert_eq!(cl(bad), Err(()), "{bad:?}");
        }
    }

    #[test]
    fn transfer_coding_lists() {
        let te = |v: &[&str]| codings(v.iter().map(|s| s.as_bytes()));
        assert_eq!(te(&["chunked"]), Codings::Chunked);
        assert_eq!(te(&["gzip", " Chunked"]), Codings::ChunkedAfterOthers);
        assert_eq!(te(&["gzip"]), Codings::NotChunkedLast);
        assert_eq!(te(&[""]), Codings::NotChunkedLast);
        assert_eq!(te(&["chunked, gzip"]), Codings::ChunkedNotLast);
        assert_eq!(te(&["chunked", "chunked"]), Codings::ChunkedNotLast);
    }
}
