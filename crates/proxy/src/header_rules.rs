//! Header rules (`request_headers`, `response_headers`, on a listener and on a route): fields
//! set, added or removed on the way to the backend or back to the client, their values written
//! with nginx's variable names — and the request id (`request_id = true`).
//!
//! * `set`: every field of that name the message had is dropped, and this one written (nginx's
//!   `proxy_set_header`; for responses HAProxy's `http-response set-header`).
//! * `add`: written beside those of the same name (nginx's `add_header ... always`).
//! * `remove`: dropped (nginx's `proxy_set_header NAME ""`, `proxy_hide_header`).
//!
//! The listener's rules apply first, then the route's. Values are expanded once a request, when
//! its head is read; `$upstream_addr`, known only when a backend answers, is written then.

use std::fmt;

/// A field value with nginx's variables in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Var(Var),
}

/// The variables a value may use, by nginx's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    /// The client's address (`$remote_addr`).
    RemoteAddr,
    /// The request's host, without its port, in lower case (`$host`).
    Host,
    /// `http` or `https` (`$scheme`).
    Scheme,
    /// The target as sent, path and query (`$request_uri`).
    RequestUri,
    /// The normalised path (`$uri`).
    Uri,
    /// The query, without its `?` (`$args`).
    Args,
    /// The request's id (`$request_id`): 32 hex digits, or what a trusted peer sent.
    RequestId,
    /// The name of the route that took the request (`$route`; empty without one).
    Route,
    /// The backend that answered (`$upstream_addr`; empty in a request's fields).
    UpstreamAddr,
}

/// Every variable, with its name.
pub const VARS: [(&str, Var); 9] = [
    ("remote_addr", Var::RemoteAddr),
    ("host", Var::Host),
    ("scheme", Var::Scheme),
    ("request_uri", Var::RequestUri),
    ("uri", Var::Uri),
    ("args", Var::Args),
    ("request_id", Var::RequestId),
    ("route", Var::Route),
    ("upstream_addr", Var::UpstreamAddr),
];

/// Why a value cannot be a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError(pub String);

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Template {
    /// Parses `text`: `$name` or `${name}` is a variable of [`VARS`]; everything else is text.
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        if text.bytes().any(|b| (b < b' ' && b != b'\t') || b == 0x7f) {
            return Err(TemplateError(
                "a header value has no control characters (no line breaks)".into(),
            ));
        }
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(dollar) = rest.find('$') {
            if dollar > 0 {
                pieces.push(Piece::Text(rest[..dollar].to_owned()));
            }
            let after = &rest[dollar + 1..];
            let (name, next) = match after.strip_prefix('{') {
                Some(braced) => match braced.find('}') {
                    Some(end) => (&braced[..end], &braced[end + 1..]),
                    None => return Err(TemplateError(format!("`${{` without `}}` in \"{text}\""))),
                },
                None => {
                    let end = after
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(after.len());
                    (&after[..end], &after[end..])
                }
            };
            let Some(&(_, var)) = VARS.iter().find(|(n, _)| *n == name) else {
                let known: Vec<String> = VARS.iter().map(|(n, _)| format!("${n}")).collect();
                return Err(TemplateError(format!(
                    "unknown variable `${name}`; the variables are {}",
                    known.join(", ")
                )));
            };
            pieces.push(Piece::Var(var));
            rest = next;
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_owned()));
        }
        Ok(Template(pieces))
    }

    /// Whether the value names `var`.
    pub fn uses(&self, var: Var) -> bool {
        self.0.contains(&Piece::Var(var))
    }

    /// Appends the value, each variable as `value_of` gives it.
    pub(crate) fn expand(&self, out: &mut Vec<u8>, value_of: &impl Fn(Var, &mut Vec<u8>)) {
        for piece in &self.0 {
            match piece {
                Piece::Text(t) => out.extend_from_slice(t.as_bytes()),
                Piece::Var(v) => value_of(*v, out),
            }
        }
    }
}

/// Fields set, added and removed on one side (to the backend, or to the client).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeaderRules {
    /// (name, value): fields of that name dropped, this one written.
    pub set: Vec<(String, Template)>,
    /// (name, value): written beside those of the same name.
    pub add: Vec<(String, Template)>,
    /// Names dropped.
    pub remove: Vec<String>,
}

impl HeaderRules {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }

    /// Whether a field named `name` the message had is dropped (set anew, or removed).
    pub(crate) fn hides(&self, name: &str) -> bool {
        self.set.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
            || self.remove.iter().any(|n| n.eq_ignore_ascii_case(name))
    }

    /// Appends the fields it sets and adds, `Name: value\r\n` each.
    pub(crate) fn put(&self, out: &mut Vec<u8>, value_of: &impl Fn(Var, &mut Vec<u8>)) {
        for (name, value) in self.set.iter().chain(&self.add) {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            value.expand(out, value_of);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// Fields that say how a message is framed or describe one connection: no rule may set,
/// add or remove them (the proxy writes them itself).
pub const UNTOUCHABLE: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

/// The byte that stands for `$upstream_addr` in a response's fields expanded before the backend
/// answered: no field value holds it (a NUL is refused in requests and in the configuration).
pub(crate) const UPSTREAM_MARK: u8 = 0;

/// A request id: 32 hex digits made here, or (from a trusted peer) what it sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestId {
    bytes: [u8; 64],
    len: u8,
}

impl RequestId {
    /// A new id: 128 bits from the worker's generator, as 32 lower-case hex digits (nginx's
    /// `$request_id`).
    pub(crate) fn new() -> RequestId {
        let (a, b) = IDS.with(|state| {
            let mut s = state.get();
            let a = splitmix(&mut s);
            let b = splitmix(&mut s);
            state.set(s);
            (a, b)
        });
        let mut bytes = [0u8; 64];
        let hex = b"0123456789abcdef";
        for (i, byte) in a.to_be_bytes().iter().chain(&b.to_be_bytes()).enumerate() {
            bytes[2 * i] = hex[usize::from(byte >> 4)];
            bytes[2 * i + 1] = hex[usize::from(byte & 15)];
        }
        RequestId { bytes, len: 32 }
    }

    /// `sent`, if it can be one: 1 to 64 visible ASCII characters.
    pub(crate) fn from_peer(sent: &[u8]) -> Option<RequestId> {
        let ok = !sent.is_empty() && sent.len() <= 64 && sent.iter().all(|b| b.is_ascii_graphic());
        ok.then(|| {
            let mut bytes = [0u8; 64];
            bytes[..sent.len()].copy_from_slice(sent);
            RequestId {
                bytes,
                len: sent.len() as u8,
            }
        })
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

thread_local! {
    /// Each worker's generator state, seeded from the clock, the thread and a counter.
    static IDS: std::cell::Cell<u64> = std::cell::Cell::new(seed());
}

fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // std's RandomState is seeded from the OS once per process and differs per thread's use.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// SplitMix64 (Steele, Lea, Flood 2014): a fast generator whose outputs are well spread; ids
/// need to be unique, not secret.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_are_found_by_nginx_s_names() {
        let t = Template::parse("a=$host;b=${scheme}x $request_id").unwrap();
        let mut out = Vec::new();
        t.expand(&mut out, &|v, out: &mut Vec<u8>| {
            out.extend_from_slice(match v {
                Var::Host => b"h.test",
                Var::Scheme => b"https",
                Var::RequestId => b"ID",
                _ => b"?",
            })
        });
        assert_eq!(out, b"a=h.test;b=httpsx ID");
        assert!(
            Template::parse("$nope")
                .unwrap_err()
                .0
                .contains("unknown variable `$nope`")
        );
        assert!(Template::parse("${host").is_err());
        assert!(Template::parse("a\r\nb: c").is_err());
        assert!(Template::parse("max-age=63072000; includeSubDomains").is_ok());
    }

    #[test]
    fn ids_are_32_hex_digits_and_differ() {
        let a = RequestId::new();
        let b = RequestId::new();
        assert_eq!(a.as_bytes().len(), 32);
        assert!(a.as_bytes().iter().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert_eq!(RequestId::from_peer(b"abc-1").unwrap().as_bytes(), b"abc-1");
        assert!(RequestId::from_peer(b"a b").is_none());
        assert!(RequestId::from_peer(&[b'x'; 65]).is_none());
    }
}
