//! The forwarding headers: what a backend is told about the client behind the proxy.
//!
//! Every request gets `X-Forwarded-For` (the de-facto list of addresses, our peer appended),
//! `X-Forwarded-Proto: http`, and a `Forwarded` element (RFC 7239 §4: `for`, `proto`, `host`)
//! appended to what the client sent. The client's address is formatted once per connection
//! ([`ClientAddr`]), so writing these costs no allocation per request.

use std::net::IpAddr;

use super::append_values;

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

/// Whether a request header called `name` is one of those [`put_forwarding`] writes, and so is
/// not copied from the client's head as it is.
pub(super) fn is_forwarding(name: &str) -> bool {
    ["x-forwarded-for", "forwarded", "x-forwarded-proto"]
        .iter()
        .any(|f| f.eq_ignore_ascii_case(name))
}

/// Appends the forwarding headers of a request whose headers are `headers`, from `client`,
/// for `host`: what came before is the client's claim, passed on; our own observation is
/// appended.
pub(super) fn put_forwarding(
    out: &mut Vec<u8>,
    headers: &[httparse::Header<'_>],
    client: &ClientAddr,
    host: Option<&[u8]>,
) {
    out.extend_from_slice(b"X-Forwarded-For: ");
    append_values(out, headers, "x-forwarded-for");
    out.extend_from_slice(client.ip.as_bytes());
    out.extend_from_slice(b"\r\nX-Forwarded-Proto: http\r\nForwarded: ");
    append_values(out, headers, "forwarded");
    out.extend_from_slice(client.forwarded_for.as_bytes());
    out.extend_from_slice(b";proto=http");
    if let Some(host) = host {
        out.extend_from_slice(b";host=\"");
        out.extend_from_slice(host);
        out.push(b'"');
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn forwarding(client: IpAddr, raw: &[httparse::Header<'_>], host: Option<&str>) -> String {
        let mut out = Vec::new();
        put_forwarding(
            &mut out,
            raw,
            &ClientAddr::new(client),
            host.map(str::as_bytes),
        );
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn client_addresses_as_written() {
        let v4 = ClientAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
        assert_eq!(v4.ip(), "192.0.2.1");
        assert_eq!(v4.forwarded_for, "for=192.0.2.1");
        let mapped = ClientAddr::new(IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped()));
        assert_eq!(mapped.ip(), "192.0.2.1");
        let v6 = ClientAddr::new(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)));
        assert_eq!(v6.ip(), "2001:db8::1");
        assert_eq!(v6.forwarded_for, "for=\"[2001:db8::1]\"");
    }

    #[test]
    fn appends_to_what_the_client_sent() {
        let peer = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9));
        assert_eq!(
            forwarding(peer, &[], Some("a.test")),
            "X-Forwarded-For: 127.0.0.9\r\nX-Forwarded-Proto: http\r\n\
             Forwarded: for=127.0.0.9;proto=http;host=\"a.test\"\r\n"
        );
        let headers = [
            httparse::Header {
                name: "X-Forwarded-For",
                value: b" 192.0.2.7 ",
            },
            httparse::Header {
                name: "forwarded",
                value: b"for=192.0.2.7",
            },
            httparse::Header {
                name: "x-forwarded-for",
                value: b"10.0.0.1, 10.0.0.2",
            },
        ];
        assert_eq!(
            forwarding(peer, &headers, None),
            "X-Forwarded-For: 192.0.2.7, 10.0.0.1, 10.0.0.2, 127.0.0.9\r\n\
             X-Forwarded-Proto: http\r\nForwarded: for=192.0.2.7, for=127.0.0.9;proto=http\r\n"
        );
    }
}
