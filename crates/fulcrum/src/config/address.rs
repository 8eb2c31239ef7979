//! How addresses are written: a listener's IP address and port, a backend's `host:port`
//! (resolved now, as nginx resolves `server` names at start-up), a trusted proxy's address or
//! CIDR range — and what to write instead of a Unix socket path or a URL.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use ipnet::IpNet;

/// A Unix socket written as nginx does (`unix:/run/app.sock`) or as a bare path.
fn is_socket_path(text: &str) -> bool {
    text.starts_with("unix:")
        || text.starts_with('/')
        || text.starts_with("./")
        || text.starts_with('~')
        || (text.contains('/') && !text.contains(':'))
}

/// `http://127.0.0.1:9001/`: an address was expected, not a URL.
fn scheme(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once("://")?;
    (!scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphabetic())).then_some(scheme)
}

/// What a listener or backend address cannot be, whatever else is wrong with it.
fn not_an_address(text: &str, role: &str, example: &str) -> Option<String> {
    if is_socket_path(text) {
        return Some(format!(
            "Unix-socket {role}s are not supported (yet): write an IP address and port, such as \"{example}\""
        ));
    }
    scheme(text).map(|scheme| {
        format!(
            "write the address without \"{scheme}://\" (and without a path), such as \"{example}\""
        )
    })
}

/// An IP address whose port is a number above 65535 (`127.0.0.1:80800`): said as such.
fn port_too_large(text: &str) -> Option<String> {
    let (ip, port) = text.rsplit_once(':')?;
    let ip = ip.trim_start_matches('[').trim_end_matches(']');
    ip.parse::<IpAddr>().ok()?;
    let port: u64 = port.parse().ok()?;
    (port > 65535)
        .then(|| format!("\"{text}\": the port {port} is above 65535, the largest a port can be"))
}

/// A listener's address: an IP address and port.
pub(super) fn listen(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    Err(not_an_address(text, "listener", "127.0.0.1:8080")
        .or_else(|| port_too_large(text))
        .unwrap_or_else(|| {
            format!("\"{text}\" is not an IP address and port, like \"127.0.0.1:8080\" or \"[::1]:8080\"")
        }))
}

/// An address to connect to, with port 0 refused: nothing listens there (nginx refuses it
/// too, "invalid port").
fn connectable(text: &str, addr: SocketAddr) -> Result<SocketAddr, String> {
    match addr.port() {
        0 => Err(format!(
            "\"{text}\": port 0 cannot be connected to; write the port the backend listens on, like \"127.0.0.1:9001\""
        )),
        _ => Ok(addr),
    }
}

/// A backend's address: an IP address and port, or a host name and port resolved now.
pub(super) fn backend(text: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = text.parse::<SocketAddr>() {
        return connectable(text, a);
    }
    if let Some(why) =
        not_an_address(text, "backend", "127.0.0.1:9001").or_else(|| port_too_large(text))
    {
        return Err(why);
    }
    if !text.contains(':') {
        return Err(format!(
            "\"{text}\" has no port: write host:port, like \"127.0.0.1:9001\""
        ));
    }
    match text.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("\"{text}\" resolves to no address"))
            .and_then(|a| connectable(text, a)),
        Err(e) => Err(format!(
            "cannot resolve \"{text}\": {e}; write host:port, like \"127.0.0.1:9001\""
        )),
    }
}

/// Where a backend is: an address, or a host name and port that DNS discovery resolves now
/// and again at its TTL (NGINX Plus's `server ... resolve`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Target {
    Addr(SocketAddr),
    Name(String, u16),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Addr(a) => write!(f, "{a}"),
            Target::Name(host, port) => write!(f, "{host}:{port}"),
        }
    }
}

/// A backend's `addr`: an IP address and port, or a host name and port (resolved by the
/// upstream's discovery, not now: a name that does not resolve yet is not an error).
pub(super) fn backend_target(text: &str) -> Result<Target, String> {
    if let Ok(a) = text.parse::<SocketAddr>() {
        return connectable(text, a).map(Target::Addr);
    }
    if let Some(why) =
        not_an_address(text, "backend", "127.0.0.1:9001").or_else(|| port_too_large(text))
    {
        return Err(why);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!(
            "\"{text}\" has no port: write host:port, like \"127.0.0.1:9001\""
        ));
    };
    let Ok(port) = port.parse::<u16>() else {
        return Err(format!(
            "\"{text}\": the port after : must be a number from 1 to 65535, like \"app.internal:8080\""
        ));
    };
    if port == 0 {
        return Err(format!("\"{text}\": port 0 cannot be connected to"));
    }
    if host.parse::<IpAddr>().is_ok() || host.starts_with('[') {
        return Err(format!(
            "\"{text}\" is not an address and port: an IPv6 address needs brackets, like \"[::1]:9001\""
        ));
    }
    super::discovery::dns_name(host)?;
    // A trailing dot stays: it makes the name absolute (no search list).
    Ok(Target::Name(host.to_owned(), port))
}

/// A trusted proxy: an address (`192.168.1.5`, `::1`: that address alone) or a CIDR range
/// (`10.0.0.0/8`). Also says whether the range had bits set past its prefix
/// (`10.1.2.3/8`), which nginx warns about too: the range is `10.0.0.0/8` all the same.
pub(super) fn trusted_proxy(text: &str) -> Result<(IpNet, bool), String> {
    let form = "write an address such as \"192.168.1.5\" or a range such as \"10.0.0.0/8\"";
    let (addr, prefix) = match text.split_once('/') {
        Some((addr, prefix)) => (addr, Some(prefix)),
        None => (text, None),
    };
    let Ok(addr) = addr.trim().parse::<IpAddr>() else {
        return Err(format!("\"{text}\" is not an IP address: {form}"));
    };
    let longest: u8 = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => longest,
        Some(p) => match p.trim().parse::<u8>() {
            Ok(p) if p <= longest => p,
            _ => {
                return Err(format!(
                    "\"{text}\": the prefix length after / must be a number from 0 to {longest} for an {} address",
                    if addr.is_ipv4() { "IPv4" } else { "IPv6" }
                ));
            }
        },
    };
    // Peers are compared as IPv4 when they are IPv4-mapped (`::ffff:10.0.0.1`), so a mapped
    // range is taken as the IPv4 range it covers; a range wider than the mapped block cannot
    // be (and would match no peer).
    let (addr, prefix) = match addr {
        IpAddr::V6(v6) if prefix >= 96 => match v6.to_ipv4_mapped() {
            Some(v4) => (IpAddr::V4(v4), prefix - 96),
            None => (addr, prefix),
        },
        _ => (addr, prefix),
    };
    let net = IpNet::new(addr, prefix).map_err(|e| format!("\"{text}\": {e}; {form}"))?;
    let trunc = net.trunc();
    Ok((trunc, trunc.addr() != addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_sockets_and_urls_are_named_as_such() {
        for path in ["unix:/run/app.sock", "/run/app.sock", "run/app.sock"] {
            let e = backend(path).unwrap_err();
            assert!(
                e.starts_with("Unix-socket backends are not supported (yet)"),
                "{e}"
            );
            assert!(e.contains("\"127.0.0.1:9001\""), "{e}");
            let e = listen(path).unwrap_err();
            assert!(
                e.starts_with("Unix-socket listeners are not supported (yet)"),
                "{e}"
            );
        }
        let e = backend("http://127.0.0.1:9001/").unwrap_err();
        assert!(
            e.starts_with("write the address without \"http://\""),
            "{e}"
        );
        assert_eq!(backend("127.0.0.1:9001").unwrap().port(), 9001);
        assert_eq!(backend("[::1]:80").unwrap().port(), 80);
        assert!(backend("127.0.0.1").unwrap_err().contains("has no port"));
        assert_eq!(
            backend_target("app.internal:8080"),
            Ok(Target::Name("app.internal".into(), 8080))
        );
        assert_eq!(
            backend_target("app.internal.:8080"),
            Ok(Target::Name("app.internal.".into(), 8080)),
            "the trailing dot of an absolute name stays"
        );
        assert_eq!(
            backend_target("127.0.0.1:80"),
            Ok(Target::Addr(([127, 0, 0, 1], 80).into()))
        );
        for bad in [
            "app.internal",
            "app.internal:x",
            "app..internal:80",
            "::1:80",
            "a b:80",
        ] {
            assert!(backend_target(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_port_above_65535_is_said_so() {
        for text in ["127.0.0.1:80800", "[::1]:65536"] {
            let e = listen(text).unwrap_err();
            assert!(e.contains("is above 65535"), "{e}");
            let e = backend(text).unwrap_err();
            assert!(e.contains("is above 65535"), "{e}");
        }
        assert!(listen("127.0.0.1:65535").is_ok());
    }

    /// nginx refuses `server 127.0.0.1:0;` ("invalid port"): nothing can be connected to there.
    #[test]
    fn a_backend_on_port_0_is_refused() {
        for text in ["127.0.0.1:0", "[::1]:0"] {
            for e in [
                backend(text).unwrap_err(),
                backend_target(text).unwrap_err(),
            ] {
                assert!(e.contains("port 0 cannot be connected to"), "{e}");
            }
        }
        assert!(backend_target("app.internal:0").is_err());
        assert_eq!(
            backend_target("127.0.0.1:1"),
            Ok(Target::Addr(SocketAddr::from(([127, 0, 0, 1], 1))))
        );
    }

    #[test]
    fn trusted_proxies_are_addresses_or_ranges() {
        let net = |t| trusted_proxy(t).map(|(n, odd)| (n.to_string(), odd));
        assert_eq!(net("10.0.0.0/8"), Ok(("10.0.0.0/8".to_owned(), false)));
        assert_eq!(net("192.168.1.5"), Ok(("192.168.1.5/32".to_owned(), false)));
        assert_eq!(net("::1"), Ok(("::1/128".to_owned(), false)));
        assert_eq!(net("fd00::/8"), Ok(("fd00::/8".to_owned(), false)));
        assert_eq!(net("10.1.2.3/8"), Ok(("10.0.0.0/8".to_owned(), true)));
        // IPv4-mapped: the IPv4 range, as peers are compared.
        assert_eq!(
            net("::ffff:10.0.0.0/104"),
            Ok(("10.0.0.0/8".to_owned(), false))
        );
        assert_eq!(
            net("::ffff:192.0.2.1"),
            Ok(("192.0.2.1/32".to_owned(), false))
        );
        assert!(net("10.0.0.0/33").unwrap_err().contains("from 0 to 32"));
        assert!(net("::/129").unwrap_err().contains("from 0 to 128"));
        assert!(
            net("10.0.0.300")
                .unwrap_err()
                .contains("is not an IP address")
        );
        assert!(
            net("localhost")
                .unwrap_err()
                .contains("is not an IP address")
        );
        assert!(net("10.0.0.0/").is_err());
    }
}
