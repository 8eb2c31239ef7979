//! nginx's `hash $key` and `hash $key consistent` (`ngx_http_upstream_get_hash_peer` and
//! `ngx_http_upstream_get_chash_peer` in `src/http/modules/ngx_http_upstream_hash_module.c`),
//! reproduced so that fulcrum sends a key to the backend nginx would, given the same `server`
//! lines (names, weights, order).
//!
//! The key is [`PickCtx::affinity`] as text (for `hash_key = client_ip`, the address as
//! nginx's `$remote_addr` prints it). Without a key, with an empty one, or with fewer than two
//! backends, nginx uses round robin; so do we, with smooth weighted round robin.
//!
//! Plain (`consistent = false`): each try computes `crc32(rehash ‖ key)`, where `rehash` is
//! the try's number in decimal and is left out on the first try; `(crc >> 16) & 0x7fff` is
//! added to a running hash, and `running mod total_weight` walks the backends subtracting
//! weights (found here by binary search over cumulative weights: the same backend, in O(log n)).
//! The total counts every backend, `down` or failed ones included, as nginx's does.
//! A backend that cannot be used (down, failed, already tried) means another try; after 20
//! failed tries, round robin.
//!
//! Consistent: the key lands on nginx's ketama ring ([`crate::ring`]) at `crc32(key)`. Among
//! the usable backends with that point's server name, smooth WRR chooses (usually there is just
//! one); if there is none, the next point; after 20 such points, round robin.

use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, Completion, PickCtx};
use crate::ring::{Ring, key_hash};
use crate::smooth::SmoothWeights;

/// nginx gives up on the hash after this many tries that land on an unusable backend.
const MAX_TRIES: u32 = 20;

#[derive(Debug)]
pub struct Hash {
    consistent: bool,
    /// `cumulative[i]`: the weights of backends `0..=i`, down ones included, as of the last
    /// rebuild. nginx walks the backends subtracting weights; a binary search over these lands
    /// on the same backend in O(log n).
    cumulative: Vec<u64>,
    /// The ketama ring, when consistent.
    ring: Ring,
    fallback: SmoothWeights,
}

impl Hash {
    pub fn new(consistent: bool) -> Hash {
        Hash {
            consistent,
            cumulative: Vec::new(),
            ring: Ring::default(),
            fallback: SmoothWeights::default(),
        }
    }

    /// The key, if the hash decides; `None` sends the request to round robin.
    fn key<'k>(&self, ctx: &PickCtx<'k>, backends: &Backends<'_>) -> Option<&'k [u8]> {
        let key = ctx.affinity.filter(|k| !k.is_empty())?;
        (backends.len() >= 2 && self.total_weight() > 0).then_some(key)
    }

    fn total_weight(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }

    fn pick_plain(
        &self,
        key: &[u8],
        ctx: &PickCtx<'_>,
        backends: &Backends<'_>,
    ) -> Option<BackendId> {
        let mut running = 0u32;
        for rehash in 0..=MAX_TRIES {
            let mut crc = crc32fast::Hasher::new();
            if rehash > 0 {
                crc.update(decimal(rehash, &mut [0; 10]));
            }
            crc.update(key);
            running = running.wrapping_add((crc.finalize() >> 16) & 0x7fff);
            let w = u64::from(running) % self.total_weight();
            let id = BackendId(self.cumulative.partition_point(|&c| c <= w) as u32);
            if ctx.usable(id, backends) {
                return Some(id);
            }
        }
        None
    }

    fn pick_consistent(
        &mut self,
        key: &[u8],
        ctx: &PickCtx<'_>,
        backends: &Backends<'_>,
    ) -> Option<BackendId> {
        if self.ring.is_empty() {
            return None;
        }
        let start = self.ring.start(key_hash(key));
        for i in start..=start + MAX_TRIES as usize {
            let group = self.ring.at(i);
            let found = self
                .fallback
                .pick(group.iter().copied().filter(|&id| ctx.usable(id, backends)));
            if found.is_some() {
                return found;
            }
        }
        None
    }
}

/// `n` in decimal, as nginx's `%ui` prints it.
fn decimal(mut n: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

impl Balancer for Hash {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        let mut sum = 0;
        self.cumulative = backends
            .ids()
            .map(|id| {
                sum += u64::from(backends.weight(id));
                sum
            })
            .collect();
        if self.consistent {
            self.ring = Ring::build(backends);
        }
        self.fallback.rebuild(backends);
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        let chosen = match self.key(ctx, backends) {
            Some(key) if self.consistent => self.pick_consistent(key, ctx, backends),
            Some(key) => self.pick_plain(key, ctx, backends),
            None => None,
        };
        chosen.or_else(|| self.fallback.pick_usable(ctx, backends))
    }

    fn on_complete(&mut self, id: BackendId, c: &Completion) {
        self.fallback.on_complete(id, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testing::{Harness, names};
    use crate::ring::server_points;

    /// Bitwise CRC-32 (IEEE, reflected polynomial 0xEDB88320), written from the definition so
    /// the expected values below do not come from the crc32fast crate the code uses.
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

    /// nginx's plain hash written out from the module's formula, first try only.
    fn plain_by_hand(key: &[u8], weights: &[u32]) -> u32 {
        let h = (crc(key) >> 16) & 0x7fff;
        let mut w = h % weights.iter().sum::<u32>();
        let mut i = 0;
        while w >= weights[i] {
            w -= weights[i];
            i += 1;
        }
        i as u32
    }

    /// nginx's ring written out naively: every point of every server, sorted; the first point
    /// at or above crc32(key), wrapping. Uses the independent `crc` above for the key.
    fn ring_by_hand(key: &[u8], servers: &[(&str, u32)]) -> u32 {
        let mut points: Vec<(u32, u32)> = Vec::new();
        for (i, (name, w)) in servers.iter().enumerate() {
            points.extend(server_points(name, *w).map(|p| (p, i as u32)));
        }
        points.sort();
        let h = crc(key);
        points.iter().find(|(p, _)| *p >= h).unwrap_or(&points[0]).1
    }

    #[test]
    fn crc_check_value() {
        assert_eq!(crc(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn plain_pinned_mapping() {
        // crc32("a") = 0xE8B7BE43 (the well-known value); >> 16 & 0x7fff = 0x68B7 = 26807;
        // 26807 mod 3 = 2 -> the third backend.
        // crc32("hello") = 0x3610A686 -> 0x3610 = 13840; 13840 mod 3 = 1.
        assert_eq!(crc(b"a"), 0xE8B7_BE43);
        assert_eq!(crc(b"hello"), 0x3610_A686);
        let mut h = Harness::new(&[1, 1, 1], Hash::new(false));
        assert_eq!(h.pick_with_key(b"a"), Some(BackendId(2)));
        assert_eq!(h.pick_with_key(b"hello"), Some(BackendId(1)));
        // Weights 1, 2, 1 (total 4): 26807 mod 4 = 3 -> past 1 and 2 -> the third;
        // 13840 mod 4 = 0 -> the first.
        let mut h = Harness::new(&[1, 2, 1], Hash::new(false));
        assert_eq!(h.pick_with_key(b"a"), Some(BackendId(2)));
        assert_eq!(h.pick_with_key(b"hello"), Some(BackendId(0)));
    }

    #[test]
    fn plain_matches_the_formula_for_many_keys() {
        let weights = [2, 1, 3, 1];
        let mut h = Harness::new(&weights, Hash::new(false));
        for k in 0..2000 {
            let key = format!("key-{k}");
            assert_eq!(
                h.pick_with_key(key.as_bytes()).unwrap().0,
                plain_by_hand(key.as_bytes(), &weights),
                "{key}"
            );
        }
    }

    #[test]
    fn plain_rehash_prefixes_the_try_number() {
        // Backend 2 of [1,1,1] is down: "a" (first try -> 2, see above) rehashes:
        // crc32("1a") >> 16 & 0x7fff added to 26807, mod 3.
        let second = 26807 + ((crc(b"1a") >> 16) & 0x7fff);
        let mut expected = second % 3;
        if expected == 2 {
            expected = (second + ((crc(b"2a") >> 16) & 0x7fff)) % 3;
        }
        let mut h = Harness::new(&[1, 1, 1], Hash::new(false));
        h.mark_down(2);
        assert_eq!(h.pick_with_key(b"a"), Some(BackendId(expected)));
    }

    #[test]
    fn consistent_matches_a_naive_ring() {
        let servers = [
            ("10.0.0.1:80", 1),
            ("10.0.0.2:80", 2),
            ("10.0.0.3:80", 1),
            ("10.0.0.4:80", 3),
        ];
        let weights: Vec<u32> = servers.iter().map(|s| s.1).collect();
        let mut h = Harness::new(&weights, Hash::new(true));
        for k in 0..2000 {
            let key = format!("/item/{k}");
            assert_eq!(
                h.pick_with_key(key.as_bytes()).unwrap().0,
                ring_by_hand(key.as_bytes(), &servers),
                "{key}"
            );
        }
    }

    #[test]
    fn consistent_shares_follow_weights() {
        let weights = [1, 2, 1, 4];
        let mut h = Harness::new(&weights, Hash::new(true));
        let mut counts = [0u32; 4];
        let n = 40_000;
        for k in 0..n {
            counts[h.pick_with_key(format!("k{k}").as_bytes()).unwrap().index()] += 1;
        }
        for (c, w) in counts.iter().zip(weights) {
            let share = f64::from(*c) / f64::from(n);
            let want = f64::from(w) / 8.0;
            // 160 points per weight unit leave a few percent of imbalance.
            assert!((share - want).abs() < 0.05, "{counts:?}");
        }
    }

    #[test]
    fn consistent_down_backend_moves_only_its_keys() {
        let mut h = Harness::new(&[1, 1, 1, 1], Hash::new(true));
        let keys: Vec<String> = (0..1000).map(|k| format!("user{k}")).collect();
        let before: Vec<BackendId> = keys
            .iter()
            .map(|k| h.pick_with_key(k.as_bytes()).unwrap())
            .collect();
        h.mark_down(1);
        for (k, was) in keys.iter().zip(before) {
            let now = h.pick_with_key(k.as_bytes()).unwrap();
            assert_ne!(now, BackendId(1));
            if was != BackendId(1) {
                assert_eq!(now, was, "{k} moved");
            }
        }
    }

    #[test]
    fn retry_with_exclude_never_repeats() {
        for consistent in [false, true] {
            let mut h = Harness::new(&[1, 1, 1], Hash::new(consistent));
            let first = h.pick_with_key(b"session-42").unwrap();
            let second = h.pick_with_key_excluding(b"session-42", &[first]).unwrap();
            assert_ne!(second, first);
            let third = h
                .pick_with_key_excluding(b"session-42", &[first, second])
                .unwrap();
            assert!(third != first && third != second);
            assert_eq!(
                h.pick_with_key_excluding(b"session-42", &[first, second, third]),
                None
            );
        }
    }

    #[test]
    fn all_but_one_down() {
        for consistent in [false, true] {
            let mut h = Harness::new(&[1, 1, 1, 1], Hash::new(consistent));
            for i in 0..3 {
                h.mark_down(i);
            }
            for k in 0..100 {
                let key = format!("k{k}");
                assert_eq!(h.pick_with_key(key.as_bytes()), Some(BackendId(3)));
            }
            h.mark_down(3);
            assert_eq!(h.pick_with_key(b"k"), None);
        }
    }

    #[test]
    fn no_key_is_round_robin() {
        // Smooth WRR 5,1,1 gives a a b a c a a (DESIGN §3), with no key and with an empty one.
        let mut h = Harness::new(&[5, 1, 1], Hash::new(true));
        assert_eq!(names(&h.picks(7)), "aabacaa");
        let mut h = Harness::new(&[5, 1, 1], Hash::new(false));
        let empty: Vec<BackendId> = (0..7).map(|_| h.pick_with_key(b"").unwrap()).collect();
        assert_eq!(names(&empty), "aabacaa");
    }

    #[test]
    fn same_name_shares_points_by_smooth_wrr() {
        // Two backends under one name share every point: smooth WRR between them (2:1).
        let mut h = Harness::new(&[2, 1], Hash::new(true));
        h.states[1].spec.name = h.states[0].spec.name.clone();
        h.balancer.rebuild(&Backends::new(&h.states, h.now));
        let picks: Vec<BackendId> = (0..6).map(|_| h.pick_with_key(b"x").unwrap()).collect();
        assert_eq!(names(&picks), "abaaba");
    }
}
