//! The request target and `Host`: which form a target takes (RFC 9112 §3.2), whether a `Host`
//! value is `uri-host [ ":" port ]` (RFC 9110 §7.2), and the origin-form path a backend gets.
//!
//! A client talking to a proxy may send the absolute form (`GET http://a.test/x HTTP/1.1`,
//! §3.2.2); its authority then wins over `Host`, and the backend, an origin server, gets the
//! origin form (`GET /x`). Userinfo (`http://u@a.test/`) is refused: RFC 9110 §4.2.4 deprecates
//! it, and it only serves to mislead about the host.

/// The request target, as the backend's request line is written from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target<'a> {
    /// `/path?query`, or `*` for `OPTIONS`: passed on as it is.
    Origin(&'a str),
    /// `http://authority[/path?query]`: the authority becomes `Host`; the rest is what follows
    /// the authority, possibly empty.
    Absolute { authority: &'a str, rest: &'a str },
}

/// Why a target is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TargetError {
    /// `CONNECT`, whatever its target (`host:port`, `/`, `http://…`): this is not a tunnel.
    Connect,
    /// `connect`, `Connect`…: not CONNECT (methods are case-sensitive, RFC 9110 §9.1), but a
    /// backend that compares methods without case would take it for one.
    ConnectInAnotherCase,
    /// Neither origin form, `*` for `OPTIONS`, nor an `http`/`https` absolute form.
    Invalid,
}

impl<'a> Target<'a> {
    /// The form of `target`, as sent with `method`. `CONNECT` is refused before its target is
    /// looked at: a `CONNECT /` or `CONNECT http://…` passed on as an ordinary request would
    /// ask the backend for a tunnel (and a 2xx to it with a `Content-Length` would be pooled
    /// as a keep-alive connection).
    pub(super) fn parse(method: &str, target: &'a str) -> Result<Target<'a>, TargetError> {
        if method == "CONNECT" {
            Err(TargetError::Connect)
        } else if method.eq_ignore_ascii_case("CONNECT") {
            Err(TargetError::ConnectInAnotherCase)
        } else if target.starts_with('/') || (target == "*" && method == "OPTIONS") {
            Ok(Target::Origin(target))
        } else {
            let (authority, rest) = split_absolute(target).ok_or(TargetError::Invalid)?;
            Ok(Target::Absolute { authority, rest })
        }
    }

    /// The authority of an absolute-form target.
    pub(super) fn authority(&self) -> Option<&'a str> {
        match self {
            Target::Origin(_) => None,
            Target::Absolute { authority, .. } => Some(authority),
        }
    }

    /// The path and query as the client sent them (after the authority, for the absolute
    /// form): nginx's `$request_uri`, which `hash_key = "uri"` hashes.
    pub(super) fn as_sent(&self) -> &'a str {
        match self {
            Target::Origin(path) => path,
            Target::Absolute { rest, .. } => rest,
        }
    }

    /// Appends the origin form the backend gets. Of an absolute form, that is what follows
    /// the authority, with the path `/` when it is empty (RFC 9110 §4.2.3, RFC 9112 §3.2.1):
    /// `http://a.test?q` is `/?q`.
    pub(super) fn put_origin_form(&self, out: &mut Vec<u8>) {
        match self {
            Target::Origin(target) => out.extend_from_slice(target.as_bytes()),
            Target::Absolute { rest, .. } => {
                if !rest.starts_with('/') {
                    out.push(b'/');
                }
                out.extend_from_slice(rest.as_bytes());
            }
        }
    }
}

/// What a valid `Host` value says to routing, found in the pass that checks it
/// ([`check_host`]): the routes then need not look at its bytes again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HostName {
    /// The length of its name as nginx matches server names against it (no port, no trailing
    /// dot; what [`routes::host_name`] gives), or `None` when nginx refuses the host (400): a
    /// `..` in it, or a name that is only a dot.
    pub(super) len: Option<usize>,
    /// The name has upper-case letters.
    pub(super) upper: bool,
}

/// Whether `host` is a valid `Host` value: `uri-host [ ":" port ]` (RFC 9110 §7.2), with
/// `uri-host` an IP literal in brackets or a reg-name / IPv4 address.
pub(super) fn valid_host(host: &[u8]) -> bool {
    check_host(host).is_some()
}

/// How [`check_host`] takes each byte of a reg-name.
const INVALID: u8 = 0;
/// A lower-case letter, a digit, or another byte a reg-name may hold (`-._~%` and the
/// sub-delims), but `.`.
const PLAIN: u8 = 1;
const UPPER: u8 = 2;
const DOT: u8 = 3;
const COLON: u8 = 4;

const HOST_CLASS: [u8; 256] = {
    let mut class = [INVALID; 256];
    let mut b = 0;
    while b < 256 {
        class[b] = match b as u8 {
            b'a'..=b'z' | b'0'..=b'9' => PLAIN,
            b'-' | b'_' | b'~' | b'%' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+'
            | b',' | b';' | b'=' => PLAIN,
            b'A'..=b'Z' => UPPER,
            b'.' => DOT,
            b':' => COLON,
            _ => INVALID,
        };
        b += 1;
    }
    class
};

/// `host` checked as a `Host` value ([`valid_host`]), and, if valid, its name as routing takes
/// it ([`HostName`]), in one pass over the bytes of a reg-name.
pub(super) fn check_host(host: &[u8]) -> Option<HostName> {
    if host.first() == Some(&b'[') {
        return check_literal(host);
    }
    let mut upper = false;
    let mut double_dot = false;
    let mut end = host.len();
    for (i, &b) in host.iter().enumerate() {
        let class = HOST_CLASS[usize::from(b)];
        if class == PLAIN {
            continue;
        }
        match class {
            UPPER => upper = true,
            DOT => double_dot |= i > 0 && host[i - 1] == b'.',
            COLON => {
                end = i;
                break;
            }
            _ => return None,
        }
    }
    let port = host.get(end + 1..).unwrap_or_default();
    if end == 0 || port.len() > 5 || !port.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // nginx drops one trailing dot.
    let len = if host[end - 1] == b'.' { end - 1 } else { end };
    Some(HostName {
        len: (!double_dot && len > 0).then_some(len),
        upper,
    })
}

/// [`check_host`] for an IP literal (`[...]`, then perhaps `:port`).
fn check_literal(host: &[u8]) -> Option<HostName> {
    let rest = host.get(1..)?;
    let end = rest.iter().position(|&b| b == b']')?;
    let literal = &rest[..end];
    if literal.is_empty()
        || !literal
            .iter()
            .all(|&b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.' | b'v' | b'V'))
    {
        return None;
    }
    match &rest[end + 1..] {
        [] => {}
        [b':', port @ ..] if port.len() <= 5 && port.iter().all(u8::is_ascii_digit) => {}
        _ => return None,
    }
    // nginx's name is the literal with its brackets.
    Some(HostName {
        len: (!literal.windows(2).any(|w| w == b"..")).then_some(end + 2),
        upper: literal.iter().any(u8::is_ascii_uppercase),
    })
}

/// An absolute-form target (`http://host[:port]/path?query`): its authority and what follows
/// it.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn origin_form(method: &str, target: &str) -> Result<String, TargetError> {
        let mut out = Vec::new();
        Target::parse(method, target)?.put_origin_form(&mut out);
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn target_forms() {
        assert_eq!(origin_form("GET", "/a?b").unwrap(), "/a?b");
        assert_eq!(origin_form("OPTIONS", "*").unwrap(), "*");
        assert_eq!(origin_form("GET", "*"), Err(TargetError::Invalid));
        assert_eq!(origin_form("GET", "a/b"), Err(TargetError::Invalid));
        assert_eq!(origin_form("CONNECT", "a:443"), Err(TargetError::Connect));
        // Issue 26: CONNECT with an origin or absolute target was passed on.
        for target in ["/", "/x", "*", "http://a.test/", "a:443"] {
            assert_eq!(origin_form("CONNECT", target), Err(TargetError::Connect));
        }
        for method in ["connect", "Connect", "cONNECT"] {
            assert_eq!(
                origin_form(method, "/"),
                Err(TargetError::ConnectInAnotherCase)
            );
        }
        assert_eq!(origin_form("CONNECTX", "/").unwrap(), "/");
        assert_eq!(origin_form("GET", "http://b.test:81/x?y").unwrap(), "/x?y");
        assert_eq!(origin_form("GET", "HTTPS://b.test").unwrap(), "/");
        // RFC 9110 §4.2.3: an empty path is "/", a query or not.
        assert_eq!(origin_form("GET", "http://b.test?a=1").unwrap(), "/?a=1");
        assert_eq!(origin_form("GET", "http://b.test:8080?").unwrap(), "/?");
        assert_eq!(
            origin_form("GET", "ftp://b.test/"),
            Err(TargetError::Invalid)
        );
        assert_eq!(
            origin_form("GET", "http://u@b.test/"),
            Err(TargetError::Invalid)
        );
        assert_eq!(origin_form("GET", "http:///x"), Err(TargetError::Invalid));
        let t = Target::parse("GET", "http://b.test:81/x?y").unwrap();
        assert_eq!(t.authority(), Some("b.test:81"));
        assert_eq!(t.as_sent(), "/x?y");
    }

    #[test]
    fn a_host_s_name_is_what_the_routes_would_make_of_it() {
        let alphabet = *b"aZ.:[]/ 8f-_%!~";
        let mut host = Vec::new();
        let mut valid = 0;
        for len in 0..=14 {
            for seed in 0..3000u32 {
                host.clear();
                let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(len as u32);
                for k in 0..len {
                    // Mostly letters, so that valid hosts come up often; brackets first.
                    let pick = (x % 24) as usize;
                    let b = match pick {
                        _ if k == 0 && pick < 3 => b'[',
                        p if p < alphabet.len() => alphabet[p],
                        p => b'a' + p as u8,
                    };
                    host.push(b);
                    x = x.rotate_left(5) ^ x.wrapping_mul(31).wrapping_add(7);
                }
                let Some(name) = check_host(&host) else {
                    continue;
                };
                valid += 1;
                let routes = routes::host_name(&host);
                assert_eq!(
                    name.len,
                    routes.map(|(len, _)| len),
                    "{:?}",
                    String::from_utf8_lossy(&host)
                );
                if let Some((_, upper)) = routes {
                    assert_eq!(name.upper, upper, "{:?}", String::from_utf8_lossy(&host));
                }
            }
        }
        // The comparison must have had something to compare.
        assert!(valid > 5_000, "{valid} valid hosts");
    }

    #[test]
    fn host_values() {
        for good in [
            "a.test",
            "a.test:8080",
            "a.test:",
            "[::1]:80",
            "[2001:db8::1]",
            "10.0.0.1:1",
        ] {
            assert!(valid_host(good.as_bytes()), "{good}");
        }
        for bad in [
            "", "a b", ":80", "a:99999x", "a:123456", "[::1", "[]", "[::1]x", "a/b",
        ] {
            assert!(!valid_host(bad.as_bytes()), "{bad}");
        }
    }
}
