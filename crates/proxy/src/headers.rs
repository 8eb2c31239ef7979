//! Header hygiene between client and backend.
//!
//! Hop-by-hop headers describe one connection, not the message, so a proxy must not pass them
//! on: the fixed list of RFC 9110 §7.6.1 (and the older `Keep-Alive`, `Proxy-Connection`) plus
//! every header the `Connection` header names. The forwarding headers tell the backend who the
//! client was: `X-Forwarded-For` gets the client's address appended (what came before is the
//! client's claim, passed on but never used for decisions here), `X-Forwarded-Proto` is set, and
//! a `Forwarded` element (RFC 7239) is appended.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Headers that are hop-by-hop whatever `Connection` says.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Removes hop-by-hop headers, including those `Connection` names. `Upgrade` goes too: this
/// proxy does not tunnel upgraded connections yet.
pub(crate) fn remove_hop_by_hop(headers: &mut HeaderMap) {
    if headers.contains_key(header::CONNECTION) {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove(header::UPGRADE);
}

/// Adds the forwarding headers for a request from `client`, received over plain HTTP.
pub(crate) fn add_forwarded(headers: &mut HeaderMap, client: SocketAddr) {
    let ip = client.ip().to_canonical();
    let mut xff = String::with_capacity(64);
    for prior in headers.get_all(&X_FORWARDED_FOR) {
        if let Ok(prior) = prior.to_str() {
            xff.push_str(prior.trim());
            xff.push_str(", ");
        }
    }
    let _ = write!(xff, "{ip}");
    if let Ok(v) = HeaderValue::from_str(&xff) {
        headers.insert(X_FORWARDED_FOR, v);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));

    let mut fwd = String::with_capacity(64);
    for prior in headers.get_all(header::FORWARDED) {
        if let Ok(prior) = prior.to_str() {
            fwd.push_str(prior.trim());
            fwd.push_str(", ");
        }
    }
    match ip {
        IpAddr::V4(v4) => {
            let _ = write!(fwd, "for={v4}");
        }
        IpAddr::V6(v6) => {
            let _ = write!(fwd, "for=\"[{v6}]\"");
        }
    }
    fwd.push_str(";proto=http");
    if let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) {
        let _ = write!(fwd, ";host=\"{host}\"");
    }
    if let Ok(v) = HeaderValue::from_str(&fwd) {
        headers.insert(header::FORWARDED, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        m
    }

    #[test]
    fn removes_fixed_and_named_hop_by_hop() {
        let mut h = map(&[
            ("connection", "keep-alive, X-Secret"),
            ("connection", "foo"),
            ("x-secret", "1"),
            ("foo", "2"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("accept", "*/*"),
        ]);
        remove_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["accept"]);
    }

    #[test]
    fn appends_client_to_forwarding_headers() {
        let mut h = map(&[
            ("host", "example.com"),
            ("x-forwarded-for", "203.0.113.7"),
            ("x-forwarded-proto", "https"),
        ]);
        add_forwarded(&mut h, "127.0.0.9:5000".parse().unwrap());
        assert_eq!(h["x-forwarded-for"], "203.0.113.7, 127.0.0.9");
        assert_eq!(
            h["x-forwarded-proto"], "http",
            "a client's claim is replaced"
        );
        assert_eq!(
            h["forwarded"],
            "for=127.0.0.9;proto=http;host=\"example.com\""
        );
    }

    #[test]
    fn ipv6_and_mapped_addresses() {
        let mut h = HeaderMap::new();
        add_forwarded(&mut h, "[::1]:80".parse().unwrap());
        assert_eq!(h["forwarded"], "for=\"[::1]\";proto=http");
        let mut h = HeaderMap::new();
        add_forwarded(&mut h, "[::ffff:127.0.0.2]:80".parse().unwrap());
        assert_eq!(h["x-forwarded-for"], "127.0.0.2");
    }
}
