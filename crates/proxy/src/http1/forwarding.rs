//! The forwarding headers: what a backend is told about the client behind the proxy, and
//! whose word it is.
//!
//! Anyone can write `X-Forwarded-For: 1.2.3.4` (RFC 7239 §8.1: every node on the way, the
//! client included, can write these headers). What a peer says about where a request came
//! from is believed only when the peer is in the listener's `trusted_proxies` (another proxy
//! or load balancer in front of this one), as nginx's realip module believes only
//! `set_real_ip_from` addresses. Whether the peer is trusted is decided once per connection,
//! in [`ClientAddr::new`]; IPv4-mapped IPv6 peers (`::ffff:192.0.2.1`) are compared, and
//! written, as IPv4.
//!
//! | header              | untrusted peer (the default)  | trusted peer                        |
//! |---------------------|-------------------------------|-------------------------------------|
//! | `X-Forwarded-For`   | replaced: the peer            | the peer appended to the list       |
//! | `Forwarded`         | replaced: our element         | our element appended (RFC 7239 §4)  |
//! | `X-Real-IP`         | replaced: the peer            | replaced: the client found in XFF   |
//! | `X-Forwarded-Proto` | replaced: the scheme          | passed on; the scheme if none       |
//! | `X-Forwarded-Host`  | removed                       | passed on                           |
//!
//! The scheme is the one the client used with us: `https` on a listener with TLS, else `http`
//! (what nginx users write as `$scheme`).
//!
//! Our `Forwarded` element is `for=<peer>;proto=http;host="<Host>"` (RFC 7239 §5.2 `for`,
//! §5.3 `host`, §5.4 `proto`; an IPv6 node in brackets and quotes, §6.1). `X-Forwarded-Host`
//! is not added, as nginx does not add it unless told to.
//!
//! `X-Real-IP` from a trusted peer is the client as nginx's realip module computes it with
//! `real_ip_header X-Forwarded-For; real_ip_recursive on` (`ngx_http_get_forwarded_addr` in
//! `src/http/ngx_http_core_module.c`): start from the peer; while the address in hand is
//! trusted, take the next `X-Forwarded-For` element from the right (every header line, the
//! last one rightmost). The first untrusted address is the client. An element that is not an
//! address (`unknown`, a host name) ends the walk, and the client is the last address found
//! (the trusted one to its right, or the peer); when every element is trusted, the client is
//! the leftmost. Elements are separated by commas or spaces and may carry a port
//! (`192.0.2.1:80`, `[2001:db8::1]:80`, port 1 to 65535), as nginx reads them. The unit tests
//! pin the answers nginx 1.22.1 gave for the same headers. Deliberate differences: IPv4-mapped
//! elements count as IPv4 (nginx compares them as IPv6 and writes `::ffff:...`); addresses are
//! read by Rust's parser, which refuses leading zeros (`01.2.3.4`, which nginx reads as
//! `1.2.3.4`), so such an element ends the walk; an empty header line adds no element (an
//! empty last line makes nginx keep the peer).
//!
//! Nothing here allocates per request, nor per connection from an untrusted peer: the peer's
//! text is formatted once per connection into an inline buffer ([`IpText`]), and from an
//! untrusted peer every header is fixed text around it. A trusted peer costs one copy
//! of the trusted list per connection and a walk over `X-Forwarded-For` per request.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;

use super::{append_values, values};

/// The client's address as the forwarding headers write it, formatted once per connection, and
/// whether its forwarding headers are believed.
#[derive(Debug, Clone)]
pub(crate) struct ClientAddr {
    /// The peer's address, IPv4-mapped addresses as IPv4.
    addr: IpAddr,
    /// For `X-Forwarded-For`: `192.0.2.1`, `2001:db8::1`; the `Forwarded` element (RFC 7239
    /// §4) is made of it: `for=192.0.2.1`, `for="[2001:db8::1]"`.
    ip: IpText,
    /// The listener's trusted proxies when the peer is one of them (its forwarding headers are
    /// believed, and `X-Forwarded-For` is walked against these); `None` when it is not.
    trusted: Option<Box<[IpNet]>>,
    /// The scheme the client used: `http`, or `https` on a TLS listener.
    proto: &'static str,
}

impl ClientAddr {
    /// The peer `ip`, trusted if it is in one of `trusted_proxies`.
    pub(crate) fn new(ip: IpAddr, trusted_proxies: &[IpNet]) -> ClientAddr {
        let addr = ip.to_canonical();
        ClientAddr {
            addr,
            ip: IpText::new(addr),
            trusted: is_in(addr, trusted_proxies).then(|| trusted_proxies.into()),
            proto: "http",
        }
    }

    /// The client came over TLS: the forwarding headers say `https`.
    pub(crate) fn set_https(&mut self) {
        self.proto = "https";
    }

    /// The scheme the client used with us: `http`, or `https` on a TLS listener.
    pub(crate) fn scheme(&self) -> &'static str {
        self.proto
    }

    /// Whether the peer is one of the listener's trusted proxies.
    pub(crate) fn is_trusted(&self) -> bool {
        self.trusted.is_some()
    }

    /// The peer's address as text (`$remote_addr`).
    /// The client's address (an IPv4-mapped one as IPv4).
    pub(crate) fn addr(&self) -> IpAddr {
        self.addr
    }

    pub(crate) fn ip_text(&self) -> &[u8] {
        self.ip.as_bytes()
    }
}

/// An address's text, formatted once and held inline: a connection's `ClientAddr` allocates
/// nothing, and formatting an IPv4 address is a few dozen instructions, not `core::fmt`'s
/// hundreds (issue 27 measured two `format!`s at 2,960 instructions per connection).
#[derive(Clone, Copy)]
struct IpText {
    /// The longest text: an IPv6 address with an IPv4 tail,
    /// `ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255` (45 bytes).
    buf: [u8; 45],
    len: u8,
}

impl IpText {
    /// `addr` as `Display` writes it (`192.0.2.1`, `2001:db8::1`).
    fn new(addr: IpAddr) -> IpText {
        let mut text = IpText {
            buf: [0; 45],
            len: 0,
        };
        match addr {
            IpAddr::V4(v4) => {
                let mut at = 0;
                for (i, octet) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        text.buf[at] = b'.';
                        at += 1;
                    }
                    let (hundreds, tens, ones) = (octet / 100, octet / 10 % 10, octet % 10);
                    if hundreds > 0 {
                        text.buf[at] = b'0' + hundreds;
                        at += 1;
                    }
                    if hundreds > 0 || tens > 0 {
                        text.buf[at] = b'0' + tens;
                        at += 1;
                    }
                    text.buf[at] = b'0' + ones;
                    at += 1;
                }
                // At most 15 bytes.
                text.len = at as u8;
            }
            IpAddr::V6(v6) => {
                let mut cursor = std::io::Cursor::new(&mut text.buf[..]);
                // It fits (at most 45 bytes); were it cut short, what was written stays.
                let _ = write!(cursor, "{v6}");
                text.len = cursor.position() as u8;
            }
        }
        text
    }

    fn as_bytes(&self) -> &[u8] {
        self.buf.get(..usize::from(self.len)).unwrap_or_default()
    }
}

impl std::fmt::Debug for IpText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.as_bytes()))
    }
}

fn is_in(addr: IpAddr, nets: &[IpNet]) -> bool {
    nets.iter().any(|net| net.contains(&addr))
}

/// Whether header names `a` and `b` are the same once case is ignored and `_` is read as
/// `-`: CGI, WSGI and Rack turn both into the same variable (`HTTP_X_FORWARDED_FOR`), so
/// `X_Forwarded_For` from a client must be dropped like `X-Forwarded-For` (the spoofing behind
/// CVE-2024-45614; nginx drops names with `_` altogether by default).
fn same_name(a: &str, b: &str) -> bool {
    let fold = |c: u8| {
        if c == b'_' {
            b'-'
        } else {
            c.to_ascii_lowercase()
        }
    };
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| fold(x) == fold(y))
}

/// Whether the client's header `name` stays out of the backend's head: [`put_forwarding`]
/// writes its own instead, or, from an untrusted peer, none: `X-Forwarded-Host`, and the
/// other claims about the scheme and address the client used that frameworks believe
/// (`X-Forwarded-Ssl: on` makes Rack take a request for https).
pub(super) fn is_replaced(name: &str, client: &ClientAddr) -> bool {
    let always = ["x-forwarded-for", "forwarded", "x-real-ip"];
    let from_untrusted = [
        "x-forwarded-proto",
        "x-forwarded-host",
        "x-forwarded-ssl",
        "x-forwarded-scheme",
        "x-forwarded-port",
        "x-forwarded-prefix",
        "x-url-scheme",
        "front-end-https",
    ];
    let replaced = |list: &[&str]| list.iter().any(|f| same_name(f, name));
    // A trusted proxy writes these with dashes; an underscore is someone else's.
    replaced(&always)
        || (replaced(&from_untrusted) && (client.trusted.is_none() || name.contains('_')))
}

/// Appends the forwarding headers of a request whose headers are `headers`, from `client`,
/// for `host` (see the table in the module documentation).
pub(super) fn put_forwarding(
    out: &mut Vec<u8>,
    headers: &[httparse::Header<'_>],
    client: &ClientAddr,
    host: Option<&[u8]>,
) {
    let trusted = client.trusted.as_deref();
    out.extend_from_slice(b"X-Forwarded-For: ");
    if trusted.is_some() {
        append_values(out, headers, "x-forwarded-for");
    }
    out.extend_from_slice(client.ip.as_bytes());
    out.extend_from_slice(b"\r\n");
    if trusted.is_none() || values(headers, "x-forwarded-proto").next().is_none() {
        out.extend_from_slice(b"X-Forwarded-Proto: ");
        out.extend_from_slice(client.proto.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Forwarded: ");
    if trusted.is_some() {
        append_values(out, headers, "forwarded");
    }
    match client.addr {
        IpAddr::V4(_) => {
            out.extend_from_slice(b"for=");
            out.extend_from_slice(client.ip.as_bytes());
        }
        IpAddr::V6(_) => {
            out.extend_from_slice(b"for=\"[");
            out.extend_from_slice(client.ip.as_bytes());
            out.extend_from_slice(b"]\"");
        }
    }
    out.extend_from_slice(b";proto=");
    out.extend_from_slice(client.proto.as_bytes());
    if let Some(host) = host {
        out.extend_from_slice(b";host=\"");
        out.extend_from_slice(host);
        out.push(b'"');
    }
    out.extend_from_slice(b"\r\nX-Real-IP: ");
    match trusted.map(|nets| real_client(client.addr, headers, nets)) {
        Some(real) if real != client.addr => {
            // Writing to a Vec cannot fail.
            let _ = write!(out, "{real}");
        }
        _ => out.extend_from_slice(client.ip.as_bytes()),
    }
    out.extend_from_slice(b"\r\n");
}

/// The client behind the trusted `peer`, as nginx's realip module finds it in the request's
/// `X-Forwarded-For` (see the module documentation).
fn real_client(peer: IpAddr, headers: &[httparse::Header<'_>], trusted: &[IpNet]) -> IpAddr {
    let mut client = peer;
    let from_the_right = values(headers, "x-forwarded-for")
        .rev()
        .flat_map(|v| v.rsplit(|&b| b == b',' || b == b' '))
        .map(<[u8]>::trim_ascii)
        .filter(|e| !e.is_empty());
    for element in from_the_right {
        if !is_in(client, trusted) {
            break;
        }
        match forwarded_addr(element) {
            Some(addr) => client = addr,
            None => break,
        }
    }
    client
}

/// An `X-Forwarded-For` element as nginx reads one (`ngx_parse_addr_port`): an address, an
/// IPv4 address with a port, or an address in brackets with a port.
fn forwarded_addr(element: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(element).ok()?;
    if let Ok(addr) = text.parse::<IpAddr>() {
        return Some(addr.to_canonical());
    }
    let (addr, port) = if let Some(rest) = text.strip_prefix('[') {
        let (inside, port) = rest.split_once("]:")?;
        (inside.parse::<IpAddr>().ok()?, port)
    } else {
        let (v4, port) = text.split_once(':')?;
        (IpAddr::V4(v4.parse::<Ipv4Addr>().ok()?), port)
    };
    let valid_port = !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p != 0);
    valid_port.then(|| addr.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|n| n.parse().unwrap()).collect()
    }

    fn header<'a>(name: &'a str, value: &'a str) -> httparse::Header<'a> {
        httparse::Header {
            name,
            value: value.as_bytes(),
        }
    }

    fn forwarding(client: &ClientAddr, headers: &[httparse::Header<'_>], host: &str) -> String {
        let mut out = Vec::new();
        put_forwarding(&mut out, headers, client, Some(host.as_bytes()));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn client_addresses_as_written() {
        let text = |c: &ClientAddr| String::from_utf8(c.ip.as_bytes().to_vec()).unwrap();
        let v4 = ClientAddr::new(v4(192, 0, 2, 1), &[]);
        assert_eq!(text(&v4), "192.0.2.1");
        assert!(forwarding(&v4, &[], "h").contains("Forwarded: for=192.0.2.1;proto=http;"));
        let mapped = ClientAddr::new(
            IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped()),
            &[],
        );
        assert_eq!(text(&mapped), "192.0.2.1");
        let v6 = ClientAddr::new(
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
            &[],
        );
        assert_eq!(text(&v6), "2001:db8::1");
        let element = "Forwarded: for=\"[2001:db8::1]\";proto=http;";
        assert!(forwarding(&v6, &[], "h").contains(element));
    }

    /// The inline text is what `Display` writes, for every octet value in every position of
    /// an IPv4 address and for IPv6 addresses of every shape (the longest included).
    #[test]
    fn inline_address_text_is_display_s() {
        let same = |addr: IpAddr| {
            let text = IpText::new(addr);
            assert_eq!(text.as_bytes(), addr.to_string().as_bytes(), "{addr}");
        };
        for octet in 0..=255u8 {
            for at in 0..4 {
                let mut octets = [1, 22, 203, 9];
                octets[at] = octet;
                same(IpAddr::from(octets));
            }
        }
        same(IpAddr::from([255, 255, 255, 255]));
        same(IpAddr::from([0, 0, 0, 0]));
        let v6s = [
            "::",
            "::1",
            "2001:db8::1",
            "fe80::1:2:3:4",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "::ffff:255.255.255.255",
            "::255.255.255.255",
            "1:0:0:1:0:0:0:1",
        ];
        for v6 in v6s {
            same(v6.parse().unwrap());
        }
        let mut x: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0001;
        for _ in 0..10_000 {
            // A xorshift walk over addresses, with runs of zero groups now and then.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mask = if x.is_multiple_of(3) {
                0xffff_0000_ffff_0000_0000_ffff_0000_ffff
            } else {
                !0
            };
            same(IpAddr::V6(Ipv6Addr::from(x & mask)));
        }
    }

    #[test]
    fn trust_is_decided_once_per_connection() {
        let trusted = nets(&["10.0.0.0/8", "2001:db8::/32"]);
        assert!(ClientAddr::new(v4(10, 1, 2, 3), &trusted).trusted.is_some());
        assert!(ClientAddr::new(v4(11, 1, 2, 3), &trusted).trusted.is_none());
        assert!(ClientAddr::new(v4(10, 1, 2, 3), &[]).trusted.is_none());
        // IPv4-mapped peers are compared as IPv4.
        let mapped = IpAddr::V6(Ipv4Addr::new(10, 9, 9, 9).to_ipv6_mapped());
        assert!(ClientAddr::new(mapped, &trusted).trusted.is_some());
        let v6: IpAddr = "2001:db8::5".parse().unwrap();
        assert!(ClientAddr::new(v6, &trusted).trusted.is_some());
        assert!(ClientAddr::new(v6, &nets(&["0.0.0.0/0"])).trusted.is_none());
    }

    /// Everything a client claims, as a spoofer would send it.
    const SPOOFED: [httparse::Header<'static>; 6] = [
        httparse::Header {
            name: "X-Forwarded-For",
            value: b"6.6.6.6",
        },
        httparse::Header {
            name: "forwarded",
            value: b"for=6.6.6.6",
        },
        httparse::Header {
            name: "X-Real-IP",
            value: b"6.6.6.6",
        },
        httparse::Header {
            name: "X-Forwarded-Host",
            value: b"evil.test",
        },
        httparse::Header {
            name: "X-Forwarded-Proto",
            value: b"https",
        },
        httparse::Header {
            name: "x-forwarded-for",
            value: b"6.6.6.7",
        },
    ];

    #[test]
    fn an_untrusted_peer_gets_ours_only() {
        let peer = ClientAddr::new(v4(127, 0, 0, 9), &nets(&["10.0.0.0/8"]));
        let ours = "X-Forwarded-For: 127.0.0.9\r\nX-Forwarded-Proto: http\r\n\
                    Forwarded: for=127.0.0.9;proto=http;host=\"a.test\"\r\n\
                    X-Real-IP: 127.0.0.9\r\n";
        assert_eq!(forwarding(&peer, &[], "a.test"), ours);
        assert_eq!(forwarding(&peer, &SPOOFED, "a.test"), ours);
        for h in SPOOFED {
            assert!(is_replaced(h.name, &peer), "{}", h.name);
        }
        // Names a framework folds onto ours, and the other claims about the scheme.
        for name in [
            "X_Forwarded_For",
            "x-real_ip",
            "X-Forwarded-Ssl",
            "X-Forwarded-Scheme",
            "x-forwarded-port",
            "Front-End-Https",
        ] {
            assert!(is_replaced(name, &peer), "{name}");
        }
        assert!(!is_replaced("accept", &peer));
        assert!(!is_replaced("x-forwarded", &peer));
        assert!(!is_replaced("x-forwarded-forx", &peer));
    }

    #[test]
    fn a_trusted_peer_is_appended_to() {
        let peer = ClientAddr::new(v4(10, 0, 0, 1), &nets(&["10.0.0.0/8"]));
        assert_eq!(
            forwarding(&peer, &SPOOFED, "a.test"),
            "X-Forwarded-For: 6.6.6.6, 6.6.6.7, 10.0.0.1\r\n\
             Forwarded: for=6.6.6.6, for=10.0.0.1;proto=http;host=\"a.test\"\r\n\
             X-Real-IP: 6.6.6.7\r\n",
            "X-Forwarded-Proto passes (it is not replaced), ours only when there is none"
        );
        for (name, replaced) in [
            ("X-Forwarded-For", true),
            ("Forwarded", true),
            ("x-real-ip", true),
            ("X-Forwarded-Proto", false),
            ("X-Forwarded-Host", false),
            ("X-Forwarded-Ssl", false),
            ("X_Forwarded_For", true),
            ("X_Forwarded_Proto", true),
        ] {
            assert_eq!(is_replaced(name, &peer), replaced, "{name}");
        }
        assert_eq!(
            forwarding(&peer, &[], "a.test"),
            "X-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: http\r\n\
             Forwarded: for=10.0.0.1;proto=http;host=\"a.test\"\r\nX-Real-IP: 10.0.0.1\r\n"
        );
        let v6 = ClientAddr::new("2001:db8::1".parse().unwrap(), &nets(&["2001:db8::/32"]));
        assert_eq!(
            forwarding(
                &v6,
                &[header("X-Forwarded-For", "[2001:db8:1::9]:8443")],
                "b"
            ),
            "X-Forwarded-For: [2001:db8:1::9]:8443, 2001:db8::1\r\n\
             X-Forwarded-Proto: http\r\n\
             Forwarded: for=\"[2001:db8::1]\";proto=http;host=\"b\"\r\n\
             X-Real-IP: 2001:db8:1::9\r\n"
        );
    }

    /// The real client nginx 1.22.1 found (`$remote_addr`), as a server on 127.0.0.1 with
    /// `set_real_ip_from 127.0.0.0/8; set_real_ip_from 10.0.0.0/8; set_real_ip_from
    /// 2001:db8:ffff::/48; real_ip_header X-Forwarded-For; real_ip_recursive on;`, for requests
    /// from 127.0.0.1 with these `X-Forwarded-For` lines.
    const NGINX_ANSWERS: &[(&[&str], &str)] = &[
        (&[], "127.0.0.1"),
        (&["1.2.3.4"], "1.2.3.4"),
        (&["1.2.3.4, 10.0.0.1"], "1.2.3.4"),
        (&["1.2.3.4,10.0.0.1"], "1.2.3.4"),
        (&["10.0.0.2, 10.0.0.1"], "10.0.0.2"),
        (&["1.2.3.4, junk, 10.0.0.1"], "10.0.0.1"),
        (&["junk"], "127.0.0.1"),
        (&["unknown"], "127.0.0.1"),
        (&["1.2.3.4, junk"], "127.0.0.1"),
        (&["1.2.3.4, 10.0.0.1:8080"], "1.2.3.4"),
        (&["1.2.3.4:80"], "1.2.3.4"),
        (&["1.2.3.4:0"], "127.0.0.1"),
        (&["1.2.3.4:65536"], "127.0.0.1"),
        (&["[2001:db8::1]:80, 10.0.0.1"], "2001:db8::1"),
        (&["2001:db8::1"], "2001:db8::1"),
        (&["2001:DB8::0001"], "2001:db8::1"),
        (&["[2001:db8::1]"], "127.0.0.1"),
        (&["[::1]"], "127.0.0.1"),
        (&["1.2.3.4 5.6.7.8"], "5.6.7.8"),
        (&["1.2.3.4 10.0.0.3"], "1.2.3.4"),
        (&["1.2.3.4;10.0.0.1"], "127.0.0.1"),
        (&["1.2.3.4", "10.0.0.1"], "1.2.3.4"),
        (&["10.0.0.5", "10.0.0.1"], "10.0.0.5"),
        (&["junk", "10.0.0.1"], "10.0.0.1"),
        (&["10.0.0.1", "junk"], "127.0.0.1"),
        (&["", "1.2.3.4"], "1.2.3.4"),
        (&[", 1.2.3.4 ,,"], "1.2.3.4"),
        (&["1.2.3.4, "], "1.2.3.4"),
        (&["2001:db8::1, 2001:db8:ffff::5"], "2001:db8::1"),
        (&["9.9.9.9, 2001:db8:ffff::5, 10.0.0.7"], "9.9.9.9"),
        (&["10.0.0.1, 2001:db8::1:80"], "2001:db8::1:80"),
        (&["[192.0.2.1]:80"], "192.0.2.1"),
        (&["192.0.2.1:00080"], "192.0.2.1"),
        (&["192.0.2.1:+1"], "127.0.0.1"),
        (&["192.0.2.1:1:2"], "127.0.0.1"),
        (&["192.0.2.1:"], "127.0.0.1"),
        (&["[2001:db8::1]:"], "127.0.0.1"),
        (&["example.com:80"], "127.0.0.1"),
        (&["for=192.0.2.1"], "127.0.0.1"),
    ];

    fn real_ip(xff: &[&str], trusted: &[IpNet]) -> String {
        let headers: Vec<_> = xff.iter().map(|v| header("X-Forwarded-For", v)).collect();
        real_client(v4(127, 0, 0, 1), &headers, trusted).to_string()
    }

    #[test]
    fn the_real_client_is_found_as_nginx_finds_it() {
        let trusted = nets(&["127.0.0.0/8", "10.0.0.0/8", "2001:db8:ffff::/48"]);
        for (xff, nginx) in NGINX_ANSWERS {
            assert_eq!(real_ip(xff, &trusted), *nginx, "X-Forwarded-For: {xff:?}");
        }
    }

    #[test]
    fn where_the_real_client_differs_from_nginx() {
        let trusted = nets(&["127.0.0.0/8", "10.0.0.0/8"]);
        // nginx: ::ffff:1.2.3.4, and ::ffff:10.0.0.1 not trusted by 10.0.0.0/8.
        assert_eq!(real_ip(&["::ffff:1.2.3.4"], &trusted), "1.2.3.4");
        assert_eq!(
            real_ip(&["1.2.3.4, ::ffff:10.0.0.1, 10.0.0.2"], &trusted),
            "1.2.3.4"
        );
        // nginx: 1.2.3.4 (leading zeros read as decimal).
        assert_eq!(real_ip(&["01.2.3.4"], &trusted), "127.0.0.1");
        // nginx: 127.0.0.1 (an empty last line ends its walk).
        assert_eq!(real_ip(&["1.2.3.4", ""], &trusted), "1.2.3.4");
    }

    #[test]
    fn forwarded_addresses_are_parsed_as_nginx_reads_them() {
        for (text, addr) in [
            ("192.0.2.1:1", Some("192.0.2.1")),
            ("192.0.2.1:65535", Some("192.0.2.1")),
            ("[::ffff:192.0.2.1]:443", Some("192.0.2.1")),
            ("192.0.2.1:x", None),
            ("192.0.2.1:-1", None),
            ("[2001:db8::1]x:80", None),
            ("[2001:db8::1]:99999999999999999999", None),
            ("", None),
        ] {
            assert_eq!(
                forwarded_addr(text.as_bytes()).map(|a| a.to_string()),
                addr.map(str::to_owned),
                "{text:?}"
            );
        }
        assert_eq!(forwarded_addr(b"\xff\xfe"), None);
    }
}
