//! nginx's ketama ring (`ngx_http_upstream_init_chash` in
//! `src/http/modules/ngx_http_upstream_hash_module.c`), shared by `hash consistent` and
//! `bounded_load` so both place a backend at exactly the points nginx would.
//!
//! Every backend gets 160 points per unit of weight. Its name is split into host and port at
//! the last `:` that is followed only by digits (a `unix:` name is all host, no port; a name
//! without such a `:` is all host). The points are CRC-32 (IEEE 802.3) values over one byte
//! stream that grows by four bytes per point: `host ‖ 0x00 ‖ port ‖ prev`, where `prev` is the
//! previous point's value as four little-endian bytes (0 for the first point). nginx computes
//! the `host ‖ 0x00 ‖ port` part once and continues the unfinished CRC from there for each
//! point, which is the same as the CRC of the concatenation; so does this module, by cloning the
//! running hasher. The points of all backends are then sorted, and of several points with the
//! same value only the first is kept. A key lands on the first point whose value is at least
//! `crc32(key)`, wrapping to the first point past the last.
//!
//! nginx sorts with libc's `qsort`, whose order among equal values is unspecified; we sort
//! stably (configuration order, then point order), so when two backends' points collide (about
//! one chance in a thousand for a few thousand points) the survivor may differ from nginx's.
//!
//! A point names a *server name*, not a backend: backends configured under the same name share
//! their points (nginx: one `server` line resolving to several addresses), and the algorithm
//! chooses among them.

use crate::backend::{BackendId, Backends};

/// Points per unit of weight (nginx's constant, from Cache::Memcached::Fast).
pub const POINTS_PER_WEIGHT: u32 = 160;

/// The most weight a ring is built for: 1.6 million points. fulcrum's configuration refuses a
/// larger total, and the admin API a change that would make one; a total that still gets past
/// them (an operator's weights kept for addresses DNS gives back later, say) is scaled down to
/// it in proportion ([`fit_weights`]), since a ring ten times larger takes ten times the time
/// and memory to build, under the lock every pick takes. nginx has no such bound: below it,
/// the ring is nginx's point for point.
pub const MAX_RING_WEIGHT: u64 = 10_000;

/// `weights` (in order), scaled down in proportion where their total passes
/// [`MAX_RING_WEIGHT`]: each `w` becomes `⌊w · MAX_RING_WEIGHT / total⌋`, at least 1 (a
/// weight of 0 stays 0: no points). Below the bound, unchanged.
pub fn fit_weights(weights: &mut [u32]) {
    let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
    if total <= MAX_RING_WEIGHT {
        return;
    }
    for w in weights.iter_mut().filter(|w| **w > 0) {
        let scaled = u64::from(*w) * MAX_RING_WEIGHT / total;
        *w = u32::try_from(scaled).unwrap_or(u32::MAX).max(1);
    }
}

/// One point of the ring: its hash and the server name (an index into [`Ring::groups`]) it
/// belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    pub hash: u32,
    pub group: u32,
}

/// The sorted, deduplicated points of an upstream, and the backends behind each server name.
#[derive(Debug, Clone, Default)]
pub struct Ring {
    points: Vec<Point>,
    /// The distinct names in configuration order, each with its backends (ids ascending).
    groups: Vec<(String, Vec<BackendId>)>,
}

/// `crc32(key)`: where a key lands on the ring (nginx `ngx_crc32_long`).
#[inline]
pub fn key_hash(key: &[u8]) -> u32 {
    crc32fast::hash(key)
}

/// Splits a server name as nginx does before hashing it: `(host, port)`.
pub fn split_host_port(name: &str) -> (&[u8], &[u8]) {
    let bytes = name.as_bytes();
    if bytes.len() >= 5 && bytes[..5].eq_ignore_ascii_case(b"unix:") {
        return (&bytes[5..], b"");
    }
    for (j, &c) in bytes.iter().rev().enumerate() {
        if c == b':' {
            let colon = bytes.len() - j - 1;
            return (&bytes[..colon], &bytes[colon + 1..]);
        }
        if !c.is_ascii_digit() {
            break;
        }
    }
    (bytes, b"")
}

/// The `weight · 160` point values of one server, in the order nginx generates them.
pub fn server_points(name: &str, weight: u32) -> impl Iterator<Item = u32> {
    let (host, port) = split_host_port(name);
    let mut base = crc32fast::Hasher::new();
    base.update(host);
    base.update(&[0]);
    base.update(port);
    let mut prev = 0u32;
    (0..weight.saturating_mul(POINTS_PER_WEIGHT)).map(move |_| {
        let mut h = base.clone();
        h.update(&prev.to_le_bytes());
        prev = h.finalize();
        prev
    })
}

impl Ring {
    /// The ring over every backend of the view, down or not (as nginx, so that marking a
    /// backend down moves only its own keys), each with its current weight.
    pub fn build(backends: &Backends<'_>) -> Ring {
        Ring::from_servers(
            backends
                .ids()
                .map(|id| (backends.name(id), backends.weight(id))),
        )
    }

    /// The ring over `(name, weight)` pairs in configuration order; backend `i` is the `i`-th.
    /// Weights totalling more than [`MAX_RING_WEIGHT`] are scaled down to it ([`fit_weights`]).
    pub fn from_servers<'a>(servers: impl IntoIterator<Item = (&'a str, u32)>) -> Ring {
        let (names, mut weights): (Vec<&str>, Vec<u32>) = servers.into_iter().unzip();
        fit_weights(&mut weights);
        let mut groups: Vec<(String, Vec<BackendId>)> = Vec::new();
        let mut points = Vec::new();
        for (i, (name, weight)) in names.into_iter().zip(weights).enumerate() {
            let id = BackendId(i as u32);
            let group = match groups.iter().position(|(n, _)| n == name) {
                Some(g) => {
                    groups[g].1.push(id);
                    g
                }
                None => {
                    groups.push((name.to_owned(), vec![id]));
                    groups.len() - 1
                }
            };
            // nginx makes points for every peer, so a name configured twice gets its points
            // twice (the duplicates are then dropped by the dedup below).
            points.extend(server_points(name, weight).map(|hash| Point {
                hash,
                group: group as u32,
            }));
        }
        points.sort_by_key(|p| p.hash);
        points.dedup_by_key(|p| p.hash);
        Ring { points, groups }
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// The sorted, deduplicated points.
    pub fn points(&self) -> &[Point] {
        &self.points
    }

    /// The server name of a group.
    pub fn group_name(&self, group: u32) -> &str {
        &self.groups[group as usize].0
    }

    /// Where a key hash lands: the index of the first point at or above it. May be `len()`,
    /// which [`at`](Ring::at) wraps to the first point.
    pub fn start(&self, hash: u32) -> usize {
        self.points.partition_point(|p| p.hash < hash)
    }

    /// The backends behind the `i`-th point, counted from the first point and wrapping.
    #[inline]
    pub fn at(&self, i: usize) -> &[BackendId] {
        let point = self.points[i % self.points.len()];
        &self.groups[point.group as usize].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_like_nginx() {
        assert_eq!(
            split_host_port("127.0.0.1:18001"),
            (&b"127.0.0.1"[..], &b"18001"[..])
        );
        assert_eq!(split_host_port("[::1]:80"), (&b"[::1]"[..], &b"80"[..]));
        assert_eq!(split_host_port("backend"), (&b"backend"[..], &b""[..]));
        assert_eq!(split_host_port("a:b"), (&b"a:b"[..], &b""[..]));
        assert_eq!(split_host_port("host:"), (&b"host"[..], &b""[..]));
        assert_eq!(
            split_host_port("UNIX:/tmp/s:80"),
            (&b"/tmp/s:80"[..], &b""[..])
        );
    }

    /// The points are a CRC over the growing stream `host 0 port prev…`, computed here from
    /// scratch with a bitwise CRC-32 written from the IEEE polynomial (0xEDB88320 reflected),
    /// independently of crc32fast.
    /// A total past the bound builds the ring of the weights scaled down to it: 1.6 million
    /// points at most, whatever the weights (an operator's 9000s on eleven addresses gave a
    /// 99,001 total that took 45 s to build in a debug build, under the pick lock).
    #[test]
    fn a_ring_is_built_for_at_most_max_ring_weight() {
        let heavy = Ring::from_servers([("a:1", 90_000), ("b:1", 10_000), ("c:1", 0)]);
        let fitted = Ring::from_servers([("a:1", 9_000), ("b:1", 1_000), ("c:1", 0)]);
        assert_eq!(heavy.points(), fitted.points());
        assert!(heavy.len() <= (MAX_RING_WEIGHT * u64::from(POINTS_PER_WEIGHT)) as usize);
        let mut w = [9_000; 11];
        w[0] = 1;
        fit_weights(&mut w);
        assert_eq!(w[0], 1, "each at least 1");
        assert_eq!(w[1], 999, "⌊9000 · 10000 / 90001⌋");
        assert!(w.iter().map(|&x| u64::from(x)).sum::<u64>() <= MAX_RING_WEIGHT);
        let mut under = [5_000, 5_000];
        fit_weights(&mut under);
        assert_eq!(under, [5_000, 5_000], "at the bound: unchanged");
    }

    #[test]
    fn points_are_crc_of_the_concatenation() {
        fn crc(bytes: &[u8]) -> u32 {
            let mut c = !0u32;
            for &b in bytes {
                c ^= u32::from(b);
                for _ in 0..8 {
                    c = if c & 1 == 1 {
                        (c >> 1) ^ 0xEDB8_8320
                    } else {
                        c >> 1
                    };
                }
            }
            !c
        }
        // The standard check value of CRC-32/ISO-HDLC.
        assert_eq!(crc(b"123456789"), 0xCBF4_3926);
        let mut prev = 0u32;
        let got: Vec<u32> = server_points("10.0.0.1:80", 1).collect();
        assert_eq!(got.len(), 160);
        for &p in &got {
            let mut stream = b"10.0.0.1\x0080".to_vec();
            stream.extend_from_slice(&prev.to_le_bytes());
            assert_eq!(p, crc(&stream));
            prev = p;
        }
    }

    #[test]
    fn sorted_deduplicated_and_wrapping() {
        let ring = Ring::from_servers([("10.0.0.1:80", 1), ("10.0.0.2:80", 2)]);
        assert_eq!(ring.len(), 480, "no collisions expected among 480 points");
        assert!(ring.points().windows(2).all(|w| w[0].hash < w[1].hash));
        // A name configured twice shares its points: 160 of the 320 are duplicates.
        let twice = Ring::from_servers([("10.0.0.1:80", 1), ("10.0.0.1:80", 1)]);
        assert_eq!(twice.len(), 160);
        assert_eq!(twice.at(0), &[BackendId(0), BackendId(1)]);
        // Past the last point a key wraps to the first.
        let last = ring.points().last().unwrap().hash;
        assert_eq!(ring.start(last.wrapping_add(1)), ring.len());
        assert_eq!(ring.at(ring.len()), ring.at(0));
    }
}
