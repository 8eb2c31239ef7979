//! A backend's response head, parsed and rewritten for the client, and our own short answers.
//!
//! The status line always goes out as `HTTP/1.1` (RFC 9110 §6.2: a server sends its own
//! version), hop-by-hop headers are removed (RFC 9110 §7.6.1), and the framing is written from
//! what was parsed rather than copied: `Transfer-Encoding` wins over `Content-Length`, which is
//! then dropped (RFC 9112 §6.3); a chunked body goes to an HTTP/1.0 client de-chunked and
//! delimited by closing (§6.1), as is a body the backend delimits by closing. A response
//! without a body (to HEAD, 204, 304: RFC 9110 §9.3.2, §15.3.5, §15.4.5) keeps its
//! `Content-Length`, written once. An invalid status line or header, or a bad
//! `Content-Length` (not one decimal number, or several that disagree, whatever the status),
//! makes the response invalid: the caller answers 502 and does not reuse the connection. 1xx
//! answers are skipped (as nginx before 1.29).

use std::mem::MaybeUninit;

use super::edit::AnswerEdit;
use super::{
    Codings, ConnectionTokens, Framing, Reject, append_values, codings, connection_tokens,
    content_length, is_hop_by_hop, named_by_connection, put_content_length, put_decimal,
    put_header, values,
};
use crate::sticky::StickyAnswer;

/// What the client asked of the response's connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientSide {
    pub(crate) http11: bool,
    /// The client and the proxy both want the connection kept open.
    pub(crate) keep_alive: bool,
    pub(crate) is_head: bool,
    /// The request asked to upgrade the connection (and the listener allows it): a 101 is
    /// the backend's consent, and the connection becomes a tunnel.
    pub(crate) upgrade: bool,
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

/// What a backend's answer gets besides its own fields: the header rules' fields and the
/// request id, and a sticky session's cookie.
pub(crate) type AnswerEdits<'a> = (Option<AnswerEdit<'a>>, Option<StickyAnswer<'a>>);

/// Response header slots: backends are trusted further than clients, but not without bound.
const RESPONSE_MAX_HEADERS: usize = 128;

/// Parses the response head at the start of `buf`; `Ok(None)`: incomplete. On a final
/// response, the head the client gets is written to `out` (cleared first), blank line
/// included. `Err` says what is wrong with the response.
pub(crate) fn parse_response(
    buf: &[u8],
    client: ClientSide,
    out: &mut Vec<u8>,
    (edit, sticky): AnswerEdits<'_>,
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
        if !client.upgrade {
            return Err("101 Switching Protocols, but no upgrade was asked for");
        }
        return switching(head_len, reason, res.headers, out);
    }
    if (100..200).contains(&status) {
        return Ok(Some(ResponseHead::Interim(head_len)));
    }
    let headers: &[httparse::Header<'_>] = res.headers;
    let no_body = client.is_head || status == 204 || status == 304;
    let has_te = values(headers, "transfer-encoding").next().is_some();
    let body = BodyFraming::of(headers, has_te, no_body, client.http11)?;
    let framing = body.framing;
    let connection = connection_tokens(headers);
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
    put_status_and_headers(
        out,
        (status, reason),
        headers,
        &connection,
        (edit.as_ref(), sticky),
    );
    body.put(out, headers, dechunk);
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

/// How a response's body is framed, as its head says.
struct BodyFraming {
    framing: Framing,
    /// The `Content-Length` given, unless `Transfer-Encoding` overrides it.
    length: Option<u64>,
    /// Codings other than chunked come before it (and stay on the body).
    other_codings: bool,
}

impl BodyFraming {
    /// The framing of a response whose head has `headers` (`has_te`: `Transfer-Encoding`
    /// among them); `no_body` when the response has none whatever its head says (to HEAD,
    /// 204, 304).
    fn of(
        headers: &[httparse::Header<'_>],
        has_te: bool,
        no_body: bool,
        client_http11: bool,
    ) -> Result<BodyFraming, &'static str> {
        // Content-Length, unless Transfer-Encoding overrides it (RFC 9112 §6.3), is checked
        // whatever the status: a response without a body still passes its length on (for
        // HEAD, the length a GET would have had), and a client must not get two that disagree.
        let length = if has_te {
            None
        } else {
            content_length(values(headers, "content-length"))
                .map_err(|()| "invalid or conflicting Content-Length")?
        };
        let (framing, other_codings) = if no_body {
            (Framing::None, false)
        } else if has_te {
            match codings(values(headers, "transfer-encoding")) {
                Codings::Chunked => (Framing::Chunked, false),
                // Other codings before chunked travel with the body, which stays encoded; an
                // HTTP/1.0 client could not be told about them.
                Codings::ChunkedAfterOthers if client_http11 => (Framing::Chunked, true),
                Codings::ChunkedAfterOthers => {
                    return Err("transfer codings besides chunked, for an HTTP/1.0 client");
                }
                // Not chunked at the end: the body would run to the end of the connection,
                // still coded, and the coding could not be passed on without the framing:
                // refused, as recent nginx does.
                Codings::NotChunkedLast => {
                    return Err("a transfer coding other than chunked, without chunked");
                }
                Codings::ChunkedNotLast => {
                    return Err("chunked applied twice or not last in Transfer-Encoding");
                }
            }
        } else {
            (length.map_or(Framing::Close, Framing::Length), false)
        };
        Ok(BodyFraming {
            framing,
            length,
            other_codings,
        })
    }

    /// Writes the framing headers the client gets: written from what was parsed, not copied.
    fn put(&self, out: &mut Vec<u8>, headers: &[httparse::Header<'_>], dechunk: bool) {
        match self.framing {
            Framing::Length(n) => put_content_length(out, n),
            Framing::None => {
                if let Some(n) = self.length {
                    put_content_length(out, n);
                }
            }
            Framing::Chunked if self.other_codings => {
                out.extend_from_slice(b"Transfer-Encoding: ");
                append_values(out, headers, "transfer-encoding");
                out.truncate(out.len() - 2);
                out.extend_from_slice(b"\r\n");
            }
            Framing::Chunked if !dechunk => {
                out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
            }
            _ => {}
        }
    }
}

/// Writes the status line, as HTTP/1.1, and the backend's headers less the hop-by-hop ones
/// (those `Connection` names too, when it has any) and `Content-Length` (framing is written
/// from what was parsed), then what the header rules add (`edit`) and a sticky session's
/// cookie (`sticky`, which also drops a backend's own `Set-Cookie` of the cookie's name).
/// `connection`: what the `Connection` headers among `headers` say.
fn put_status_and_headers(
    out: &mut Vec<u8>,
    (status, reason): (u16, &str),
    headers: &[httparse::Header<'_>],
    connection: &ConnectionTokens<'_>,
    (edit, sticky): (Option<&AnswerEdit<'_>>, Option<StickyAnswer<'_>>),
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    put_decimal(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
    for h in headers {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length")
            || is_hop_by_hop(name)
            || (connection.present && connection.names(headers, name))
            || edit.is_some_and(|e| e.hides(name))
            || sticky.is_some_and(|s| s.hides(name, h.value))
        {
            continue;
        }
        put_header(out, name, h.value);
    }
    if let Some(edit) = edit {
        edit.put(out);
    }
    if let Some(sticky) = sticky {
        sticky.put(out);
    }
}

/// The head of a 101 for the client: the backend's headers less the hop-by-hop ones, its
/// `Upgrade` and `Connection: upgrade`. What follows it on the connection is the new protocol.
fn switching(
    head_len: usize,
    reason: &str,
    headers: &[httparse::Header<'_>],
    out: &mut Vec<u8>,
) -> Result<Option<ResponseHead>, &'static str> {
    if values(headers, "upgrade").next().is_none() {
        return Err("101 Switching Protocols without Upgrade");
    }
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 101 ");
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
    for h in headers {
        if is_hop_by_hop(h.name) || named_by_connection(headers, h.name) {
            continue;
        }
        put_header(out, h.name, h.value);
    }
    for value in values(headers, "upgrade") {
        put_header(out, "Upgrade", value);
    }
    out.extend_from_slice(b"Connection: upgrade\r\n\r\n");
    Ok(Some(ResponseHead::Final(FinalResponse {
        head_len,
        status: 101,
        framing: Framing::None,
        backend_keep_alive: false,
        client_keep_alive: false,
        dechunk: false,
    })))
}

/// Our own short answer. An HTTP/1.0 client kept alive is told so.
pub(crate) fn local_response(out: &mut Vec<u8>, reject: Reject, client: ClientSide) {
    let answer = LocalAnswer {
        status: reject.status,
        content_type: b"text/plain; charset=utf-8",
        location: None,
        body: reject.text.as_bytes(),
        edit: None,
    };
    local_answer(out, &answer, client);
}

/// An answer of our own: a refusal, or what a route answers itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LocalAnswer<'a> {
    pub(crate) status: u16,
    pub(crate) content_type: &'a [u8],
    /// A redirect's target.
    pub(crate) location: Option<&'a [u8]>,
    pub(crate) body: &'a [u8],
    /// The fields the request's header rules and id give its answer (a route's own answer).
    pub(crate) edit: Option<AnswerEdit<'a>>,
}

/// Writes `answer` into `out` (cleared first), as [`local_response`] does.
pub(crate) fn local_answer(out: &mut Vec<u8>, answer: &LocalAnswer<'_>, client: ClientSide) {
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    put_decimal(out, u64::from(answer.status));
    out.push(b' ');
    out.extend_from_slice(reason(answer.status).as_bytes());
    out.extend_from_slice(b"\r\n");
    if !answer.content_type.is_empty() {
        put_header(out, "Content-Type", answer.content_type);
    }
    if let Some(location) = answer.location {
        put_header(out, "Location", location);
    }
    if let Some(edit) = &answer.edit {
        edit.put(out);
    }
    // 204 and 304 have no body and say no length (RFC 9110 §8.6, §15.4.5).
    let bodiless = matches!(answer.status, 204 | 304);
    if !bodiless {
        put_content_length(out, answer.body.len() as u64);
    }
    if !client.keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if !client.http11 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    // The answer to HEAD has no body (RFC 9110 §9.3.2): on a kept-alive connection the
    // client would take one for the start of the next response.
    if !client.is_head && !bodiless {
        out.extend_from_slice(answer.body);
    }
}

/// The reason phrase of a status we answer with ourselves (RFC 9110 §15).
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        410 => "Gone",
        429 => "Too Many Requests",
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

#[cfg(test)]
mod tests {
    use super::super::reject;
    use super::*;

    fn response(raw: &str, client: ClientSide) -> Result<(FinalResponse, String), &'static str> {
        let mut out = Vec::new();
        match parse_response(raw.as_bytes(), client, &mut out, (None, None))?.expect("complete") {
            ResponseHead::Final(f) => Ok((f, String::from_utf8(out).unwrap())),
            ResponseHead::Interim(n) => panic!("interim {n}"),
        }
    }

    const KEEP11: ClientSide = ClientSide {
        http11: true,
        keep_alive: true,
        is_head: false,
        upgrade: false,
    };

    #[test]
    fn a_sticky_answer_replaces_the_backend_s_own_cookie_of_the_name() {
        let settings = crate::sticky::StickySettings {
            cookie: "SRV".to_owned(),
            ..Default::default()
        };
        let raw = b"HTTP/1.1 200 OK\r\nSet-Cookie: SRV=theirs; Path=/\r\n\
                    Set-Cookie: session=1\r\nContent-Length: 0\r\n\r\n";
        let answer = |set| {
            let sticky = crate::sticky::StickyAnswer {
                settings: &settings,
                set,
            };
            let mut out = Vec::new();
            parse_response(raw, KEEP11, &mut out, (None, Some(sticky))).unwrap();
            String::from_utf8(out).unwrap()
        };
        let set = answer(Some(balance::StickyId(1)));
        assert!(!set.contains("theirs"), "{set}");
        assert!(set.contains("Set-Cookie: session=1\r\n"), "{set}");
        assert!(
            set.contains(
                "Set-Cookie: SRV=0000000000000001; Path=/\r\nCache-Control: no-cache=\"Set-Cookie\"\r\n"
            ),
            "{set}"
        );
        let kept = answer(None);
        assert!(
            !kept.contains("SRV=") && !kept.contains("Cache-Control"),
            "{kept}"
        );
        assert!(kept.contains("Set-Cookie: session=1\r\n"), "{kept}");
    }

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
            upgrade: false,
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
                &mut out,
                (None, None)
            ),
            Ok(Some(ResponseHead::Interim(25)))
        ));
    }

    #[test]
    fn content_length_is_checked_without_a_body_too() {
        let head = ClientSide {
            is_head: true,
            ..KEEP11
        };
        for (raw, client) in [
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                head,
            ),
            ("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", head),
            (
                "HTTP/1.1 204 No Content\r\nContent-Length: 5, 6\r\n\r\n",
                KEEP11,
            ),
            (
                "HTTP/1.1 304 Not Modified\r\nContent-Length: -1\r\n\r\n",
                KEEP11,
            ),
            (
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                KEEP11,
            ),
        ] {
            assert_eq!(
                response(raw, client).map(|(_, out)| out),
                Err("invalid or conflicting Content-Length"),
                "{raw:?}"
            );
        }
        // Repeated identically: one value, passed on once.
        let (r, out) = response(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"e\"\r\ncontent-length: 5\r\n\r\n",
            head,
        )
        .unwrap();
        assert_eq!(r.framing, Framing::None);
        assert_eq!(
            out,
            "HTTP/1.1 200 OK\r\nETag: \"e\"\r\nContent-Length: 5\r\n\r\n"
        );
        // Transfer-Encoding overrides Content-Length, which is then not passed on (§6.3).
        let (_, out) = response(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            head,
        )
        .unwrap();
        assert_eq!(out, "HTTP/1.1 200 OK\r\n\r\n");
    }

    #[test]
    fn local_answers() {
        let mut out = Vec::new();
        let client = |http11, keep_alive, is_head| ClientSide {
            http11,
            keep_alive,
            is_head,
            upgrade: false,
        };
        local_response(&mut out, reject(400, "no\n"), client(false, true, false));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Content-Length: 3\r\nConnection: keep-alive\r\n\r\nno\n"
        );
        let mut out = Vec::new();
        local_response(&mut out, reject(502, "x"), client(true, false, false));
        assert!(
            String::from_utf8(out)
                .unwrap()
                .starts_with("HTTP/1.1 502 Bad Gateway\r\n")
        );
        // HEAD: the length a GET would have had, and no body.
        let mut out = Vec::new();
        local_response(&mut out, reject(503, "down\n"), client(true, true, true));
        let out = String::from_utf8(out).unwrap();
        assert!(out.ends_with("Content-Length: 5\r\n\r\n"), "{out:?}");
    }

    #[test]
    fn a_101_is_a_tunnel_only_when_the_client_asked_for_one() {
        let raw = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade, X-Hop\r\nX-Hop: 1\r\nSec-WebSocket-Accept: a\r\n\r\nframes";
        assert_eq!(
            response(raw, KEEP11).unwrap_err(),
            "101 Switching Protocols, but no upgrade was asked for"
        );
        let asked = ClientSide {
            upgrade: true,
            ..KEEP11
        };
        let (r, out) = response(raw, asked).unwrap();
        assert_eq!(
            (r.status, r.framing, r.backend_keep_alive),
            (101, Framing::None, false)
        );
        assert_eq!(r.head_len, raw.len() - "frames".len());
        assert_eq!(
            out,
            "HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"
        );
        let no_upgrade = "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\n\r\n";
        assert_eq!(
            response(no_upgrade, asked).unwrap_err(),
            "101 Switching Protocols without Upgrade"
        );
        // Refused (no 101): an ordinary answer.
        let (r, _) =
            response("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", asked).unwrap();
        assert_eq!(r.status, 403);
    }
}
