//! `new_hash`: the NEW_HASH algorithm of seed 000 (Ma & Chi, "Evaluation Test and Improvement
//! of Load Balancing Algorithms of Nginx", IEEE Access 2022, §III, Figs. 6 and 11, Algorithm 5),
//! a variant of nginx's `ip_hash` with a different hash function and a binary search.
//!
//! The hash starts at 89 and takes each byte as `hash = (hash·33 + byte) ^ (hash >> 16)` — the
//! times-33 step of Bernstein's hash, with the high half folded into the low half as Java's
//! `HashMap` does (both sides use the hash before the update). The paper patches nginx's
//! `ngx_http_upstream_get_ip_hash_peer`, where `hash` is an `ngx_uint_t`, so the arithmetic here
//! is 64-bit and wraps. `hash mod total_weight` is then located among the cumulative weights by
//! a binary search (O(log n)); the cumulative weights are built in `rebuild`, in configuration
//! order, and count every backend, down or not, as `ip_hash` does.
//!
//! The paper's own search sorts the weights and subtracts single weights during the search,
//! which is not a weighted choice; this is its intent — the backend `ip_hash`'s walk would
//! find, found in O(log n). See docs/algorithms.md for the exact differences.
//!
//! If the chosen backend cannot be used, the byte loop runs again from the current hash, as
//! nginx's `ip_hash` does; after 20 rehashes, and for a request without an address, smooth
//! weighted round robin decides.

use crate::algorithm::Octets;
use crate::backend::{BackendId, Backends};
use crate::balancer::{Balancer, Completion, PickCtx};
use crate::smooth::SmoothWeights;

/// The hash's initial value (the paper keeps nginx's 89), its multiplier, and the number of
/// rehashes before giving up on the hash (nginx's `ip_hash` limit, which the paper keeps).
const HASH_INIT: u64 = 89;
const HASH_MUL: u64 = 33;
const MAX_TRIES: u32 = 20;

#[derive(Debug)]
pub struct NewHash {
    octets: Octets,
    /// `cumulative[i]` is the sum of the weights of backends `0..=i`.
    cumulative: Vec<u64>,
    fallback: SmoothWeights,
}

impl NewHash {
    pub fn new(octets: Octets) -> NewHash {
        NewHash {
            octets,
            cumulative: Vec::new(),
            fallback: SmoothWeights::default(),
        }
    }

    /// The bytes hashed: the first three octets of an IPv4 address with [`Octets::Three`],
    /// else the whole key (all four IPv4 octets, or the sixteen of an IPv6 address).
    fn hashed_bytes<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        if key.len() == 4 && self.octets == Octets::Three {
            &key[..3]
        } else {
            key
        }
    }
}

/// One pass of the byte loop, from `hash`.
#[inline]
fn hash_bytes(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash = hash.wrapping_mul(HASH_MUL).wrapping_add(u64::from(b)) ^ (hash >> 16);
    }
    hash
}

impl Balancer for NewHash {
    fn rebuild(&mut self, backends: &Backends<'_>) {
        let mut sum = 0u64;
        self.cumulative = backends
            .ids()
            .map(|id| {
                sum += u64::from(backends.weight(id));
                sum
            })
            .collect();
        self.fallback.rebuild(backends);
    }

    fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        let total = self.cumulative.last().copied().unwrap_or(0);
        let key = match ctx.affinity {
            Some(key) if total > 0 => self.hashed_bytes(key),
            _ => return self.fallback.pick_usable(ctx, backends),
        };
        let mut hash = HASH_INIT;
        for _ in 0..=MAX_TRIES {
            hash = hash_bytes(hash, key);
            let w = hash % total;
            // The first backend whose cumulative weight exceeds `w`: the one a walk
            // subtracting weights in configuration order stops at.
            let id = BackendId(self.cumulative.partition_point(|&c| c <= w) as u32);
            if ctx.usable(id, backends) {
                return Some(id);
            }
        }
        self.fallback.pick_usable(ctx, backends)
    }

    fn on_complete(&mut self, id: BackendId, c: &Completion) {
        self.fallback.on_complete(id, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testing::Harness;

    #[test]
    fn hash_values_by_hand() {
        // 10.0.0.1, from 89 (each step uses the hash before it: h' = (h·33 + b) ^ (h >> 16)):
        //   b=10: 89·33 + 10 = 2947, 89 >> 16 = 0            -> 2947
        //   b=0:  2947·33 = 97251, 2947 >> 16 = 0            -> 97251
        //   b=0:  97251·33 = 3209283, 97251 >> 16 = 1        -> 3209283 ^ 1 = 3209282
        //   b=1:  3209282·33 + 1 = 105906307, 3209282 >> 16 = 48
        //         105906307 = 105906304 + 0b000011, ^ 0b110000 -> 105906304 + 51 = 105906355
        // (checked independently with a three-line Python loop).
        assert_eq!(hash_bytes(HASH_INIT, &[10]), 2947);
        assert_eq!(hash_bytes(HASH_INIT, &[10, 0, 0]), 3_209_282);
        assert_eq!(hash_bytes(HASH_INIT, &[10, 0, 0, 1]), 105_906_355);
    }

    #[test]
    fn mapping_by_hand() {
        // Weights 1, 1, 1: 3209282 mod 3 = 2 (digit sum 26) -> c with three octets;
        // 105906355 mod 3 = 1 (digit sum 34) -> b with all four.
        let mut three = Harness::new(&[1, 1, 1], NewHash::new(Octets::Three));
        let mut all = Harness::new(&[1, 1, 1], NewHash::new(Octets::All));
        assert_eq!(three.pick_with_key(&[10, 0, 0, 1]), Some(BackendId(2)));
        assert_eq!(all.pick_with_key(&[10, 0, 0, 1]), Some(BackendId(1)));
        // Weights 2, 1, 3 (cumulative 2, 3, 6): 3209282 mod 6 = 2 (even, 2 mod 3) -> the
        // first cumulative weight above 2 is b's.
        let mut weighted = Harness::new(&[2, 1, 3], NewHash::new(Octets::Three));
        assert_eq!(weighted.pick_with_key(&[10, 0, 0, 1]), Some(BackendId(1)));
    }

    #[test]
    fn binary_search_matches_the_walk_subtracting_weights() {
        // The intent of the paper's search: the backend nginx's ip_hash walk stops at.
        let weights = [3u32, 1, 4, 1, 5, 9, 2, 6];
        let mut h = Harness::new(&weights, NewHash::new(Octets::All));
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        for i in 0..2000u32 {
            let addr = [172, 16, (i >> 8) as u8, i as u8];
            let mut w = hash_bytes(HASH_INIT, &addr) % total;
            let mut walk = 0;
            while w >= u64::from(weights[walk]) {
                w -= u64::from(weights[walk]);
                walk += 1;
            }
            assert_eq!(h.pick_with_key(&addr), Some(BackendId(walk as u32)));
        }
    }

    #[test]
    fn shares_follow_weights_over_many_addresses() {
        // 65536 addresses 10.x.y.1 (distinct /24s): the mapping spreads them by weight.
        let weights = [1u32, 2, 3, 4];
        let mut h = Harness::new(&weights, NewHash::new(Octets::Three));
        let mut counts = [0u32; 4];
        for x in 0..=255u8 {
            for y in 0..=255u8 {
                counts[h.pick_with_key(&[10, x, y, 1]).unwrap().index()] += 1;
            }
        }
        for (got, w) in counts.iter().zip(weights) {
            let want = 65536.0 * f64::from(w) / 10.0;
            assert!(
                (f64::from(*got) - want).abs() < 0.03 * want,
                "{counts:?} vs weights {weights:?}"
            );
        }
    }

    #[test]
    fn three_octets_keep_a_slash_24_together_and_all_octets_split_it() {
        let mut three = Harness::new(&[1, 1, 1, 1], NewHash::new(Octets::Three));
        let mut all = Harness::new(&[1, 1, 1, 1], NewHash::new(Octets::All));
        let mut seen_three = std::collections::HashSet::new();
        let mut seen_all = std::collections::HashSet::new();
        for last in 0..=255u8 {
            seen_three.insert(three.pick_with_key(&[192, 168, 7, last]).unwrap());
            seen_all.insert(all.pick_with_key(&[192, 168, 7, last]).unwrap());
        }
        assert_eq!(seen_three.len(), 1);
        assert_eq!(seen_all.len(), 4);
    }

    #[test]
    fn ipv6_hashes_all_sixteen_bytes_whatever_the_octets_option() {
        let mut h = Harness::new(&[1, 1, 1], NewHash::new(Octets::Three));
        let mut seen = std::collections::HashSet::new();
        for last in 0..64u8 {
            let mut addr = [0u8; 16];
            addr[0] = 0x20;
            addr[1] = 0x01;
            addr[15] = last;
            let id = h.pick_with_key(&addr).unwrap();
            let w = hash_bytes(HASH_INIT, &addr) % 3;
            assert_eq!(id, BackendId(w as u32));
            seen.insert(id);
        }
        assert_eq!(seen.len(), 3);
    }

    #[test]
    fn unusable_choice_rehashes_from_the_current_hash() {
        // 10.0.0.x on 1, 1, 1 hashes to c (3209282 mod 3 = 2). With c down the byte loop runs
        // again from 3209282; the next hash, computed independently, picks the backend.
        let mut h = Harness::new(&[1, 1, 1], NewHash::new(Octets::Three));
        h.mark_down(2);
        let again = hash_bytes(3_209_282, &[10, 0, 0]);
        let want = again % 3;
        assert_ne!(want, 2, "the example must not land on c again");
        assert_eq!(
            h.pick_with_key(&[10, 0, 0, 1]),
            Some(BackendId(want as u32))
        );
        // Other keys never move while their backend is up.
        let mut up = Harness::new(&[1, 1, 1], NewHash::new(Octets::Three));
        for i in 0..200u8 {
            let before = up.pick_with_key(&[10, i, 3, 1]).unwrap();
            let now = h.pick_with_key(&[10, i, 3, 1]).unwrap();
            assert_ne!(now, BackendId(2));
            if before != BackendId(2) {
                assert_eq!(now, before);
            }
        }
    }

    #[test]
    fn no_key_is_smooth_wrr_and_all_down_but_one_still_served() {
        let mut h = Harness::new(&[5, 1, 1], NewHash::new(Octets::Three));
        let seq: Vec<BackendId> = h.picks(7);
        assert_eq!(crate::algorithms::testing::names(&seq), "aabacaa");
        h.mark_down(0);
        h.mark_down(1);
        for i in 0..50u8 {
            assert_eq!(h.pick_with_key(&[i, i, i, 1]), Some(BackendId(2)));
        }
        h.mark_down(2);
        assert_eq!(h.pick_with_key(&[1, 2, 3, 4]), None);
    }
}
