//! The key a request or a TCP session is balanced by, for the algorithms that hash one
//! ([`balance::Algorithm::affinity`]), built in one place for HTTP/1.1, HTTP/2 and TCP:
//!
//! * the client address's octets (`ip_hash` and its kin): 4 for IPv4 (IPv4-mapped IPv6
//!   included), 16 for IPv6; the algorithm decides how many count;
//! * or the text of `hash_key`: the client address as text (`client_ip`), or the part of the
//!   request head the parser located for it (a header, a cookie, the URI; empty when the
//!   request has none). A TCP session has no head: its key is the client address, whatever
//!   `hash_key` says (`check` allows only `client_ip` on an upstream a TCP listener uses).
//!
//! The key is kept in a buffer its connection reuses, so an HTTP/1.1 connection allocates
//! nothing for it per request once the buffer has grown.

use std::io::Write as _;
use std::net::IpAddr;

use balance::Affinity;

use crate::settings::{HashKey, UpstreamSettings};

/// A request's affinity key, in buffers a connection keeps.
#[derive(Debug, Default)]
pub(crate) struct AffinityKey {
    /// What the algorithm hashes (`None`: nothing).
    kind: Option<Affinity>,
    /// The client address's octets, the first `octets_len` of them.
    octets: [u8; 16],
    octets_len: usize,
    /// The `hash_key` text.
    text: Vec<u8>,
}

impl AffinityKey {
    /// Takes the key of a request from `peer` for the algorithm of `settings`. `hashed`: the
    /// part of the request head the parser located for `hash_key` (`None`: no request head, a
    /// TCP session).
    pub(crate) fn take(
        &mut self,
        settings: &UpstreamSettings,
        peer: IpAddr,
        hashed: Option<&[u8]>,
    ) {
        self.kind = settings.algorithm.affinity();
        match self.kind {
            None => {}
            Some(Affinity::AddressOctets) => {
                self.octets_len = address_octets(peer, &mut self.octets).len();
            }
            Some(Affinity::Key) => {
                self.text.clear();
                match hashed {
                    Some(part) if settings.hash_key != HashKey::ClientIp => {
                        self.text.extend_from_slice(part);
                    }
                    _ => {
                        let _ = write!(self.text, "{}", peer.to_canonical());
                    }
                }
            }
        }
    }

    /// The key taken last, as the algorithm hashes it.
    pub(crate) fn get(&self) -> Option<&[u8]> {
        match self.kind? {
            Affinity::AddressOctets => Some(&self.octets[..self.octets_len]),
            Affinity::Key => Some(&self.text),
        }
    }

    /// Gives the text buffer's memory back (an idle connection's).
    pub(crate) fn release(&mut self) {
        self.text = Vec::new();
    }
}

/// The client address as a hash key: 4 octets for IPv4 (IPv4-mapped IPv6 included), 16 for
/// IPv6. Algorithms that hash it decide how many octets count.
fn address_octets(ip: IpAddr, buf: &mut [u8; 16]) -> &[u8] {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            buf[..4].copy_from_slice(&v4.octets());
            &buf[..4]
        }
        IpAddr::V6(v6) => {
            *buf = v6.octets();
            &buf[..]
        }
    }
}

#[cfg(test)]
mod tests {
    use balance::Algorithm;

    use super::*;

    #[test]
    fn octets_of_mapped_and_v6() {
        let mut buf = [0; 16];
        let v4: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        assert_eq!(address_octets(v4, &mut buf), [10, 1, 2, 3]);
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(address_octets(v6, &mut buf).len(), 16);
    }

    #[test]
    fn the_key_is_what_the_algorithm_hashes() {
        let peer: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        let upstream = |algorithm: Algorithm, hash_key: HashKey| {
            let mut s = UpstreamSettings::new("u", algorithm, Vec::new());
            s.hash_key = hash_key;
            s
        };
        let mut key = AffinityKey::default();
        key.take(
            &upstream(Algorithm::RoundRobin, HashKey::ClientIp),
            peer,
            Some(b"x"),
        );
        assert_eq!(key.get(), None);
        key.take(
            &upstream(Algorithm::IpHash, HashKey::ClientIp),
            peer,
            Some(b"x"),
        );
        assert_eq!(key.get(), Some(&[10, 1, 2, 3][..]));
        let uri = HashKey::Uri;
        let hash = Algorithm::Hash;
        key.take(&upstream(hash, uri.clone()), peer, Some(b"/a?b"));
        assert_eq!(key.get(), Some(&b"/a?b"[..]));
        // No head (TCP), or `client_ip`: the address as text.
        key.take(&upstream(hash, uri), peer, None);
        assert_eq!(key.get(), Some(&b"10.1.2.3"[..]));
        key.take(&upstream(hash, HashKey::ClientIp), peer, Some(b"/a?b"));
        assert_eq!(key.get(), Some(&b"10.1.2.3"[..]));
    }
}
