//! HAProxy's PROXY protocol (v1 text, v2 binary; haproxy.org/download/2.9/doc/proxy-protocol.txt):
//! the header a load balancer puts before a connection's first byte to name the client it
//! relays. fulcrum writes one to backends (`proxy_protocol` on a TCP listener) and reads one
//! from load balancers in front (`accept_proxy_protocol`). The `ppp` crate parses and builds
//! the headers; this module reads exactly one header off a socket and nothing after it, so
//! whatever follows is the protocol's own first bytes, untouched.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ppp::{HeaderResult, v1, v2};
use tokio::io::AsyncReadExt as _;
use tokio::net::TcpStream;

use crate::settings::ProxyProtocol;

/// The v2 signature (spec §2.2).
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// The longest v1 header, CRLF included (spec §2.1).
const V1_MAX: usize = 107;
/// The shortest header of either version: `PROXY UNKNOWN\r\n`. Reading this much first never
/// waits for bytes a server-speaks-first protocol's client will not send.
const SHORTEST: usize = 15;
/// The most address and TLV bytes a v2 header may announce that we read; HAProxy's own limit
/// is its buffer. Larger TLV sets (AWS, Azure) are well under 1 KiB.
const V2_MAX_PAYLOAD: usize = 4096;

/// The header to send a backend for a client connected from `client` to `local`.
pub(crate) fn header(version: ProxyProtocol, client: SocketAddr, local: SocketAddr) -> Vec<u8> {
    let (client, local) = same_family(client, local);
    match version {
        ProxyProtocol::V1 => v1::Addresses::from((client, local))
            .to_string()
            .into_bytes(),
        ProxyProtocol::V2 => v2::Builder::with_addresses(
            v2::Version::Two | v2::Command::Proxy,
            v2::Protocol::Stream,
            (client, local),
        )
        .build()
        // Writing to a vector cannot fail, and two addresses fit any length field.
        .unwrap_or_default(),
    }
}

/// The two addresses in one family, as the header needs them: canonical (IPv4-mapped IPv6 as
/// IPv4) when both can be, else both IPv6.
fn same_family(a: SocketAddr, b: SocketAddr) -> (SocketAddr, SocketAddr) {
    let canon = |s: SocketAddr| SocketAddr::new(s.ip().to_canonical(), s.port());
    let (a, b) = (canon(a), canon(b));
    if a.is_ipv4() == b.is_ipv4() {
        return (a, b);
    }
    let v6 = |s: SocketAddr| match s.ip() {
        IpAddr::V4(v4) => SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), s.port()),
        IpAddr::V6(_) => s,
    };
    (v6(a), v6(b))
}

/// Why a connection's PROXY header was not taken.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AcceptError {
    #[error("no PROXY protocol header within {0:?}")]
    Timeout(Duration),
    #[error("the connection closed or failed before its PROXY protocol header ended: {0}")]
    Io(#[from] std::io::Error),
    #[error("not a PROXY protocol header: {0}")]
    Invalid(String),
}

/// Reads the PROXY header that must open `stream` within `within`; the client it names, or
/// `peer` itself for a header that names none (v2 `LOCAL`, the load balancer's own health
/// check; v1 `UNKNOWN`; a non-IP family).
pub(crate) async fn accept(
    stream: &mut TcpStream,
    peer: SocketAddr,
    within: Duration,
) -> Result<SocketAddr, AcceptError> {
    let raw = tokio::time::timeout(within, read_header(stream))
        .await
        .map_err(|_| AcceptError::Timeout(within))??;
    source(&raw, peer)
}

/// The client a complete header `raw` names (`peer` when it names none).
fn source(raw: &[u8], peer: SocketAddr) -> Result<SocketAddr, AcceptError> {
    match HeaderResult::parse(raw) {
        HeaderResult::V1(Ok(h)) => Ok(match h.addresses {
            v1::Addresses::Tcp4(a) => SocketAddr::new(a.source_address.into(), a.source_port),
            v1::Addresses::Tcp6(a) => SocketAddr::new(a.source_address.into(), a.source_port),
            v1::Addresses::Unknown => peer,
        }),
        HeaderResult::V2(Ok(h)) => Ok(match (h.command, h.addresses) {
            (v2::Command::Proxy, v2::Addresses::IPv4(a)) => {
                SocketAddr::new(a.source_address.into(), a.source_port)
            }
            (v2::Command::Proxy, v2::Addresses::IPv6(a)) => {
                SocketAddr::new(a.source_address.into(), a.source_port)
            }
            _ => peer,
        }),
        HeaderResult::V1(Err(e)) => Err(AcceptError::Invalid(e.to_string())),
        HeaderResult::V2(Err(e)) => Err(AcceptError::Invalid(e.to_string())),
    }
}

/// Reads exactly one header's bytes: the shortest header first, then as the version says — a
/// v2 header's announced length, or a v1 line to its LF (a byte at a time: only the load
/// balancer in front sends these, once per connection).
async fn read_header(stream: &mut TcpStream) -> Result<Vec<u8>, AcceptError> {
    let mut raw = vec![0u8; SHORTEST];
    stream.read_exact(&mut raw).await?;
    if raw.starts_with(V2_SIGNATURE) {
        raw.resize(16, 0);
        stream.read_exact(&mut raw[SHORTEST..]).await?;
        let len = usize::from(u16::from_be_bytes([raw[14], raw[15]]));
        if len > V2_MAX_PAYLOAD {
            return Err(AcceptError::Invalid(format!(
                "a v2 header of {len} address and TLV bytes (at most {V2_MAX_PAYLOAD} are taken)"
            )));
        }
        raw.resize(16 + len, 0);
        stream.read_exact(&mut raw[16..]).await?;
        return Ok(raw);
    }
    if !raw.starts_with(b"PROXY ") {
        return Err(AcceptError::Invalid(format!(
            "it starts with {:?}",
            String::from_utf8_lossy(&raw[..8])
        )));
    }
    while raw.last() != Some(&b'\n') {
        if raw.len() >= V1_MAX {
            return Err(AcceptError::Invalid(format!(
                "a v1 line longer than {V1_MAX} bytes"
            )));
        }
        raw.push(stream.read_u8().await?);
    }
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt as _;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn headers_we_write_name_the_client_and_read_back() {
        let client = addr("192.0.2.7:40000");
        let local = addr("127.0.0.1:6380");
        let v1 = header(ProxyProtocol::V1, client, local);
        assert_eq!(v1, b"PROXY TCP4 192.0.2.7 127.0.0.1 40000 6380\r\n");
        let v2 = header(ProxyProtocol::V2, client, local);
        assert!(v2.starts_with(V2_SIGNATURE));
        assert_eq!(v2.len(), 16 + 12);
        for h in [v1, v2] {
            assert_eq!(source(&h, addr("127.0.0.9:1")).unwrap(), client);
        }
        // A v4 client on a dual-stack (v6) socket: both sides written as IPv6.
        let v1 = header(ProxyProtocol::V1, client, addr("[::1]:6380"));
        assert_eq!(
            v1,
            b"PROXY TCP6 ::ffff:192.0.2.7 ::1 40000 6380\r\n".to_vec(),
            "{}",
            String::from_utf8_lossy(&v1)
        );
    }

    #[tokio::test]
    async fn a_header_is_read_exactly_and_what_follows_is_left() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let cases: Vec<(Vec<u8>, Result<SocketAddr, &str>)> = vec![
            (
                header(ProxyProtocol::V2, addr("[2001:db8::1]:5"), addr("[::1]:6")),
                Ok(addr("[2001:db8::1]:5")),
            ),
            (
                b"PROXY TCP4 198.51.100.1 127.0.0.1 1234 80\r\n".to_vec(),
                Ok(addr("198.51.100.1:1234")),
            ),
            // Names no client: the peer is the client.
            (b"PROXY UNKNOWN\r\n".to_vec(), Err("peer")),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec(),
                Err("not a PROXY"),
            ),
            (
                format!("PROXY TCP4 {}\r\n", "1".repeat(120)).into_bytes(),
                Err("longer than 107"),
            ),
            (
                b"PROXY TCP4 1.2.3.4 5.6.7.8 99999 1\r\n".to_vec(),
                Err("not a PROXY"),
            ),
        ];
        for (sent, want) in cases {
            let mut c = TcpStream::connect(at).await.unwrap();
            let (mut s, peer) = listener.accept().await.unwrap();
            c.write_all(&sent).await.unwrap();
            c.write_all(b"after").await.unwrap();
            let got = accept(&mut s, peer, Duration::from_secs(5)).await;
            match (got, want) {
                (Ok(got), Ok(want)) => {
                    assert_eq!(got, want);
                    let mut rest = [0u8; 5];
                    s.read_exact(&mut rest).await.unwrap();
                    assert_eq!(&rest, b"after", "the header's bytes only were taken");
                }
                (Ok(got), Err("peer")) => assert_eq!(got, peer),
                (Err(e), Err(want)) => assert!(e.to_string().contains(want), "{e}"),
                (got, want) => panic!(
                    "{:?}: got {got:?}, want {want:?}",
                    String::from_utf8_lossy(&sent)
                ),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_header_that_never_comes_times_out() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let mut c = TcpStream::connect(at).await.unwrap();
        let (mut s, peer) = listener.accept().await.unwrap();
        c.write_all(b"PROXY TCP4 1.2.3.4").await.unwrap();
        let e = accept(&mut s, peer, Duration::from_secs(3))
            .await
            .unwrap_err();
        assert!(matches!(e, AcceptError::Timeout(_)), "{e}");
    }
}
