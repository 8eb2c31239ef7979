//! A request's header rules and request id, applied as its head is rewritten for the backend,
//! and the fields its answer gets, expanded while the request's values are at hand
//! ([`crate::header_rules`]).

use std::net::SocketAddr;

use super::forwarding::ClientAddr;
use super::target::Target;
use super::values;
use crate::header_rules::{HeaderRules, RequestId, UPSTREAM_MARK, Var};
use crate::route::Route;

/// The field that carries the request id.
pub(crate) const REQUEST_ID: &str = "x-request-id";

/// A listener's rules, as the parser gets them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Edits<'a> {
    pub(crate) request: &'a HeaderRules,
    pub(crate) response: &'a HeaderRules,
    pub(crate) request_id: bool,
}

/// What the answer to a request gets: the fields its rules set and add (with
/// [`UPSTREAM_MARK`] where `$upstream_addr` goes), which route's rules hide fields, and its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResponseEdit {
    pub(crate) lines: Vec<u8>,
    pub(crate) route: Option<usize>,
    pub(crate) id: Option<RequestId>,
}

/// The request's values its rules may name.
pub(super) struct Values<'a> {
    pub(super) client: &'a ClientAddr,
    pub(super) host: Option<&'a [u8]>,
    pub(super) target: &'a Target<'a>,
    pub(super) route: Option<&'a Route>,
    pub(super) id: Option<RequestId>,
}

impl Values<'_> {
    /// Appends `var`'s value; `$upstream_addr` as `upstream` says (the mark, or nothing).
    fn put(&self, var: Var, out: &mut Vec<u8>, upstream: Option<u8>) {
        let sent = self.target.as_sent();
        let (path, query) = match sent.as_bytes().iter().position(|&b| b == b'?') {
            Some(q) => (&sent[..q], &sent[q + 1..]),
            None => (sent, ""),
        };
        match var {
            Var::RemoteAddr => out.extend_from_slice(self.client.ip_text()),
            Var::Host => {
                let host = self.host.unwrap_or_default();
                let name = match host.iter().rposition(|&b| b == b':') {
                    Some(colon) if !host[colon..].contains(&b']') => &host[..colon],
                    _ => host,
                };
                out.extend(name.iter().map(u8::to_ascii_lowercase));
            }
            Var::Scheme => out.extend_from_slice(self.client.scheme().as_bytes()),
            Var::RequestUri => out.extend_from_slice(sent.as_bytes()),
            Var::Uri => {
                if routes::is_normal(path.as_bytes()) {
                    out.extend_from_slice(path.as_bytes());
                } else {
                    let mut normal = Vec::new();
                    if routes::normalize(path.as_bytes(), &mut normal).is_ok() {
                        out.extend_from_slice(&normal);
                    }
                }
            }
            Var::Args => out.extend_from_slice(query.as_bytes()),
            Var::RequestId => {
                if let Some(id) = &self.id {
                    out.extend_from_slice(id.as_bytes());
                }
            }
            Var::Route => {
                if let Some(r) = self.route {
                    out.extend_from_slice(r.name.as_bytes());
                }
            }
            Var::UpstreamAddr => out.extend(upstream),
        }
    }
}

/// The request id of a request with `headers` from `client`: what a trusted peer sent in
/// `X-Request-Id` (if it can be one), else a new one.
pub(super) fn request_id(headers: &[httparse::Header<'_>], client: &ClientAddr) -> RequestId {
    let sent = client
        .is_trusted()
        .then(|| values(headers, REQUEST_ID).next())
        .flatten()
        .and_then(RequestId::from_peer);
    sent.unwrap_or_else(RequestId::new)
}

/// Whether the client's field `name` is dropped on the way to the backend.
pub(super) fn hides_request(edits: &Edits<'_>, route: Option<&Route>, name: &str) -> bool {
    edits.request.hides(name)
        || route.is_some_and(|r| r.request_headers.hides(name))
        || (edits.request_id && name.eq_ignore_ascii_case(REQUEST_ID))
}

/// Appends the fields the rules set and add to the backend's request, and its id.
pub(super) fn put_request(out: &mut Vec<u8>, edits: &Edits<'_>, values: &Values<'_>) {
    if let Some(id) = &values.id {
        out.extend_from_slice(b"X-Request-Id: ");
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let value_of = |v, out: &mut Vec<u8>| values.put(v, out, None);
    edits.request.put(out, &value_of);
    if let Some(route) = values.route {
        route.request_headers.put(out, &value_of);
    }
}

/// The fields the answer gets, expanded now (`$upstream_addr` marked).
pub(super) fn response(
    edits: &Edits<'_>,
    values: &Values<'_>,
    route: Option<usize>,
) -> ResponseEdit {
    let mut lines = Vec::new();
    if let Some(id) = &values.id {
        lines.extend_from_slice(b"X-Request-Id: ");
        lines.extend_from_slice(id.as_bytes());
        lines.extend_from_slice(b"\r\n");
    }
    let value_of = |v, out: &mut Vec<u8>| values.put(v, out, Some(UPSTREAM_MARK));
    edits.response.put(&mut lines, &value_of);
    if let Some(r) = values.route {
        r.response_headers.put(&mut lines, &value_of);
    }
    ResponseEdit {
        lines,
        route,
        id: values.id,
    }
}

/// What writing an answer's head needs of its request's edits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AnswerEdit<'a> {
    pub(crate) edit: &'a ResponseEdit,
    pub(crate) listener: &'a HeaderRules,
    pub(crate) route: Option<&'a HeaderRules>,
    /// The backend that answered, for `$upstream_addr` (`None`: our own answer).
    pub(crate) upstream: Option<SocketAddr>,
}

impl AnswerEdit<'_> {
    /// Whether the answer's field `name` is dropped.
    pub(crate) fn hides(&self, name: &str) -> bool {
        self.listener.hides(name)
            || self.route.is_some_and(|r| r.hides(name))
            || (self.edit.id.is_some() && name.eq_ignore_ascii_case(REQUEST_ID))
    }

    /// Appends the answer's fields, `$upstream_addr` written.
    pub(crate) fn put(&self, out: &mut Vec<u8>) {
        let lines = &self.edit.lines;
        let mut rest = &lines[..];
        while let Some(mark) = rest.iter().position(|&b| b == UPSTREAM_MARK) {
            out.extend_from_slice(&rest[..mark]);
            if let Some(addr) = self.upstream {
                use std::io::Write as _;
                let _ = write!(out, "{addr}");
            }
            rest = &rest[mark + 1..];
        }
        out.extend_from_slice(rest);
    }
}
